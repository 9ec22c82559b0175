"""`.ci/run` does exactly what README.md tells a new user, in a fresh virtual environment; the README's one
test command (`make test`, that is `scripts/test`) installs what the tests need and runs them."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SETUP_PREFIXES = ("set -euo pipefail", 'cd "$(dirname "$0")/.."', 'export CI="${CI:-true}"', "python3 -m venv",
                  ". .venv-ci/bin/activate", "python -m pip install -q --upgrade pip")
CI_FOR_README = {"make test-all": "make test"}
"""`.ci/run`'s lines that stand for a README line: CI runs the README's `make test` with the slow tests too."""


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
        c = CI_FOR_README.get(c, c)
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


def test_slow_tests_exist_are_deselected_by_default_and_the_test_command_runs_them():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    ini = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m 'not slow'" in ini["addopts"] and any(m.startswith("slow:") for m in ini["markers"])
    marked = [f.name for f in (REPO_ROOT / "tests").glob("test_*.py") if "@pytest.mark.slow\n" in f.read_text()]
    assert marked, "the README promises slow tests; none is marked"
    readme = (REPO_ROOT / "README.md").read_text()
    assert _commands(re.findall(r"## Run the tests\n\n```bash\n(.*?)```", readme, re.S)[0]) == ["make test"]
    script = (REPO_ROOT / "scripts" / "test").read_text()
    pytest_lines = [c for c in _commands(script) if c.startswith('exec "$PYTHON" -m pytest')]
    assert pytest_lines == ['exec "$PYTHON" -m pytest -n 2 --dist loadfile -m "slow or not slow" "$@"',
                            'exec "$PYTHON" -m pytest -n 2 --dist loadfile "$@"']
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert "\nmake test-all\n" in ci


def test_make_targets_run_the_test_script():
    """``make test`` is ``scripts/test``; ``make test-all`` adds ``--slow``; ``PYTEST_ARGS`` reach pytest
    (``make -n`` prints the recipe without running it)."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.fail("make is not installed (apt-get install make): `make test` is the README's test command", pytrace=False)
    import os

    # run from `make test` itself, the suite inherits MAKELEVEL/MAKEFLAGS: a nested make would then
    # print "Entering directory" lines around the recipe
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    runs = {t: subprocess.run(["make", "-n", t, "PYTEST_ARGS=-k vocab"], cwd=REPO_ROOT, capture_output=True, text=True,
                              env=env)
            for t in ("test", "test-all")}
    assert runs["test"].stdout.strip() == "./scripts/test -- -k vocab", runs["test"]
    assert runs["test-all"].stdout.strip() == "./scripts/test --slow -- -k vocab", runs["test-all"]


def _torch_line() -> str:
    script = (REPO_ROOT / "scripts" / "test").read_text()
    lines = {c.strip() for c in _commands(script) if "download.pytorch.org" in c}
    assert len(lines) == 1, "one torch line, used where PAWN and where only torch is missing"
    return lines.pop()


def test_test_script_installs_the_cpu_torch_without_a_gpu_and_goes_on_where_its_index_is_unreachable(tmp_path):
    # The README's test install pulled PyPI's CUDA torch (5.7 GB) on a CPU-only machine. The script's torch
    # line runs here under bash with `pip` and `nvidia-smi` as small recording programs on PATH (the line's
    # logic is what is tested; pip itself is measured in docs/reference.md), under `set -euo pipefail`
    # as scripts/test runs it.
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


def _script_setup(tmp_path, *, uid: int, sudo_ok: bool, present=(), args=("--setup-only",)):
    """``scripts/test ARGS`` with the system programs looked for only in a folder of small recording
    programs (``PAWN_TEST_SEARCH_PATH``): ``apt-get`` and ``sudo`` log their arguments, ``id -u`` prints
    ``uid``, ``sudo -n true`` succeeds when ``sudo_ok``, and each name of ``present`` is there as a program.
    The Python packages are the real environment's (all installed, so pip is not run). Returns the exit
    status, the output and the apt-get and sudo calls."""
    import os
    import subprocess
    import sys

    bin_ = tmp_path / f"bin-{uid}-{sudo_ok}-{'-'.join(present) or 'none'}-{len(args)}"
    bin_.mkdir()
    log = bin_ / "calls.log"
    progs = {"apt-get": f'echo "apt-get $*" >> {log}',
             "sudo": f'echo "sudo $*" >> {log}\n[ "$1" = -n ] && [ "$2" = true ] && exit {0 if sudo_ok else 1}\nexec "$@"',
             "id": f'[ "$1" = -u ] && echo {uid}'}
    progs.update({p: "exit 0" for p in present})
    for name, body in progs.items():
        (bin_ / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_ / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "PAWN_TEST_SEARCH_PATH": str(bin_), "PYTHON": sys.executable}
    r = subprocess.run([str(REPO_ROOT / "scripts" / "test"), *args], env=env, capture_output=True, text=True, timeout=120)
    calls = log.read_text().splitlines() if log.exists() else []
    return r.returncode, r.stdout + r.stderr, calls


