"""Every third-party module that PAWN imports is declared in pyproject.toml, and every core
dependency declared there is imported somewhere (no silent or dead dependencies)."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

REPO_ROOT = Path(__file__).resolve().parents[1]
PROVIDED_BY_A_DECLARED_DEPENDENCY = {
    # typer depends on click; cli.py imports it only where a Typer release does not vendor it
    "click": "typer",
    # pydantic's constraint types, read by the CLI's flag generator
    "annotated_types": "pydantic",
    # huggingface_hub's HTTP client (imported only to classify its transport errors)
    "httpx2": "huggingface-hub",
}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs: list[str]) -> set[str]:
        return {_norm(re.match(r"[A-Za-z0-9_.-]+", r).group(0)) for r in reqs}

    return names(project["dependencies"]), {k: names(v) for k, v in project["optional-dependencies"].items()}


# Functions that run under another interpreter (the public reference's, with its own torch or JAX), not PAWN's.
OTHER_INTERPRETER = {"reference_ab.py": {"reference_worker", "reference_pretrain_worker", "reference_v2_worker",
                                         "reference_v2_pretrain_worker", "reference_v2_pretrain_setup"},
                      "xla_profile.py": {"v2_worker"}}


def _imported(folder: Path) -> set[str]:
    """Top-level names of the absolute imports in every .py file under ``folder`` (the bodies of
    :data:`OTHER_INTERPRETER`'s functions left out)."""
    out = set()
    for f in folder.rglob("*.py"):
        tree = ast.parse(f.read_text(), str(f))
        skip = OTHER_INTERPRETER.get(f.name, set())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in skip:
                node.body = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module.split(".")[0])
    return out


def _third_party(modules: set[str], local: set[str]) -> set[str]:
    return {m for m in modules if m not in sys.stdlib_module_names and m not in local and m != "__future__"}


@functools.cache
def _packages_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distribution(module: str) -> str:
    dists = _packages_distributions().get(module)
    return _norm(dists[0]) if dists else _norm(module)


def test_every_module_the_package_imports_is_a_declared_dependency():
    core, extras = _declared()
    allowed = core | set().union(*extras.values())
    mods = _third_party(_imported(REPO_ROOT / "src" / "pawn"), {"pawn"})
    missing = {m: _distribution(m) for m in mods
               if _distribution(m) not in allowed and PROVIDED_BY_A_DECLARED_DEPENDENCY.get(m) not in core}
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"


def test_every_module_the_tests_and_benchmarks_import_is_declared_for_tests():
    core, extras = _declared()
    # a benchmark may import another benchmark script (xla_profile.py builds the steps adapter_step.py and
    # joint_step.py time)
    local = {f.stem for d in ("tests", "benchmarks") for f in (REPO_ROOT / d).glob("*.py")} | {"pawn"}
    mods = _third_party(_imported(REPO_ROOT / "tests") | _imported(REPO_ROOT / "benchmarks"), local)
    missing = {m: _distribution(m) for m in mods if _distribution(m) not in core | extras["test"]}
    assert not missing, f"imported by tests/benchmarks but not in the dependencies or the test extra: {missing}"


def test_every_core_dependency_is_imported_by_the_package():
    core, _ = _declared()
    used = {_distribution(m) for m in _imported(REPO_ROOT / "src" / "pawn")}
    assert core - used == set(), f"declared in pyproject.toml but never imported: {core - used}"


def test_python_310_reads_toml_through_the_declared_tomli_backport():
    # settings.py imports tomllib only on 3.11+; requires-python allows 3.10, where tomli must be declared.
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.10"
    assert any(r.replace(" ", "").startswith("tomli>=") and "python_version<'3.11'" in r.replace(" ", "").replace('"', "'")
               for r in project["dependencies"])
    assert "import tomli as tomllib" in (REPO_ROOT / "src" / "pawn" / "settings.py").read_text()
