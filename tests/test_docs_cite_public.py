"""User docs (README, docs/, examples/, every command's --help, the lab's settings schemas and the
report page's text) state facts or cite public sources: no "the spec", issue numbers, sessions or
other words about how the project was made (issue 42 item 8 found "the v2 design specification
(not in this repository)", "the spec's sizes", "spec training §1.1" in lab_schema, "the issue's ≥ 1.6×",
"the shared 2-core CPU"), and the strategy count the docs give is the CLI's."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = re.compile(r"\bspec\b|\bspec's\b|specification|not in this repository|\bissues? ?\d*\b(?!\])|\bsessions?\b"
                       r"|shared 2-core|\bthe shared (?:games|folder|Lichess)", re.I)
# an MCP client's session (docs/lab.md) is the protocol's word, not the project's history
ALLOWED = re.compile(r"A session \(tool calls")


def _hits(text: str) -> list[str]:
    out = []
    for m in FORBIDDEN.finditer(text):
        around = text[max(0, m.start() - 60): m.end() + 60]
        if not ALLOWED.search(text[max(0, m.start() - 2): m.end() + 15]):
            out.append(" ".join(around.split()))
    return out


def _docs() -> list[Path]:
    """README, docs/ and examples/ (less the compressed Lichess games of examples/lichess)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(p for p in (ROOT / "examples").rglob("*")
                                                                                 if p.is_file() and not p.name.endswith(".zst"))]


@pytest.mark.parametrize("path", _docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_user_docs_cite_nothing_a_user_cannot_see(path):
    assert _hits(path.read_text("utf-8")) == []


@pytest.mark.parametrize("command", ["pretrain", "adapt", "sweep"])
def test_lab_schemas_cite_nothing_a_user_cannot_see(command):
    from pawn.lab.tools import lab_schema

    assert _hits(json.dumps(lab_schema(command)["schema"], ensure_ascii=False)) == []


def test_report_page_text_cites_nothing_a_user_cannot_see():
    from pawn.report import page

    assert [h for h in _hits(Path(page.__file__).read_text("utf-8")) if "§" in h or "spec" in h.lower()] == []


def test_the_docs_strategy_count_is_the_clis():
    from pawn.train.adapt_config import STRATEGIES

    words = {10: "ten", 11: "eleven", 12: "twelve"}
    n = words[len(STRATEGIES)]
    text = (ROOT / "docs" / "adapters.md").read_text("utf-8")
    assert f"## The {n} strategies, one command each" in text
    block = text.split(f"## The {n} strategies, one command each", 1)[1].split("```")[1]
    assert sorted(re.findall(r"--strategy (\S+)", block)) == sorted(STRATEGIES)
    assert f"the {n} strategies" in (ROOT / "docs" / "reference.md").read_text("utf-8")


def test_help_of_every_command_cites_nothing_a_user_cannot_see():
    from pawn.cli import app

    for cmd in ("pretrain", "adapt", "sweep", "eval", "probe", "generate", "bench", "play", "convert", "data", "report",
                "dashboard", "uci", "lab"):
        r = CliRunner().invoke(app, [cmd, "--help"], terminal_width=200)
        if r.exit_code != 0:  # a command this build does not have
            continue
        assert _hits(r.output) == [], cmd


def test_readme_play_section_says_stockfish_is_needed_and_how_to_get_it():
    # The Play section's ladder has a Stockfish rung, but never said Stockfish must be installed.
    readme = (ROOT / "README.md").read_text("utf-8")
    play = readme.split("## Play", 1)[1].split("\n## ", 1)[0]
    assert "sf-1350" in play
    assert "needs the Stockfish engine" in play and "apt-get\ninstall stockfish" in play and "--stockfish PATH" in play
