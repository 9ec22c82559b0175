"""One-way import layers (issue 12): engine → data → model → checkpoint → train → evaluate → cli.
The same order is enforced in CI by import-linter (``pyproject.toml`` ``[tool.importlinter]``,
``lint-imports`` in ``.ci/run``, issue 22); this test keeps the two in step.

Every ``import`` in ``src/pawn`` — module level or inside a function — is parsed with ``ast``; a
module may import its own layer or a lower one, never a higher one. The checkpoint *format*
(``pawn.checkpoint``) sits below the trainer, which writes checkpoints; v1 conversion and loading
(``pawn.convert``) sit above it. ``pawn.settings`` and ``pawn.schedules`` form their own layer
below ``pawn.train``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "pawn"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("pawn._engine", "pawn.engine", "pawn.vocab", "pawn.dtypes", "pawn.fileio", "pawn.progress", "pawn.errors", "pawn.hubref",
     "pawn.metrics", "pawn.stats"),
    ("pawn.data",),
    ("pawn.config", "pawn.model", "pawn.metrics_core"),
    ("pawn.checkpoint", "pawn.runs"),
    ("pawn.adapters", "pawn.hub"),
    ("pawn.schedules", "pawn.settings"),
    ("pawn.train",),
    ("pawn.convert",),
    ("pawn.evaluate", "pawn.play", "pawn.torch"),
    ("pawn.sweep", "pawn.report"),
    ("pawn.cli", "pawn.bench", "pawn.lab", "pawn"),
)


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of the longest prefix naming ``module``."""
    best, best_len = None, -1
    for i, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best_len:
                best, best_len = i, len(p)
    if best is None:
        raise AssertionError(f"{module} is in no layer; add it to LAYERS in tests/test_layers.py")
    return best


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def pawn_imports(path: Path, pkg: str | None = None) -> list[tuple[int, str]]:
    """(line, imported pawn module) of every import in ``path``; ``from pawn import X`` names
    ``pawn.X`` when X is a module, else the package ``pawn``."""
    tree = ast.parse(path.read_text(), str(path))
    if pkg is None:  # the package relative imports start from
        pkg = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "pawn"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if base.split(".")[0] != "pawn":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                is_module = (SRC.parent / Path(*sub.split("."))).with_suffix(".py").exists() or (
                    SRC.parent / Path(*sub.split("."))).is_dir() or sub == "pawn._engine"
                out.append((node.lineno, sub if is_module else base))
    return out


MODULES = sorted(SRC.rglob("*.py"))


def test_the_source_tree_is_found_and_parsed():
    names = {module_name(p) for p in MODULES}
    assert {"pawn.model", "pawn.train.pretrain", "pawn.cli", "pawn.data.layout"} <= names
    edges = pawn_imports(SRC / "train" / "pretrain.py")
    assert any(m == "pawn.metrics_core" for _, m in edges)  # the validation metric core, from below
    assert ("pawn._engine" in {m for _, m in pawn_imports(SRC / "vocab.py")})  # `from pawn import _engine`


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_no_import_runs_against_the_layers(path):
    me = module_name(path)
    mine = layer_of(me)
    back = [f"{path.relative_to(SRC.parent)}:{line} imports {m} (layer {LAYERS[layer_of(m)][0]}, above {LAYERS[mine][0]})"
            for line, m in pawn_imports(path) if layer_of(m) > mine]
    assert not back, "\n".join(back)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_nothing_imports_the_cli(path):
    if module_name(path).startswith("pawn.cli"):
        return
    bad = [line for line, m in pawn_imports(path) if m == "pawn.cli" or m.startswith("pawn.cli.")]
    assert not bad, f"{path.relative_to(SRC.parent)}:{bad} imports pawn.cli"


def test_the_named_back_edges_of_issue_12_stay_gone():
    def targets(rel: str) -> set[str]:
        return {m for _, m in pawn_imports(SRC / rel)}

    assert not {m for p in (SRC / "train").rglob("*.py") for _, m in pawn_imports(p) if m.startswith("pawn.evaluate")}
    assert not {m for m in targets("settings.py") if m.startswith("pawn.train")}
    assert not {m for m in targets("checkpoint.py") if m.startswith("pawn.convert")}
    assert targets("model.py") <= {"pawn.config", "pawn.vocab"}


def test_a_back_edge_is_caught(tmp_path):
    # The checker itself must fail on a planted back-edge (a function-level import, too).
    bad = tmp_path / "bad.py"
    bad.write_text("import numpy\n\ndef f():\n    from ..evaluate.accuracy import evaluate_games\n")
    assert pawn_imports(bad, pkg="pawn.train") == [(4, "pawn.evaluate.accuracy")]
    assert layer_of("pawn.evaluate.accuracy") > layer_of("pawn.train.pretrain")
    assert layer_of("pawn.data.layout") < layer_of("pawn.model") < layer_of("pawn.train.loop")


def test_the_import_linter_contract_is_this_order_and_kept():
    """The CI contract lists the same layers as :data:`LAYERS` (top-level packages, high to low)
    and passes; ``checkpoint`` no longer imports ``hub`` (the Hub-id grammar is ``pawn.hubref``)."""
    import subprocess
    import sys
    import tomllib

    cfg = tomllib.loads((SRC.parents[1] / "pyproject.toml").read_text())["tool"]["importlinter"]
    main = cfg["contracts"][0]
    declared = [tuple(sorted(m.strip() for m in layer.replace("|", ":").split(":"))) for layer in main["layers"]]
    ours = [tuple(sorted(p for p in layer if p not in ("pawn", "pawn._engine"))) for layer in LAYERS]
    flat = lambda layers: [m for layer in layers for m in layer]  # noqa: E731
    order = {m: i for i, layer in enumerate(reversed(declared)) for m in layer}
    assert set(flat(declared)) == set(flat(ours))
    for i, layer in enumerate(ours):  # a lower layer here is never above in the contract
        for m in layer:
            assert all(order[m] <= order[n] for upper in ours[i + 1:] for n in upper), m
    assert not {m for _, m in pawn_imports(SRC / "checkpoint.py")} & {"pawn.hub", "pawn.hub.fetch"}
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed (pip install '.[test]')")
    r = subprocess.run([str(lint), "--no-cache"], cwd=SRC.parents[1], capture_output=True, text=True)
    assert r.returncode == 0 and "0 broken" in r.stdout, r.stdout[-2000:]
