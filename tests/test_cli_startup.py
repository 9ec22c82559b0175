"""The CLI answers help, version, argument and path errors without importing JAX (or another heavy
package), and path mistakes are refused before any model loads or step compiles (issue 26)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("jax", "equinox", "optax", "torch", "matplotlib", "huggingface_hub", "optuna", "pyarrow")
ADAPT_TABLE = {"jax", "equinox"}
"""What ``pawn adapt``'s flags still import: they derive from the strategy table, whose rows hold
the Equinox adapter modules (a known limitation; every other command's help imports none)."""

_PROBE = f"""
import atexit, sys
atexit.register(lambda: sys.stderr.write('HEAVY=' + ','.join(m for m in {HEAVY!r} if m in sys.modules) + '\\n'))
sys.argv = ['pawn', *sys.argv[1:]]
from pawn.cli import run
run()
"""


def _pawn(*args: str, cwd: Path | None = None) -> tuple[int, str, str, list[str]]:
    """Run ``pawn ARGS`` in a fresh interpreter; (exit code, stdout, stderr without the probe
    line, heavy modules imported by the end)."""
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    env.pop("PAWN_SEED", None)
    p = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    lines = p.stderr.splitlines()
    heavy_line = [ln for ln in lines if ln.startswith("HEAVY=")]
    assert heavy_line, p.stderr
    heavy = [m for m in heavy_line[-1][len("HEAVY="):].split(",") if m]
    return p.returncode, p.stdout, "\n".join(ln for ln in lines if not ln.startswith("HEAVY=")), heavy


@pytest.mark.parametrize("args", [
    ("--version",), ("--help",), ("pretrain", "--help"), ("adapt", "--help"), ("eval", "--help"),
    ("probe", "--help"), ("generate", "--help"), ("bench", "--help"), ("play", "--help"), ("sweep", "--help"),
    ("convert", "--help"), ("data", "--help"),
])
def test_help_and_version_import_no_heavy_package(args):
    code, out, err, heavy = _pawn(*args)
    assert code == 0, err
    assert out.strip()
    allowed = ADAPT_TABLE if args[0] == "adapt" else set()
    assert set(heavy) <= allowed, f"pawn {' '.join(args)} imported {heavy}"


def test_argument_errors_import_no_heavy_package():
    code, _, err, heavy = _pawn("pretrain", "--bogus")
    assert code == 2 and "No such option: --bogus" in err
    assert heavy == []
    code, _, err, heavy = _pawn("adapt", "x/y", "--data", "z")  # no --strategy
    assert code == 2 and "strategy: required" in err
    assert set(heavy) <= ADAPT_TABLE


def test_unwritable_out_is_refused_before_jax(tmp_path):
    # /proc refuses new files even for root (permission bits do not, so the check creates one)
    code, _, err, heavy = _pawn("pretrain", "--variant", "toy", "--total-steps", "10", "--out", "/proc/pawn-run")
    assert code == 1, err
    assert err.strip() == "error: --out /proc/pawn-run: cannot write in /proc (No such file or directory)"
    assert heavy == []
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err, heavy = _pawn("pretrain", "--variant", "toy", "--total-steps", "10", "--out", str(f / "run"))
    assert code == 1 and f"{f} is a file, not a directory" in err
    assert heavy == []


def test_adapt_bad_paths_are_refused_before_the_backbone_loads(tmp_path, shared_data):
    code, _, err, heavy = _pawn("adapt", str(tmp_path / "no-backbone"), "--strategy", "lora", "--data", str(shared_data / "lichess"))
    assert code == 1 and f"BACKBONE {tmp_path / 'no-backbone'}: no such checkpoint directory" in err
    assert set(heavy) <= ADAPT_TABLE  # no backbone loaded, nothing compiled
    bb = tmp_path / "bb"
    bb.mkdir()
    code, _, err, heavy = _pawn("adapt", str(bb), "--strategy", "lora", "--data", str(tmp_path / "gmes.pgn"))
    assert code == 1 and f"--data {tmp_path / 'gmes.pgn'}: no such file or folder" in err
    assert set(heavy) <= ADAPT_TABLE  # no backbone loaded, nothing compiled
    code, _, err, heavy = _pawn("adapt", str(bb), "--strategy", "lora", "--data", str(shared_data / "lichess"), "--out", "/proc/x/run")
    assert code == 1 and "--out /proc/x/run: cannot write in /proc" in err
    assert set(heavy) <= ADAPT_TABLE  # no backbone loaded, nothing compiled


def test_mistyped_local_checkpoint_gets_did_you_mean(tmp_path):
    (tmp_path / "runs" / "tiny" / "variants" / "large").mkdir(parents=True)
    code, _, err, heavy = _pawn("eval", "runs/tni/variants/large", cwd=tmp_path)
    assert code == 1
    assert err.strip() == ("error: CHECKPOINT runs/tni/variants/large: no such checkpoint directory "
                           "(did you mean runs/tiny/variants/large?)")
    assert heavy == []


def _save_tiny(d: Path, step: int) -> None:
    import jax
    import numpy as np

    from pawn.checkpoint import save_checkpoint
    from pawn.config import ModelConfig
    from pawn.model import PAWNModel

    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)
    m = PAWNModel(cfg, jax.random.PRNGKey(step))
    save_checkpoint(d, {k: np.asarray(v) for k, v in m.params().items()}, cfg,
                    run_config={"prepend_outcome": False, "seq_len": 32}, training_state={"step": step})


