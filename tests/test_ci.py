"""`.ci/run` does exactly what README.md tells a new user, in a fresh virtual environment."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SETUP_PREFIXES = ("set -euo pipefail", 'cd "$(dirname "$0")/.."', "python3 -m venv", ". .venv-ci/bin/activate",
                  "python -m pip install -q --upgrade pip")


def _commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_the_readme_set_up_commands_in_order_and_nothing_else():
    readme = (REPO_ROOT / "README.md").read_text()
    install, tests = re.findall(r"```bash\n(.*?)```", readme, re.S)[:2]
    wanted = _commands(install) + _commands(tests)
    ci = _commands((REPO_ROOT / ".ci" / "run").read_text())
    assert [c for c in ci if not c.startswith(SETUP_PREFIXES)] == wanted


def test_ci_venv_is_recreated_on_every_run():
    # `python3 -m venv DIR` keeps an existing DIR with everything installed by an earlier run.
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    assert re.search(r"python3 -m venv --clear \.venv-ci", ci)


def test_readme_demo_prints_what_the_readme_says():
    readme = (REPO_ROOT / "README.md").read_text()
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
