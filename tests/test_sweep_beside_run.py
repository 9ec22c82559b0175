"""A sweep's ``--out`` is a run directory for the one-run-per-directory rule: ``pawn pretrain
--out D`` and ``pawn sweep --out D``, started at one instant or one after the other in either
order, never both write ``D`` (the other is refused in one line naming what holds it), and
``--overwrite`` of a run never moves a study aside. Every case drives the real CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pawn.cli import app
from pawn.runs import discover_runs
from test_nothing_lost import _race

BASE = ('variant = "toy"\nbatch_size = 4\nseq_len = 32\nval_games = 8\nval_every = 2\ncheckpoint_every = 2\n'
        'steps_per_chunk = 2\ntotal_steps = 2\nwarmup_steps = 0\nweight_decay = 0.0\n')
SPACE = 'lr = {type = "float", low = 1e-4, high = 1e-3, log = true}\n'


def _pretrain(out: Path, *extra: str) -> list[str]:
    return ["pretrain", "--variant", "toy", "--total-steps", "2", "--steps-per-chunk", "2", "--batch-size", "4",
            "--seq-len", "32", "--val-games", "0", "--out", str(out), *extra]


def _sweep(tmp_path: Path, out: Path) -> list[str]:
    (tmp_path / "base.toml").write_text(BASE)
    (tmp_path / "space.toml").write_text(SPACE)
    return ["sweep", "--run-type", "pretrain", "--base-config", str(tmp_path / "base.toml"), "--space",
            str(tmp_path / "space.toml"), "--trials", "1", "--out", str(out)]


def _errors(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if ln.startswith("error:")]


def test_a_run_then_a_sweep_on_its_out_the_sweep_is_refused_naming_the_run(tmp_path):
    d = tmp_path / "d"
    r = CliRunner().invoke(app, _pretrain(d))
    assert r.exit_code == 0, r.output
    before = sorted(p.relative_to(d).as_posix() for p in d.rglob("*"))
    r = CliRunner().invoke(app, _sweep(tmp_path, d))
    assert r.exit_code == 1, r.output
    assert _errors(r.output) == [f"error: --out {d} holds a run (checkpoints up to step 2); a sweep needs a directory of "
                                 "its own: choose another --out"], r.output
    assert sorted(p.relative_to(d).as_posix() for p in d.rglob("*")) == before and "study.db" not in before
    assert [x.path for x in discover_runs(d)] == [d]


def test_a_sweep_then_a_run_on_its_out_the_run_is_refused_and_overwrite_never_moves_the_study(tmp_path):
    d = tmp_path / "d"
    r = CliRunner().invoke(app, _sweep(tmp_path, d))
    assert r.exit_code == 0, r.output
    before = sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if "jax-cache" not in p.parts)
    for extra in ((), ("--overwrite",), ("--resume", "auto")):
        r = CliRunner().invoke(app, _pretrain(d, *extra))
        assert r.exit_code == 1, (extra, r.output)
        assert _errors(r.output) == [f"error: --out {d} holds a sweep (study.db, best_config.json, pretrain/trial_*); a run "
                                     "needs a directory of its own (--overwrite moves a run aside, never a study): choose "
                                     "another --out"], (extra, r.output)
    r = CliRunner().invoke(app, _pretrain(d / "pretrain"))  # the study's folder of trials is no run's either
    assert r.exit_code == 1 and f"error: --out {d / 'pretrain'} holds a sweep (trial_*)" in r.output, r.output
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("d.old-")] == []
    assert sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if "jax-cache" not in p.parts) == before
    assert [x.path for x in discover_runs(d)] == [d / "pretrain" / "trial_0000"]


@pytest.mark.slow
def test_a_run_and_a_sweep_started_at_one_instant_on_one_out_exactly_one_runs(tmp_path):
    d = tmp_path / "d"
    pre, sweep = _race(tmp_path, _pretrain(d), _sweep(tmp_path, d))
    assert sorted((pre.returncode, sweep.returncode)) == [0, 1], (pre.stderr[-2000:], sweep.stderr[-2000:])
    loser = pre if pre.returncode else sweep
    errors = _errors(loser.stdout + loser.stderr)
    assert len(errors) == 1 and "Traceback" not in loser.stderr, loser.stdout + loser.stderr
    assert f"--out {d}" in errors[0]
    if loser is pre:  # the sweep holds d: by its lock (a pawn sweep, pid) or by the study it already wrote
        assert "a pawn sweep (pid " in errors[0] or "holds a sweep" in errors[0], errors[0]
        assert [x.path for x in discover_runs(d)] == [d / "pretrain" / "trial_0000"]
    else:
        assert "another pawn process (pid " in errors[0] or "holds a run" in errors[0], errors[0]
        assert [x.path for x in discover_runs(d)] == [d] and not (d / "study.db").exists()


def test_a_sweep_on_another_sweeps_folder_of_trials_is_refused_and_a_run_on_a_trial_too(tmp_path):
    """``pawn sweep --out D/pretrain`` (the study's folder of trials of the sweep in D) started a second
    sweep inside the first, whose trials then sat beside D's; refused before anything is written, as a
    run there is. ``pawn sweep --out D`` again continues D's study."""
    d = tmp_path / "d"
    r = CliRunner().invoke(app, _sweep(tmp_path, d))
    assert r.exit_code == 0, r.output
    before = sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if "jax-cache" not in p.parts)
    r = CliRunner().invoke(app, _sweep(tmp_path, d / "pretrain"))
    assert r.exit_code == 1, r.output
    assert _errors(r.output) == [f"error: --out {d / 'pretrain'} holds the trials (trial_*) of the sweep in {d}; a sweep "
                                 "needs a directory of its own: choose another --out (or give that sweep's --out to "
                                 "continue it)"], r.output
    r = CliRunner().invoke(app, _sweep(tmp_path, d / "pretrain" / "trial_0000"))
    assert r.exit_code == 1 and _errors(r.output) == [
        f"error: --out {d / 'pretrain' / 'trial_0000'} holds a run (checkpoints up to step 2); a sweep needs a directory "
        "of its own: choose another --out"], r.output
    assert sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if "jax-cache" not in p.parts) == before
    r = CliRunner().invoke(app, [*_sweep(tmp_path, d)[:-3], "2", "--out", str(d)])
    assert r.exit_code == 0 and (d / "pretrain" / "trial_0001" / "config.json").exists(), r.output
