"""What a `pawn report` page embeds, read as its script reads it (tests of the report, the suite
and the dashboard share it)."""

from __future__ import annotations

import json
import re
from pathlib import Path


def page_data(html: str) -> dict:
    """The JSON of the page's ``<script id="pawn-data">`` (what its app draws)."""
    m = re.search(r'<script type="application/json" id="pawn-data">(.*?)</script>', html, re.S)
    assert m, "no embedded data"
    return json.loads(m.group(1).replace("<\\/", "</"))


def embedded(html_path: Path) -> dict:
    """:func:`page_data` of a report file."""
    return page_data(Path(html_path).read_text("utf-8"))
