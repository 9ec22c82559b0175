"""Every data file PAWN opens beside its own modules ships in the wheel.

maturin (``[tool.maturin]`` of pyproject.toml, ``python-source``) packs every file under the
package folder that git does not ignore (the ``.gitignore`` rules; a wheel built by maturin 1.16
carried an untracked asset and left out a git-ignored one), less what ``exclude`` names and plus
what ``include`` names. The files the code opens are read from its source: a
``files(...).joinpath(NAME)`` of ``importlib.resources`` and a ``Path(__file__).parent / NAME``,
``NAME`` a string or a module constant. A new asset opened either way, and kept out of the wheel by
a ``.gitignore`` or an ``exclude`` pattern, fails here."""

from __future__ import annotations

import ast
import fnmatch
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MATURIN = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["tool"]["maturin"]
SOURCE = ROOT / MATURIN["python-source"]
PACKAGE = SOURCE / MATURIN["module-name"].split(".")[0]


def _constants(tree: ast.Module) -> dict[str, str]:
    """The module's top-level ``NAME = "text"`` assignments."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            out.update({t.id: node.value.value for t in node.targets if isinstance(t, ast.Name)})
    return out


def _text(node: ast.AST, consts: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return consts.get(node.id)
    return None


def _base(node: ast.AST, module: Path, source: Path) -> Path | None:
    """The folder an expression names: ``files(__package__)``/``files("pawn.x")`` (its package
    folder) or ``Path(__file__)`` followed by ``.parent``s; None for anything else."""
    ups = 0
    while isinstance(node, ast.Attribute) and node.attr == "parent":
        node, ups = node.value, ups + 1
    if isinstance(node, ast.Call) and node.args:
        fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        arg = node.args[0]
        if fn == "files":
            if isinstance(arg, ast.Name) and arg.id in ("__package__", "__name__"):
                here = module.parent
            elif isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                here = source.joinpath(*arg.value.split("."))
            else:
                return None
            return here.parents[ups - 1] if ups else here
        if fn == "Path" and isinstance(arg, ast.Name) and arg.id == "__file__" and ups:
            return module.parents[ups - 1]
    return None


def opened_data_files(package: Path, source: Path = SOURCE) -> dict[Path, str]:
    """``{path: "module:line"}`` of every non-Python file the modules of ``package`` (a folder
    under ``source``) open beside themselves (see the module docstring for the two spellings)."""
    found: dict[Path, str] = {}
    for module in sorted(package.rglob("*.py")):
        tree = ast.parse(module.read_text("utf-8"))
        consts = _constants(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "joinpath":
                base, parts = _base(node.func.value, module, source), [_text(a, consts) for a in node.args]
            elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                base, parts = _base(node.left, module, source), [_text(node.right, consts)]
            else:
                continue
            if base is None or None in parts:
                continue
            path = base.joinpath(*parts)
            if path.suffix != ".py" and not path.is_dir():
                found.setdefault(path, f"{module.relative_to(source)}:{node.lineno}")
    return found


def shipped(path: Path, source: Path = SOURCE, repo: Path = ROOT) -> str | None:
    """None when maturin packs ``path`` (under ``source``, in the git checkout ``repo``) into the
    wheel, else why not (one line)."""
    if not path.is_file():
        return "no such file"
    rel = path.relative_to(source).as_posix()
    if any(fnmatch.fnmatch(rel, p if isinstance(p, str) else p.get("path", "")) for p in MATURIN.get("include", [])):
        return None
    for pattern in MATURIN.get("exclude", []):
        pat = pattern if isinstance(pattern, str) else pattern.get("path", "")
        if fnmatch.fnmatch(rel, pat) or fnmatch.fnmatch(f"{MATURIN['python-source']}/{rel}", pat):
            return f"[tool.maturin] exclude {pat!r}"
    ignored = subprocess.run(["git", "-C", str(repo), "check-ignore", "--no-index", "-v", str(path)], capture_output=True, text=True)
    assert ignored.returncode in (0, 1), ignored.stderr  # 128: no git checkout, which these tests need
    return f"ignored by git ({ignored.stdout.strip()})" if ignored.returncode == 0 else None


def test_every_data_file_the_package_opens_ships_in_the_wheel():
    opened = opened_data_files(PACKAGE)
    assert PACKAGE / "report" / "app.js" in opened  # the report page's app: the scan finds what the code opens
    missing = {f"{p.relative_to(ROOT)} (opened at {where}): {why}" for p, where in opened.items() if (why := shipped(p))}
    assert not missing, "data files the code opens that the wheel would not carry:\n" + "\n".join(sorted(missing))


def test_the_scan_finds_a_new_asset_and_the_check_refuses_it_when_ignored(tmp_path):
    # a package in a git checkout of its own: one module opens two new files in the two spellings,
    # one of them ignored by git
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    pkg = tmp_path / "src" / "probe"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "from importlib import resources\nfrom pathlib import Path\n\nSTYLE = 'style.css'\n\n\n"
        "def style():\n    return resources.files(__package__).joinpath(STYLE).read_text()\n\n\n"
        "def template():\n    return (Path(__file__).parent / 'page.html').read_text()\n", "utf-8")
    (pkg / "style.css").write_text("body {}\n", "utf-8")
    (pkg / "page.html").write_text("<p></p>\n", "utf-8")
    (pkg / ".gitignore").write_text("page.html\n", "utf-8")
    opened = opened_data_files(pkg, source=tmp_path / "src")
    assert set(opened) == {pkg / "style.css", pkg / "page.html"}
    assert shipped(pkg / "style.css", source=tmp_path / "src", repo=tmp_path) is None
    assert "ignored by git" in shipped(pkg / "page.html", source=tmp_path / "src", repo=tmp_path)
    (pkg / "style.css").unlink()
    assert shipped(pkg / "style.css", source=tmp_path / "src", repo=tmp_path) == "no such file"
