"""The CLI package's one error map (every PawnError subclass → one ``error:`` line + its exit code,
no traceback), its one output sink (a typed table as rich text or JSON) and the settings → flags
generator shared by every command."""

from __future__ import annotations

import importlib
import json
import math
import pkgutil

import pytest
import typer
from typer.testing import CliRunner

import pawn
from pawn.cli._output import Column, Output, TableReport
from pawn.errors import PawnError


def _all_pawn_errors() -> list[type]:
    """Every PawnError subclass defined in the package (modules imported so they register)."""
    for m in pkgutil.walk_packages(pawn.__path__, "pawn."):
        if m.name.startswith(("pawn.cli", "pawn.torch", "pawn.hub", "pawn.play")) or m.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(m.name)
        except ImportError:
            continue
    out, todo = [], [PawnError]
    while todo:
        c = todo.pop()
        out.append(c)
        todo.extend(c.__subclasses__())
    return out


ERRORS = _all_pawn_errors()


def test_the_error_classes_are_found():
    names = {c.__name__ for c in ERRORS}
    assert {"PawnError", "UsageError", "CheckpointError", "ConfigFileError", "TrainingError", "EvaluationError"} <= names
    assert {c.exit_code for c in ERRORS} == {1, 2}


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: c.__name__)
def test_each_pawn_error_is_one_line_with_its_exit_code(cls):
    app = typer.Typer(cls=importlib.import_module("pawn.cli._errors").OneLineErrors)

    @app.command()
    def boom() -> None:
        msg = f"games.pgn: game 7: bad {cls.__name__}\nsecond line"
        try:
            err = cls(msg)
        except TypeError:  # a subclass with its own arguments (e.g. NonFiniteLossError(step, value))
            err = cls.__new__(cls)
            Exception.__init__(err, msg)
        raise err

    @app.command()
    def other() -> None:  # two commands, so the group (and its error map) is used
        pass

    res = CliRunner().invoke(app, ["boom"])
    assert res.exit_code == cls.exit_code, res.output
    assert isinstance(res.exception, SystemExit)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines == [f"error: games.pgn: game 7: bad {cls.__name__} second line"], res.output


def test_a_bug_is_not_swallowed_by_the_error_map():
    from pawn.cli._errors import OneLineErrors

    app = typer.Typer(cls=OneLineErrors)

    @app.command()
    def boom() -> None:
        raise KeyError("a bug")

    @app.command()
    def other() -> None:
        pass

    res = CliRunner().invoke(app, ["boom"])
    assert isinstance(res.exception, KeyError)


def test_a_bad_setting_is_one_line_exit_2_naming_the_field():
    from pawn.cli import app

    res = CliRunner().invoke(app, ["generate", "--random", "--temperature", "0"])
    assert res.exit_code == 2
    assert [ln for ln in res.output.splitlines() if ln.strip()] == ["error: --temperature: Input should be greater than 0"]


def _report() -> TableReport:
    t = TableReport("val", [Column("model", justify="left"), Column("loss", ".4f", missing="nan"), Column("top-1", "pct")])
    return t.add("toy (d64)", 1.23456, 0.5).add("base", float("nan"), None)


def test_the_sink_renders_a_table_with_formatted_cells():
    from rich.console import Console

    console = Console(width=120, record=True, color_system=None)
    Output("table", console=console).report(_report())
    text = console.export_text()
    assert "toy (d64)" in text and "1.2346" in text and "50.00%" in text
    row = next(ln for ln in text.splitlines() if "base" in ln)
    assert "nan" in row and "—" in row


def test_the_sink_renders_json_with_raw_values_and_null_for_nan(capsys):
    Output("json").report(_report())
    data = json.loads(capsys.readouterr().out)
    assert data["title"] == "val"
    assert data["rows"][0] == {"model": "toy (d64)", "loss": 1.23456, "top-1": 0.5}
    assert data["rows"][1] == {"model": "base", "loss": None, "top-1": None}


def test_a_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="2 values for 3 columns"):
        _report().add("x", 1.0)


