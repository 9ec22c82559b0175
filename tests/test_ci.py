"""`.ci/run` does exactly what README.md tells a new user, in a fresh virtual environment."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SETUP_PREFIXES = ("set -euo pipefail", 'cd "$(dirname "$0")/.."', "python3 -m venv", ". .venv-ci/bin/activate",
                  "python -m pip install -q --upgrade pip")


def _commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


HARNESS = ('section() { echo "=== README: $1 ($(date -u +%T))"; }', "set -m", "dashboard=$!", "set +m",
           'kill -INT "$dashboard"', 'wait "$dashboard"')
"""Lines of `.ci/run` that are not README commands: the section banner and the handling of the
README's `pawn dashboard runs/`, which serves until Ctrl-C (it runs in the background, its page is
fetched, then it gets SIGINT and must exit 0)."""


def _ci_commands(text: str) -> list[str]:
    """`.ci/run`'s commands with the set-up, the harness lines and heredoc bodies (the checks run
    on the dashboard's page) left out, and ``pawn dashboard runs/ &`` read as the README's line."""
    text = re.sub(r"<<'(\w+)'\n.*?\n\1\n", "\n", text, flags=re.S)
    out = []
    for c in _commands(text):
        if c.startswith(SETUP_PREFIXES) or c in HARNESS or c.startswith("section ") or c == "python -":
            continue
        out.append(c[:-2] if c.startswith("pawn dashboard ") and c.endswith(" &") else c)
    return out


def test_ci_runs_every_readme_command_in_order_and_nothing_else():
    readme = (REPO_ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    assert len(blocks) >= 6, "install, tests, adapt, sweep, play, report: the README's short path"
    wanted = [c for b in blocks for c in _commands(b)]
    assert _ci_commands((REPO_ROOT / ".ci" / "run").read_text()) == wanted


def test_ci_check_catches_a_readme_command_missing_from_ci():
    """The same comparison fails when `.ci/run` drops a README line or adds one of its own."""
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "pawn adapt --list-strategies\n" in ci
    dropped = _ci_commands(ci.replace("pawn adapt --list-strategies\n", ""))
    added = _ci_commands(ci.replace("section \"done\"", "pawn eval runs/tiny\nsection \"done\""))
    full = _ci_commands(ci)
    assert len(dropped) == len(full) - 1 and added == full + ["pawn eval runs/tiny"]
    assert "pawn dashboard runs/" in full and not any(c.startswith("import ") for c in full)


def test_ci_venv_is_recreated_on_every_run():
    # `python3 -m venv DIR` keeps an existing DIR with everything installed by an earlier run.
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert re.search(r"python3 -m venv --clear \.venv-ci", ci)


def test_engine_page_demo_prints_what_the_page_says():
    readme = (REPO_ROOT / "docs" / "engine.md").read_text()
    demo = re.search(r'python -c "(.*random_games.*)"', readme).group(1)
    shape, mean = re.search(r"`(\(\d+, \d+\)) ([\d.]+)` for seed 0", readme).groups()
    from pawn.engine import random_games

    g = random_games(1000, max_ply=512, seed=0)
    assert "random_games(1000, max_ply=512, seed=0)" in demo
    assert (str(g.tokens.shape), f"{g.lengths.mean():.3f}") == (shape, mean)


def test_slow_tests_exist_are_deselected_by_default_and_the_readme_runs_them():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    ini = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m 'not slow'" in ini["addopts"] and any(m.startswith("slow:") for m in ini["markers"])
    marked = [f.name for f in (REPO_ROOT / "tests").glob("test_*.py") if "@pytest.mark.slow\n" in f.read_text()]
    assert marked, "the README promises slow tests; none is marked"
    readme = (REPO_ROOT / "README.md").read_text()
    tests_block = re.findall(r"```bash\n(.*?)```", readme, re.S)[1]
    assert _commands(tests_block)[-2:] == ["pytest -n 2 --dist loadfile", "pytest -n 2 --dist loadfile -m slow"]


def _torch_line() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    block = re.findall(r"## Run the tests\n\n```bash\n(.*?)```", readme, re.S)[0]
    lines = _commands(block)
    extras = lines.index("pip install 'pawn[test,torch,peft,dashboard,lab]'")
    torch = [c for c in lines[:extras] if "torch" in c]
    assert len(torch) == 1, "one line before the extras installs torch"
    return torch[0]


def test_readme_installs_the_cpu_torch_without_a_gpu_and_goes_on_where_its_index_is_unreachable(tmp_path):
    # The README's test install pulled PyPI's CUDA torch (5.7 GB) on a CPU-only machine. Its torch line
    # runs here under bash with `pip` and `nvidia-smi` as small recording programs on PATH (the line's
    # logic is what is tested; pip itself is measured in docs/reference.md), under `set -euo pipefail`
    # as .ci/run runs it.
    import os
    import subprocess

    line = _torch_line()
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "pip.log"

    def run(pip_rc: int, gpu: bool) -> tuple[int, list[str]]:
        log.write_text("")
        (bin_ / "pip").write_text(f'#!/bin/sh\necho "$@" >> {log}\nexit {pip_rc}\n')
        (bin_ / "pip").chmod(0o755)
        if gpu:
            (bin_ / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
            (bin_ / "nvidia-smi").chmod(0o755)
        elif (bin_ / "nvidia-smi").exists():
            (bin_ / "nvidia-smi").unlink()
        env = {**os.environ, "PATH": f"{bin_}:/usr/bin:/bin"}
        r = subprocess.run(["bash", "-c", f"set -euo pipefail\n{line}\necho after"], env=env, capture_output=True, text=True,
                           timeout=60)
        assert r.stdout.strip().endswith("after") or r.returncode != 0
        return r.returncode, log.read_text().splitlines()

    rc, calls = run(0, gpu=False)  # no GPU, the CPU index reachable: torch from it, one attempt
    assert rc == 0 and calls == ["install --retries 0 --timeout 5 torch --index-url https://download.pytorch.org/whl/cpu"]
    rc, calls = run(1, gpu=False)  # no GPU, the index unreachable (pip fails): the script goes on to the extras
    assert rc == 0 and len(calls) == 1 and "--retries 0" in calls[0] and "--timeout 5" in calls[0]
    rc, calls = run(0, gpu=True)  # an NVIDIA GPU: PyPI's CUDA torch from the extras' line
    assert rc == 0 and calls == []
