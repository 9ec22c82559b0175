"""The report page: one HTML file holding plotly's JavaScript, the report data as JSON
(``<script type="application/json" id="pawn-data">``) and a small vanilla-JS app (no framework)
that draws the pages: Runs, Run, Compare, Sweep, Games, Eval / bench.

The Compare page smooths with TensorBoard's debiased exponential moving average
(tensorboard/plugins/scalar/vz_line_chart2 ``smoothing``): ``last = last·w + (1−w)·y``,
``shown = last / (1 − w^n)`` after the n-th finite point (``window.pawnEma(ys, w)``).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from pawn.fileio import json_safe

CSS = r"""
:root { --fg:#1d2433; --muted:#5d6677; --line:#dde2ea; --bg:#f6f7f9; --card:#fff; --accent:#2f6fdb; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; color:var(--fg); background:var(--bg); }
header { background:#17202e; color:#fff; padding:10px 20px; display:flex; align-items:center; gap:24px; }
header h1 { font-size:17px; margin:0; font-weight:600; letter-spacing:.2px; }
header .meta { color:#aab3c2; font-size:12px; }
nav { display:flex; gap:2px; }
nav button { background:none; border:0; color:#c9d1de; padding:7px 13px; font-size:14px; cursor:pointer; border-radius:5px; }
nav button.active { background:#2f3b50; color:#fff; }
nav button:hover { color:#fff; }
main { padding:16px 20px 40px; }
.page { display:none; } .page.active { display:block; }
h2 { font-size:16px; margin:18px 0 8px; } h3 { font-size:14px; margin:14px 0 6px; }
.card { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:12px 14px; margin-bottom:14px; }
table { border-collapse:collapse; width:100%; background:var(--card); font-size:13px; }
th, td { text-align:left; padding:5px 8px; border-bottom:1px solid var(--line); white-space:nowrap; }
th { background:#eef1f5; font-weight:600; position:sticky; top:0; }
th.sortable { cursor:pointer; user-select:none; } th.sortable:hover { color:var(--accent); }
td.num, th.num { text-align:right; font-variant-numeric: tabular-nums; }
.tablewrap { overflow:auto; max-height:70vh; border:1px solid var(--line); border-radius:8px; }
a { color:var(--accent); text-decoration:none; cursor:pointer; } a:hover { text-decoration:underline; }
.state { padding:1px 7px; border-radius:9px; font-size:12px; }
.state.complete { background:#dff3e4; color:#1d6b35; } .state.running { background:#dde9fd; color:#1d4fa8; }
.state.stopped { background:#fdf0d5; color:#85570c; } .state.failed { background:#fbe0df; color:#9b1c1c; }
.state.unknown { background:#eceef1; color:#555; }
.kpis { display:flex; flex-wrap:wrap; gap:10px; margin:4px 0 14px; }
.kpi { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:8px 14px; min-width:130px; }
.kpi .v { font-size:20px; font-weight:600; font-variant-numeric: tabular-nums; } .kpi .k { color:var(--muted); font-size:12px; }
.plots { display:grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap:14px; }
/* no padding: plotly sizes its svg to the div's border-box width, which padding made overflow the grid cell */
.plot { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:0; overflow:hidden; min-width:0; min-height:330px; }
.controls { display:flex; flex-wrap:wrap; gap:16px; align-items:center; margin-bottom:12px; }
.controls label { color:var(--muted); } select, input[type=range] { vertical-align:middle; }
.muted { color:var(--muted); } .empty { color:var(--muted); padding:20px; text-align:center; }
.games { display:grid; grid-template-columns: 300px 380px 1fr; gap:14px; align-items:start; }
.gamelist { max-height:560px; overflow:auto; } .gamelist div { padding:5px 8px; border-bottom:1px solid var(--line); cursor:pointer; }
.gamelist div.sel { background:#e8f0fe; } .board svg { display:block; }
.moves { max-height:480px; overflow:auto; font-family:ui-monospace,monospace; font-size:13px; }
.moves span { padding:1px 4px; cursor:pointer; border-radius:3px; } .moves span.cur { background:#2f6fdb; color:#fff; }
.btns button { font-size:15px; padding:3px 10px; margin-right:3px; }
code { background:#eef1f5; padding:1px 4px; border-radius:3px; }
.games.with-top { grid-template-columns: 260px 380px 330px 1fr; }
.topmoves h3 { margin-top:0; } .topmoves table td { padding:3px 6px; }
.topmoves tr.played td { background:#fff6d6; font-weight:600; }
.topmoves .bar { height:9px; background:#2f6fdb; border-radius:2px; display:inline-block; vertical-align:middle; }
.warn { background:#fbe0df; color:#8d1c1c; border-radius:6px; padding:6px 9px; margin:8px 0; font-size:13px; }
.note { background:#eef3fd; color:#1d3f7a; border-radius:6px; padding:6px 9px; margin:8px 0; font-size:13px; }
.moves span.ill { box-shadow: inset 0 -2px 0 #d62728; } .moves span.forfeit { background:#fbe0df; }
.moves span.ill.cur, .moves span.forfeit.cur { background:#2f6fdb; }
.suite-grid { display:grid; grid-template-columns: minmax(380px, 1fr) minmax(380px, 1.3fr); gap:14px; align-items:start; }
.suite-model { border-top:1px solid var(--line); padding-top:8px; margin-top:10px; } .suite-diag { max-width:900px; }
td.best { font-weight:700; color:#1d6b35; }
"""

APP_FILE = "app.js"
"""The page's app (vanilla JS, no framework): ``app.js`` beside this module, shipped in the wheel
as package data and read once by :func:`app_js`."""


@functools.lru_cache(maxsize=1)
def app_js() -> str:
    """The text of the page's app, :data:`APP_FILE` of this package (``importlib.resources``, so
    it is read from the installed wheel as from a source checkout).

    Raises:
        FileNotFoundError: the package was installed without its ``app.js``.
    """
    return resources.files(__package__).joinpath(APP_FILE).read_text("utf-8")


PAGES = (("runs", "Runs"), ("run", "Run"), ("compare", "Compare"), ("sweep", "Sweep"), ("games", "Games"),
         ("evals", "Eval / bench"))


def render(data: dict[str, Any], plotly_js: str, title: str = "PAWN report") -> str:
    """The whole page: ``data`` (JSON-ready; NaN becomes null) embedded with ``plotly_js``
    (plotly.js's source, ``plotly.offline.get_plotlyjs()``) and the app. ``</`` inside the JSON
    is written ``<\\/`` so no string in the data can end the script element."""
    blob = json.dumps(json_safe(data), separators=(",", ":"), allow_nan=False).replace("</", "<\\/").replace("<!--", "<\\!--")
    nav = "".join(f'<button data-page="{p}">{label}</button>' for p, label in PAGES)
    pages = "".join(f'<section class="page" id="page-{p}"></section>' for p, _ in PAGES)
    esc = title.replace("&", "&amp;").replace("<", "&lt;")
    meta = f'{data.get("generated", "")} · pawn {data.get("pawn_version", "")}'
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            # no favicon request: a browser asks /favicon.ico of `pawn dashboard`, and a 404 is a console error
            "<link rel=\"icon\" href=\"data:,\">"
            f"<title>{esc}</title><style>{CSS}</style>\n<script>{plotly_js}</script>\n</head><body>"
            f"<header><h1>{esc}</h1><nav>{nav}</nav><span class=\"meta\">{meta}</span></header><main>{pages}</main>\n"
            f"<script type=\"application/json\" id=\"pawn-data\">{blob}</script>\n<script>{app_js()}</script>\n</body></html>\n")
