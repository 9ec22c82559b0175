"""The README's and docs pages' `pawn ...` commands (issues 11 and 26): a static check of the
command lines of README.md and then docs/*.md, in the order of DOC_PAGES. Each command's subcommand
exists and the real CLI's parser accepts every flag and argument it gives (nothing is run); no output
(--out, --pgn-out, --json, --plot, --output) is written by two commands or lies inside another
command's output; every local path a command reads was written by an earlier command or a shell
redirection (and, inside a pretraining run directory, names something that run writes), is a file
checked into the repository (examples/), or a Hub id; nothing beside the checkout (../shared) is read, so a
fresh clone runs them as written; `--resume` continues the run an
earlier command started in the same directory. Every relative link of these pages names a file of
the repository, and a `#anchor` a heading of it."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

from conftest import REPO_ROOT

from pawn.config import SUPERNETS

OUTPUT_FLAGS = ("--out", "--pgn-out", "--json", "--plot", "--output", "-o", "--peft")
READ_FLAGS = ("--checkpoint", "--pgn", "--config", "--resume", "--prefix", "--base-config", "--space", "--data", "--init-from",
              "--adapt-data", "--corpus-dir", "--backbone")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
DOC_PAGES = ("engine.md", "pretraining.md", "checkpoints.md", "evaluation.md", "data.md", "adapters.md", "sweeps.md",
             "cluster.md", "lab.md", "play-and-uci.md", "report.md", "measurements.md", "reference.md")
"""docs/ pages, in the order their commands run after the README's (the order the README had them in)."""


def doc_files() -> list[Path]:
    """README.md, then every docs page of :data:`DOC_PAGES`."""
    return [REPO_ROOT / "README.md", *(REPO_ROOT / "docs" / p for p in DOC_PAGES)]


def all_docs_text() -> str:
    return "\n".join(f.read_text("utf-8") for f in doc_files())


def readme_commands(text: str, shell: bool = False) -> list[list[str]]:
    """argv of every line starting with ``pawn `` inside ```bash blocks (comments dropped,
    backslash continuations joined); with ``shell``, also ``["<shell>", "redirect", "--out", FILE]``
    for another command line that writes FILE by a ``>`` redirection."""
    cmds, in_bash, pending = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            in_bash = line.strip() in ("```bash", "```sh", "```shell", "```console") and not in_bash
            continue
        if not in_bash:
            continue
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line.startswith("pawn "):
            cmds.append(shlex.split(line, comments=True))
        elif shell and line and not line.startswith("#"):
            words = shlex.split(line, comments=True)
            outs = [words[i + 1] for i, w in enumerate(words[:-1]) if w in (">", ">>")]
            if outs:  # `printf ... > FILE`: FILE is written here
                cmds.append(["<shell>", "redirect", *(x for o in outs for x in ("--out", o))])
    return cmds


