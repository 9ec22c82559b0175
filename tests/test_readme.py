"""The README's `pawn ...` commands run in order on a fresh clone without clobbering each other
(issue 11): a static check of the command lines. No output (--out, --pgn-out, --json, --plot,
--output) is written by two commands or lies inside another command's output; every local path
a command reads was written by an earlier command (and, inside a pretraining run directory,
names something that run writes), or is shared project data; `--resume` continues the run an
earlier command started in the same directory."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from conftest import REPO_ROOT, _shared_dir

from pawn.config import SUPERNETS

OUTPUT_FLAGS = ("--out", "--pgn-out", "--json", "--plot", "--output", "-o", "--peft")
READ_FLAGS = ("--checkpoint", "--pgn", "--config", "--resume", "--prefix")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def readme_commands(text: str) -> list[list[str]]:
    """argv of every line starting with ``pawn `` inside ```bash blocks (comments dropped,
    backslash continuations joined)."""
    cmds, in_bash, pending = [], False, ""
    for line in text.splitlines():
        if line.startswith("```"):
            in_bash = line.strip() in ("```bash", "```sh", "```console") and not in_bash
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
    for n, argv in enumerate(readme_commands(text)):
        cmd = argv[1] if len(argv) > 1 else ""
        positional, opts = _options(argv)
        line = " ".join(argv)
        reads = [_norm(v) for f in READ_FLAGS for v in opts.get(f, []) if v and not (f == "--resume" and v == "auto")]
        if cmd in ("eval", "probe", "convert") and positional:
            reads.append(_norm(positional[0]))
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
            if r.startswith("../shared/"):
                if not (_shared_dir() / Path(r).relative_to("../shared")).exists():
                    problems.append(f"`{line}` reads {r}, which is not in the shared data")
                continue
            if HUB_ID.match(r) and not r.startswith(("runs/", "./", "../")) and not Path(r).suffix:
                continue  # a Hugging Face Hub id
            problems.append(f"`{line}` reads {r}, which no earlier command writes (not on a fresh clone)")
        for o in outs:
            for p, m, pargv, _ in written:
                continuation = resuming and o == p and pargv[1] == "pretrain"
                if not continuation and (_inside(o, p) or _inside(p, o)):
                    problems.append(f"`{line}` writes {o}, over `{' '.join(pargv)}`'s {p}")
            written.append((o, n, argv, opts))
    return problems


def test_readme_has_the_commands_this_check_is_about():
    cmds = readme_commands((REPO_ROOT / "README.md").read_text("utf-8"))
    assert {c[1] for c in cmds} >= {"pretrain", "eval", "probe", "generate", "bench", "convert"}
    assert len(cmds) >= 12


def test_readme_commands_run_in_order_without_clobbering_outputs():
    assert readme_problems((REPO_ROOT / "README.md").read_text("utf-8")) == []


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