def test_json_safe_is_the_one_sanitizer():
    import numpy as np

    from pawn.fileio import json_safe

    out = json_safe({"a": np.float32(1.5), "b": [float("inf"), np.arange(2)], 3: np.int64(4), "n": float("nan")})
    assert out == {"a": 1.5, "b": [None, [0, 1]], "3": 4, "n": None}
    assert not any(isinstance(v, float) and not math.isfinite(v) for v in out["b"] if v is not None)


def test_every_command_setting_is_a_flag_an_env_var_and_a_config_key(tmp_path, monkeypatch):
    """eval/probe/generate settings come from the same generator as pretrain: flag > env > file > default."""
    from pawn.evaluate.settings import EvalSettings, GenerateSettings

    f = tmp_path / "g.toml"
    f.write_text("games = 5\ntop_k = 3\nseed = 9\n")
    monkeypatch.setenv("PAWN_GENERATE_TOP_K", "7")
    s = GenerateSettings.load(f, seed=1)
    assert (s.games, s.top_k, s.seed, s.batch_size) == (5, 7, 1, 64)
    assert EvalSettings.load(None).seed == 2**63 - 1
    from pawn.cli import app

    out = CliRunner().invoke(app, ["generate", "--help"], env={"COLUMNS": "300", "TERM": "dumb"}).output
    for name in GenerateSettings.model_fields:
        assert f"PAWN_GENERATE_{name.upper()}" in out, name
    assert "--prepend-outcome" in out and "--json" in out


_CTRL_C_DURING_IMPORT = """
import builtins, os, signal, sys
real_import = builtins.__import__
def hooked(name, *args, **kwargs):
    if name == "pawn.cli._options":  # first imported while the command is being loaded
        builtins.__import__ = real_import
        os.kill(os.getpid(), signal.SIGINT)
    return real_import(name, *args, **kwargs)
builtins.__import__ = hooked
sys.argv = ["pawn", "pretrain", "--help"]
from pawn.cli import run
run()
"""


def test_ctrl_c_while_the_commands_import_is_one_line_exit_130():
    """Ctrl-C in the first seconds of any command (JAX and the command modules importing) printed
    a KeyboardInterrupt traceback and died of SIGINT; now one line and exit code 130."""
    import os
    import signal
    import subprocess
    import sys

    # preexec: a CI harness may start us with SIGINT ignored (a background job of a shell without
    # job control); Python then keeps ignoring it and installs no KeyboardInterrupt handler
    r = subprocess.run([sys.executable, "-c", _CTRL_C_DURING_IMPORT], capture_output=True, text=True, timeout=300,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 130, (r.returncode, r.stderr[-2000:])
    assert r.stderr.strip() == "error: interrupted (Ctrl-C) while starting; nothing was done" and r.stdout == ""


def test_importing_the_cli_leaves_the_sigint_handler_as_it_was():
    """The start-up handler is temporary: after ``import pawn.cli`` Ctrl-C raises KeyboardInterrupt
    again (so commands keep what finished), and a host program's own handler is never replaced."""
    import os
    import subprocess
    import sys

    code = ("import signal; mine = lambda *a: None; signal.signal(signal.SIGINT, mine); import pawn.cli; "
            "assert signal.getsignal(signal.SIGINT) is mine; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "import importlib; importlib.reload(pawn.cli); assert signal.getsignal(signal.SIGINT) is signal.default_int_handler; "
            "print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_table_cells_are_shown_literally_not_as_rich_markup():
    """A failure reason such as ``[/tmp/run: a run directory, …]`` once crashed the sweep table
    (rich read it as a closing markup tag)."""
    from rich.console import Console

    console = Console(width=200, record=True, color_system=None)
    t = TableReport("[bold]t[/bold]", [Column("note", justify="left"), Column("[x]")])
    t.add("lr=1  [/tmp/run: a run directory, not a checkpoint]", "[red]3[/red]")
    Output("table", console=console).report(t)
    text = console.export_text()
    assert "[/tmp/run: a run directory, not a checkpoint]" in text and "[red]3[/red]" in text
    assert "[bold]t[/bold]" in text and "[x]" in text