def test_run_directory_resolves_to_its_best_checkpoint(tmp_path):
    from pawn.cli._paths import resolve_checkpoint_arg

    run = tmp_path / "run"
    _save_tiny(run / "checkpoints" / "step_00000020", 20)
    (run / "config.json").write_text("{}")
    lines: list[str] = []
    assert resolve_checkpoint_arg(str(run), lines.append) == str(run / "checkpoints" / "step_00000020")
    assert lines == [f"{run} is a run directory without a best checkpoint: using its newest checkpoint {run / 'checkpoints' / 'step_00000020'}"]
    _save_tiny(run / "checkpoints" / "best", 10)
    lines.clear()
    assert resolve_checkpoint_arg(str(run), lines.append) == str(run / "checkpoints" / "best")
    assert lines == [f"{run} is a run directory: using its best checkpoint {run / 'checkpoints' / 'best'} (lowest val loss, step 10)"]
    # a checkpoint directory itself is passed through
    assert resolve_checkpoint_arg(str(run / "checkpoints" / "best"), lines.append) == str(run / "checkpoints" / "best")


def test_pawn_eval_on_a_run_directory_evaluates_the_best_checkpoint(tmp_path):
    run = tmp_path / "run"
    _save_tiny(run / "checkpoints" / "best", 10)
    (run / "config.json").write_text("{}")
    code, out, err, _ = _pawn("eval", str(run), "--games", "4", "--max-ply", "8", "--json", str(tmp_path / "e.json"))
    assert code == 0, err
    assert f"{run} is a run directory: using its best checkpoint {run / 'checkpoints' / 'best'} (lowest val loss, step 10)" in err
    import json

    rec = json.loads((tmp_path / "e.json").read_text())
    assert rec["checkpoint"] == str(run / "checkpoints" / "best")
    assert rec["models"][0]["random_games"]["settings"]["games"] == 4


def test_an_empty_pgn_says_so_without_a_dangling_more(tmp_path):
    from pawn.evaluate.accuracy import evaluate_pgn

    empty = tmp_path / "empty.pgn"
    empty.write_text("")
    with pytest.raises(ValueError) as e:  # refused after parsing, before the model is used
        evaluate_pgn(None, str(empty), seq_len=16, elo_edges=(0, 4000), min_ply=1)
    assert str(e.value) == f"{empty}: no PGN game in it (empty, or not a PGN file)"
    short = tmp_path / "short.pgn"
    short.write_text('[Event "x"]\n\n1. e4 e5 2. Qh5 Ke7 *\n')
    with pytest.raises(ValueError) as e:
        evaluate_pgn(None, str(short), seq_len=16, elo_edges=(0, 4000), min_ply=1)
    assert str(e.value) == f"{short}: no usable game among 1 read (skipped: no_outcome 1); first skipped: game 1, ply 4: no_outcome"


def test_probe_plot_puts_accuracies_and_r2_on_separate_axes(tmp_path):
    pytest.importorskip("matplotlib")
    from pawn.evaluate.probes import REGRESSION, plot_probes, probe_figure

    reg = REGRESSION[0]
    result = {"probes": {"piece_type": {"embed": {"best_accuracy": 0.5}, "layer_0": {"best_accuracy": 0.9}},
                         reg: {"embed": {"best_accuracy": -8.8}, "layer_0": {"best_accuracy": 0.3}}}}
    fig = probe_figure(result)
    acc, r2 = fig.axes
    assert (acc.get_ylabel(), r2.get_ylabel()) == ("best accuracy", "best R²")
    assert [ln.get_label() for ln in acc.get_lines()] == ["piece_type"] and acc.get_ylim() == (0, 1)
    assert [ln.get_label() for ln in r2.get_lines()] == [reg]
    assert list(r2.get_lines()[0].get_ydata()) == [-8.8, 0.3]
    plot_probes(result, str(tmp_path / "p.png"))
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