def _options(argv: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    positional, opts, i = [], {}, 2
    while i < len(argv):
        a = argv[i]
        if a.startswith("-"):
            if "=" in a:
                k, v = a.split("=", 1)
                opts.setdefault(k, []).append(v)
            elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                opts.setdefault(a, []).append(argv[i + 1])
                i += 1
            else:
                opts.setdefault(a, []).append("")
        else:
            positional.append(a)
        i += 1
    return positional, opts


def _norm(p: str) -> str:
    return str(Path(p))


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def readme_problems(text: str) -> list[str]:
    """Every clobbered output and every read of something no earlier command wrote."""
    problems: list[str] = []
    written: list[tuple[str, int, list[str], dict]] = []  # (path, command index, argv, options)
    for n, argv in enumerate(readme_commands(text, shell=True)):
        cmd = argv[1] if len(argv) > 1 else ""
        positional, opts = _options(argv)
        line = " ".join(argv)
        reads = [_norm(v) for f in READ_FLAGS for v in opts.get(f, []) if v and not (f == "--resume" and v == "auto")]
        if cmd in ("eval", "probe", "convert", "adapt") and positional:
            reads.append(_norm(positional[0]))
        if cmd == "play" and positional and not positional[0].startswith("uci:"):
            reads.append(_norm(positional[0]))  # a checkpoint (uci:COMMAND starts an engine)
        if cmd == "data" and positional[:1] in (["info"], ["export"]) and len(positional) > 1:
            reads.append(_norm(positional[1]))
        outs = [_norm(v) for f in OUTPUT_FLAGS for v in opts.get(f, []) if v]
        resuming = cmd == "pretrain" and "--resume" in opts
        if resuming and opts.get("--resume") == ["auto"]:
            reads += outs  # --resume auto reads the run in --out
        for r in reads:
            producer = next(((p, a, o) for p, _, a, o in reversed(written) if _inside(r, p)), None)
            if producer is not None:
                p, pargv, popts = producer
                if pargv[1] == "pretrain" and r != p:
                    rel = r[len(p) + 1:]
                    total = int(popts.get("--total-steps", ["0"])[0])
                    sup = popts.get("--supernet", [None])[0]
                    allowed = {"config.json", "metrics.jsonl", f"checkpoints/step_{total:08d}"}
                    if sup in SUPERNETS:
                        allowed |= {f"variants/{v}" for v in SUPERNETS[sup][1]}
                    if rel not in allowed:
                        problems.append(f"`{line}` reads {r}, which `{' '.join(pargv)}` does not write")
                continue
            if not r.startswith("../") and (REPO_ROOT / r).exists() and _tracked(r):
                continue  # a file or folder checked into the repository (examples/...)
            if r.startswith("../"):
                # beside the checkout (e.g. the project's ../shared data folder): a fresh clone has nothing there
                problems.append(f"`{line}` reads {r}, outside the repository (not on a fresh clone; examples/ has data)")
                continue
            if (HUB_ID.match(r) and not r.startswith(("runs/", "./", "../")) and not Path(r).suffix
                    and not (REPO_ROOT / r.split("/")[0]).is_dir()):
                continue  # a Hugging Face Hub id (not a path into a folder of the repository)
            problems.append(f"`{line}` reads {r}, which no earlier command writes (not on a fresh clone)")
        for o in outs:
            for p, m, pargv, _ in written:
                continuation = resuming and o == p and pargv[1] == "pretrain"
                if not continuation and (_inside(o, p) or _inside(p, o)):
                    problems.append(f"`{line}` writes {o}, over `{' '.join(pargv)}`'s {p}")
            written.append((o, n, argv, opts))
    return problems


def _tracked(rel: str) -> bool:
    """``rel`` is checked into the repository (not only present in this working tree)."""
    import subprocess

    r = subprocess.run(["git", "-C", str(REPO_ROOT), "ls-files", "--error-unmatch", rel], capture_output=True)
    return r.returncode == 0 or not (REPO_ROOT / ".git").exists()


def test_readme_has_the_commands_this_check_is_about():
    cmds = readme_commands(all_docs_text())
    assert {c[1] for c in cmds} >= {"pretrain", "eval", "probe", "generate", "bench", "convert", "adapt", "sweep",
                                    "play", "report", "dashboard", "data", "lab"}
    assert len(cmds) >= 40
    short = {c[1] for c in readme_commands((REPO_ROOT / "README.md").read_text("utf-8"))}
    assert short >= {"pretrain", "adapt", "eval", "sweep", "play", "report", "dashboard"}  # the short path
    assert sorted(p.name for p in (REPO_ROOT / "docs").glob("*.md")) == sorted(DOC_PAGES)  # a new page joins the check


def test_readme_commands_run_in_order_without_clobbering_outputs():
    assert readme_problems(all_docs_text()) == []


# ------------------------------------------------------------------ the commands against the real CLI
def cli_problems(cmds: list[list[str]]) -> list[str]:
    """Each ``pawn ...`` command parsed by the real command's Click parser (no callback runs):
    an unknown subcommand, an option the command does not have, an option missing its value or
    more positional arguments than it takes, one line each."""
    import typer

    from pawn.cli import app

    def group(c) -> bool:
        return hasattr(c, "list_commands")

    root = typer.main.get_command(app)
    problems = []
    for argv in cmds:
        line = " ".join(argv)
        cmd, ctx, rest = root, root.context_class(root, info_name="pawn"), argv[1:]
        while group(cmd) and rest and not rest[0].startswith("-"):
            sub = cmd.get_command(ctx, rest[0])
            if sub is None:
                problems.append(f"`{line}`: no command {rest[0]!r} (pawn has {', '.join(cmd.list_commands(ctx))})")
                break
            cmd, ctx, rest = sub, sub.context_class(sub, info_name=rest[0], parent=ctx), rest[1:]
        else:
            if group(cmd):
                if not set(rest) & {"--help", "--version"}:
                    problems.append(f"`{line}`: a command group, no subcommand named")
                continue
            try:
                _, extra, _ = cmd.make_parser(ctx).parse_args(list(rest))
            except Exception as e:  # the parser's usage errors (typer vendors its own click)
                problems.append(f"`{line}`: {type(e).__name__}: {e}")
                continue
            if extra:
                problems.append(f"`{line}`: unexpected argument(s) {extra}")
    return problems


def test_every_documented_command_parses_with_the_real_cli():
    cmds = readme_commands(all_docs_text())
    assert cli_problems(cmds) == []


def test_a_documented_flag_that_does_not_exist_is_caught():
    bad = readme_commands("\n".join([
        "```bash",
        "pawn adapt runs/tiny/variants/large --strategy lora --lora-rnak 4 --out runs/x",
        "pawn pretrain --supernet tiny --total-steps",
        "pawn evaluate runs/tiny",
        "pawn data infos ../shared/data/lichess",
        "pawn eval runs/a runs/b runs/c",
        "pawn adapt runs/tiny/variants/large --strategy lora --lora-rank 4 --out runs/ok",
        "```",
    ]))
    problems = cli_problems(bad)
    assert len(problems) == 5, problems
    assert "No such option: --lora-rnak" in problems[0] and "--total-steps" in problems[1], problems
    assert "no command 'evaluate'" in problems[2] and "no command 'infos'" in problems[3], problems
    assert "unexpected argument" in problems[4], problems


# ------------------------------------------------------------------ links
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation other than ``-``/``_`` dropped,
    spaces as ``-``."""
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return h.replace(" ", "-")


def _anchors(md: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", md.read_text("utf-8"), flags=re.S)
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def link_problems(files: list[Path]) -> list[str]:
    """Every relative link (``[text](path#anchor)``, images too) of ``files`` that names no file
    of the repository, or an anchor that is no heading of the Markdown file it names."""
    problems = []
    for f in files:
        text = re.sub(r"```.*?```", "", f.read_text("utf-8"), flags=re.S)
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            dest = (f.parent / path).resolve() if path else f
            rel = f.relative_to(REPO_ROOT)
            if not dest.exists() or REPO_ROOT not in dest.parents and dest != REPO_ROOT:
                problems.append(f"{rel}: link {target} names no file of the repository")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                problems.append(f"{rel}: link {target}: no heading #{anchor} in {dest.relative_to(REPO_ROOT)}")
    return problems


def test_every_relative_link_resolves():
    files = doc_files()
    assert sum(len(LINK.findall(f.read_text("utf-8"))) for f in files) >= 30
    assert link_problems(files) == []


def test_the_link_check_catches_a_missing_file_and_anchor(tmp_path, monkeypatch):
    page = REPO_ROOT / "docs" / "sweeps.md"
    bad = tmp_path / "bad.md"
    bad.write_text("[a](docs/nope.md) [b](docs/sweeps.md#no-such-heading) [c](docs/sweeps.md#hyperparameter-sweeps) "
                   "[d](https://example.org/x) ![e](docs/report-run.png)\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO_ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "sweeps.md").write_text(page.read_text("utf-8"))
    (tmp_path / "docs" / "report-run.png").write_bytes(b"png")
    assert link_problems([bad]) == ["bad.md: link docs/nope.md names no file of the repository",
                                    "bad.md: link docs/sweeps.md#no-such-heading: no heading #no-such-heading in docs/sweeps.md"]


def test_the_check_catches_the_old_readme_clash_and_missing_inputs():
    old = "\n".join([
        "```bash",
        "pawn pretrain --supernet tiny --total-steps 300 --out runs/tiny",
        "pawn eval runs/tiny/checkpoints/step_00000300 --pgn games.pgn",
        "pawn generate --checkpoint runs/tiny/variants/large --out games.parquet --pgn-out games.pgn",
        "pawn eval runs/tiny/checkpoints/step_00000200",
        "pawn probe runs/tiny/variants/huge",
        "pawn generate --random --out games.parquet",
        "pawn pretrain --config run.toml --out runs/tiny",
        "pawn pretrain --resume auto --out runs/tiny",
        "```",
    ])
    problems = readme_problems(old)
    assert any("reads games.pgn, which no earlier command writes" in p for p in problems), problems
    assert any("step_00000200" in p for p in problems) and any("variants/huge" in p for p in problems), problems
    assert any("writes games.parquet" in p for p in problems), problems
    assert any("reads run.toml" in p for p in problems) and any("writes runs/tiny" in p for p in problems), problems
    assert not any("--resume auto" in p for p in problems), problems  # resuming a run is no clobbering
    assert len(problems) == 6, problems


def test_the_lichess_bot_example_is_the_engine_section_the_docs_show():
    """``examples/lichess-bot/engine.yml`` (what ``play_one_game.py`` ran) and the ``config.yml``
    block of docs/play-and-uci.md are one text: editing one without the other fails here."""
    doc = (REPO_ROOT / "docs" / "play-and-uci.md").read_text()
    i = doc.index("name it in `config.yml`")
    block = doc[i:].split("```yaml\n", 1)[1].split("```", 1)[0]
    example = (REPO_ROOT / "examples" / "lichess-bot" / "engine.yml").read_text()
    assert "\n".join(ln for ln in example.splitlines() if not ln.startswith("#")) + "\n" == block
    script = (REPO_ROOT / "examples" / "lichess-bot" / "pawn-engine").read_text()
    exec_line = next(ln for ln in script.splitlines() if ln.startswith("exec "))
    assert exec_line == "exec /path/to/venv/bin/pawn uci /path/to/checkpoint" and exec_line in doc


def test_the_check_reads_paths_a_fresh_clone_has_and_nothing_beside_the_checkout():
    """``--data`` and the positional inputs of ``adapt``, ``play`` and ``data info``/``export`` are reads: a
    folder of the repository (the README's Lichess sample) or an earlier command's output passes; a missing
    path does not, unless it is a Hub id; ``../shared/...`` (beside the checkout, which a fresh clone lacks) is
    a problem wherever the check runs. A ```shell block counts as bash."""
    text = "\n".join([
        "```shell",
        "pawn pretrain --supernet tiny --total-steps 300 --out runs/tiny",
        "pawn adapt runs/tiny/variants/large --data examples/lichess --out runs/a",
        "pawn adapt runs/tiny/variants/large --data examples/no-such-sample --out runs/b",
        "pawn adapt runs/tiny/variants/large --data someone/lichess-games --out runs/c",
        "pawn adapt runs/tiny/variants/large --data ../shared/data/lichess --out runs/d",
        "pawn adapt runs/tiny/variants/huge --data examples/lichess --out runs/e",
        "pawn data info ../shared/data/lichess",
        "pawn data export examples/lichess --out games.parquet",
        "pawn data info games.parquet",
        "pawn play runs/other/best --vs uci:stockfish",
        "```",
    ])
    assert readme_problems(text) == [
        "`pawn adapt runs/tiny/variants/large --data examples/no-such-sample --out runs/b` reads examples/no-such-sample, "
        "which no earlier command writes (not on a fresh clone)",
        "`pawn adapt runs/tiny/variants/large --data ../shared/data/lichess --out runs/d` reads ../shared/data/lichess, "
        "outside the repository (not on a fresh clone; examples/ has data)",
        "`pawn adapt runs/tiny/variants/huge --data examples/lichess --out runs/e` reads runs/tiny/variants/huge, which "
        "`pawn pretrain --supernet tiny --total-steps 300 --out runs/tiny` does not write",
        "`pawn data info ../shared/data/lichess` reads ../shared/data/lichess, outside the repository (not on a fresh "
        "clone; examples/ has data)",
        "`pawn play runs/other/best --vs uci:stockfish` reads runs/other/best, which no earlier command writes (not on a "
        "fresh clone)"]
