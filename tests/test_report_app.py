"""The report page's app is a real JavaScript file of the package (``pawn/report/app.js``), shipped
in the wheel and embedded in every page (the headless-browser test in test_report.py runs it)."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

from pawn.report.page import APP_FILE, app_js, render

ROOT = Path(__file__).resolve().parents[1]


def test_the_page_embeds_the_packaged_app_file():
    text = (ROOT / "src" / "pawn" / "report" / APP_FILE).read_text("utf-8")
    assert app_js() == text and "document.getElementById('pawn-data')" in text
    page = render({"runs": []}, plotly_js="/* plotly */")
    assert f"<script>{text}</script>" in page


def test_the_wheel_ships_the_app_file():
    # maturin packs every file under python-source's package (pyproject [tool.maturin]) except
    # what `exclude` names: app.js must be under it and excluded by no pattern
    maturin = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["maturin"]
    src = ROOT / maturin["python-source"]
    assert (src / "pawn" / "report" / APP_FILE).is_file()
    rel = f"pawn/report/{APP_FILE}"
    for pattern in maturin.get("exclude", []):
        pat = pattern if isinstance(pattern, str) else pattern.get("path", "")
        assert not fnmatch.fnmatch(rel, pat) and not fnmatch.fnmatch(f"{maturin['python-source']}/{rel}", pat), pattern
