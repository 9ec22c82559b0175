"""The report page's app is a real JavaScript file of the package (``pawn/report/app.js``), shipped
in the wheel (test_package_data.py) and embedded in every page (the headless-browser test in
test_report.py runs it)."""

from __future__ import annotations

from pathlib import Path

from pawn.report.page import APP_FILE, app_js, render

ROOT = Path(__file__).resolve().parents[1]


def test_the_page_embeds_the_packaged_app_file():
    text = (ROOT / "src" / "pawn" / "report" / APP_FILE).read_text("utf-8")
    assert app_js() == text and "document.getElementById('pawn-data')" in text
    page = render({"runs": []}, plotly_js="/* plotly */")
    assert f"<script>{text}</script>" in page