def test_test_script_installs_stockfish_chromium_and_postgresql_from_apt_or_says_it_cannot(tmp_path):
    code, out, _ = _script_setup(tmp_path, uid=0, sudo_ok=False, present=("stockfish", "chromium", "initdb"),
                                 args=("--no-install", "--setup-only"))
    assert "missing test packages" not in out, f"this environment lacks some of the test extras: {out}"
    # root, none of the three there: one apt-get install of the three packages, no sudo
    code, out, calls = _script_setup(tmp_path, uid=0, sudo_ok=False)
    assert code == 0, out
    assert calls == ["apt-get update -qq", "apt-get install -y -qq stockfish chromium postgresql"], calls
    assert "installing stockfish chromium postgresql from the system's packages (apt-get)" in out
    # not root, password-less sudo: through sudo, only what is missing
    code, out, calls = _script_setup(tmp_path, uid=1000, sudo_ok=True, present=("stockfish",))
    assert code == 0 and calls == ["sudo -n true", "sudo apt-get update -qq", "apt-get update -qq",
                                   "sudo apt-get install -y -qq chromium postgresql",
                                   "apt-get install -y -qq chromium postgresql"], (calls, out)
    # not root, sudo wants a password: nothing installed, one line per program, and the script goes on
    code, out, calls = _script_setup(tmp_path, uid=1000, sudo_ok=False, present=("initdb",))
    assert code == 0 and calls == ["sudo -n true"], (calls, out)
    lines = [ln for ln in out.splitlines() if "was not installed" in ln]
    assert lines == [
        "scripts/test: stockfish is not installed and was not installed (not root, and sudo asks for a password): "
        "the tests that play against Stockfish (pawn play, pawn uci) fail without it; install the stockfish package",
        "scripts/test: chromium is not installed and was not installed (not root, and sudo asks for a password): "
        "the tests that load the report and dashboard pages in a browser fail without it; install the chromium package"]
    # everything there: no apt-get, no line
    code, out, calls = _script_setup(tmp_path, uid=1000, sudo_ok=False, present=("stockfish", "chromium", "initdb"))
    assert code == 0 and calls == [] and "not installed" not in out, (calls, out)
    assert out.strip().splitlines()[-1] == "scripts/test: set-up done (--setup-only)"


def test_test_script_refuses_an_unknown_option_in_one_line():
    import subprocess

    r = subprocess.run([str(REPO_ROOT / "scripts" / "test"), "--slwo"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.strip() == (
        "scripts/test: unknown option --slwo (--slow, --no-install, --setup-only, -- PYTEST_ARGS)") and r.stdout == ""


@pytest.mark.skipif(sys.version_info < (3, 11), reason="an empty environment of Python 3.10 has no TOML reader (tomllib is 3.11's)")
def test_test_script_names_every_missing_package_of_an_empty_environment(tmp_path):
    """In a fresh virtual environment with nothing installed, ``scripts/test --no-install --setup-only``
    says PAWN is not installed and lists every requirement of the five test extras as missing (read
    from pyproject.toml), and installs nothing."""
    import subprocess
    import venv

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    venv.create(tmp_path / "venv", with_pip=False)
    python = tmp_path / "venv" / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYTHON=str(python), PAWN_TEST_SEARCH_PATH=f"{tmp_path}/nothing")
    r = subprocess.run([str(REPO_ROOT / "scripts" / "test"), "--no-install", "--setup-only"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "scripts/test: PAWN is not installed (pip install '.[test,torch,peft,dashboard,lab]'); --no-install: nothing installed"
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = list(dict.fromkeys(q for e in ("test", "torch", "peft", "dashboard", "lab") for q in extras[e]))
    assert lines[1] == "scripts/test: missing test packages (--no-install: not installed): " + " ".join(wanted)
    assert not list((tmp_path / "venv" / "lib").glob("python*/site-packages/pytest*"))
