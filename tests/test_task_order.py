"""The one order of a run (pawn.train.spine.run) with a task (pawn.train.task.Task): a third task is
one subclass (a toy least-squares task below trains, validates, checkpoints and resumes through the
spine), and every refusal of ``--out`` comes before the task builds anything, for every task."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import pawn
from _settings_values import other_values
from pawn.settings import PretrainConfig
from pawn.train import spine
from pawn.train.loop import TrainState
from pawn.train.run import TrainingError, to_host
from pawn.train.task import Task

D, B = 4, 8
TRUE_W = np.arange(1.0, D + 1.0, dtype=np.float32)


class Line(eqx.Module):
    """The toy model: ``y = x · w``."""

    w: jax.Array


class ToyProgram:
    """What :func:`pawn.train.run.training_steps` asks of a program, for the toy: K plain SGD steps."""

    def __init__(self, lr: float):
        self.lr = lr
        self._jit = jax.jit(self._chunk)

    def _chunk(self, state: TrainState, chunk):
        def step(st, b):
            def loss_fn(m):
                return jnp.mean((b["x"] @ m.w - b["y"]) ** 2)

            loss, g = jax.value_and_grad(loss_fn)(st.model)
            model = Line(st.model.w - self.lr * g.w)
            return TrainState(model, st.opt_state, st.step + 1), {"loss": loss, "lr": jnp.float32(self.lr),
                                                                  "grad_norm": optax.tree.norm(g)}

        return jax.lax.scan(step, state, chunk)

    def place_chunk(self, host):
        return host

    def run_chunk(self, state, chunk, frozen):
        return self._jit(state, chunk)


class ToyChunks:
    """Chunks of K batches; batch s is a pure function of s (a resumed run sees the same data)."""

    def __init__(self, start: int, end: int, k: int):
        self.start, self.end, self.k = start, end, k

    def batch(self, s: int) -> dict:
        x = np.random.default_rng(s).normal(size=(B, D)).astype(np.float32)
        return {"x": x, "y": x @ TRUE_W}

    def __iter__(self):
        for s0 in range(self.start, self.end, self.k):
            bs = [self.batch(s) for s in range(s0, min(s0 + self.k, self.end))]
            yield s0, {n: np.stack([b[n] for b in bs]) for n in ("x", "y")}

    def close(self) -> None:
        pass


class LeastSquaresTask(Task):
    """A third task: least squares on Gaussian inputs, its settings a PretrainConfig (steps, chunk,
    validation and checkpoint intervals, lr, out, resume). ``calls`` records the spine's order."""

    name = "toy"

    def __init__(self, cfg, **kw):
        super().__init__(cfg, **kw)
        self.calls: list[str] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)

    def load_candidate(self, d: Path):
        self._call("load_candidate")
        from types import SimpleNamespace

        from pawn.checkpoint import CheckpointError

        try:
            ts = json.loads((d / "training_state.json").read_text())
            w = np.load(d / "w.npy")
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{d}: {e}") from None
        spine.checked_step(d, ts)
        return SimpleNamespace(path=d, run_config=json.loads((d / "run_config.json").read_text()), training_state=ts,
                               optimizer_state=None, w=w)

    def prepare(self):
        self._call("prepare")

    def settle(self, ck):
        self._call("settle")

    def build(self, ck, stop):
        self._call("build")
        self.schedule = self.cfg.schedule()
        self._program = ToyProgram(self.cfg.lr)
        self.model = Line(jnp.asarray(ck.w) if ck is not None else jnp.zeros(D, jnp.float32))

    def dry_run_result(self):
        self._call("dry_run_result")
        return "dry run"

    def initial_state(self, ck):
        self._call("initial_state")
        return spine.initial_state(self.model, optax.sgd(self.cfg.lr), patience=None, resume=ck, log=lambda m: None)

    def open_data(self):
        self._call("open_data")

    def place(self, init):
        self._call("place")
        self.state, self.frozen = init.state, None

    def start_records(self, init):
        self._call("start_records")

    def before_loop(self, stop, hooks):
        self._call("before_loop")

    def end_step(self):
        return self.cfg.total_steps if self.cfg.pause_after_steps is None else self.cfg.pause_after_steps

    @property
    def total_steps(self):
        return self.cfg.total_steps

    @property
    def program(self):
        return self._program

    @property
    def checkpoint_params(self):
        return D

    @property
    def validates(self):
        return True

    def val_due(self, step):
        return step % self.cfg.val_every == 0 or step == self.cfg.total_steps

    def validate(self, state, step):
        x = ToyChunks(0, 0, 1).batch(10**6)  # held out: a step no run reaches
        return {"loss": float(np.mean((x["x"] @ np.asarray(state.model.w) - x["y"]) ** 2))}

    def checkpoint_due(self, step):
        return step % self.cfg.checkpoint_every == 0

    def train_fields(self, r):
        return spine.train_record(r)

    def write_checkpoint(self, path, step):
        from pawn.checkpoint import write_manifest
        from pawn.train.lifecycle import write_json

        tmp = path.with_name(path.name + ".tmp")
        tmp.mkdir(parents=True, exist_ok=True)
        np.save(tmp / "w.npy", np.asarray(to_host(self.trainer.state.model).w))
        write_json(tmp / "training_state.json", {"step": int(step), "elapsed": self.run.elapsed,
                                                 "early_stopping": self.es.to_json()})
        write_json(tmp / "run_config.json", self.snapshot())
        write_manifest(tmp)  # complete (as every PAWN checkpoint: the run directory rules read it)
        if path.exists():  # checkpoints/best again
            shutil.rmtree(path)
        os.replace(tmp, path)

    def chunks(self, start, end):
        self._call("chunks")
        return ToyChunks(start, end, self.cfg.chunk_steps)

    def result(self, outcome):
        self._call("result")
        return outcome


def _cfg(out: Path, **kw) -> PretrainConfig:
    base = dict(variant="toy", total_steps=12, steps_per_chunk=2, val_every=4, checkpoint_every=4, lr=0.05, lr_schedule="constant", out=str(out),
                val_games=4)
    return PretrainConfig.load(**{**base, **kw})


QUIET = dict(log=lambda m: None, progress=False, install_signal_handlers=False)


def test_a_third_task_trains_validates_checkpoints_and_resumes_through_the_spine(tmp_path):
    from pawn.runs import open_run

    out = tmp_path / "toy"
    t = LeastSquaresTask(_cfg(out, pause_after_steps=8))
    o = spine.run(t, **QUIET)
    assert o.reason == "paused" and o.step == 8
    assert t.calls == ["prepare", "settle", "build", "initial_state", "open_data", "place", "start_records", "before_loop",
                       "chunks", "result"]
    run = open_run(out)
    assert [r.step for r in run.train] == [2, 4, 6, 8] and [r.step for r in run.val] == [4, 8]
    assert run.end.fields["reason"] == "paused" and run.status.state == "stopped"
    # the loss really falls: the spine ran the toy's program
    assert run.val[-1].values["loss"] < 0.5 * run.val[0].values["loss"]

    t2 = LeastSquaresTask(_cfg(out, resume=str(out)))
    o2 = spine.run(t2, **QUIET)
    assert o2.reason == "completed" and o2.step == 12
    assert t2.calls[:3] == ["prepare", "load_candidate", "settle"]  # the resume rule read the toy's checkpoint
    run = open_run(out)
    assert [r.step for r in run.train] == [2, 4, 6, 8, 10, 12]
    # resumed from step 8's weights: the same trajectory as one uninterrupted run
    t3 = LeastSquaresTask(_cfg(tmp_path / "whole"))
    spine.run(t3, **QUIET)
    whole = open_run(tmp_path / "whole")
    assert [round(r.values["loss"], 5) for r in whole.train] == [round(r.values["loss"], 5) for r in run.train]


def _another_run(out: Path) -> None:
    t = LeastSquaresTask(_cfg(out, total_steps=4))
    spine.run(t, **QUIET)


def _lock_in_child(d: Path, ready: Path) -> subprocess.Popen:
    """A process holding the run directory's lock (as a live ``pawn`` run does) until killed."""
    code = ("import fcntl, os, sys, time, pathlib\n"
            "fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "pathlib.Path(sys.argv[2]).write_text('ok')\n"
            "time.sleep(600)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(d), str(ready)])
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert p.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return p


CASES = {
    "occupied --out": (dict(), False, "holds another run"),
    "occupied --out, --resume auto with another shape": (dict(resume="auto", total_steps=20), False,
                                                           "differs|no intact checkpoint"),
    "live --out": (dict(), True, "is writing this run directory now"),
    "live --out with --overwrite": (dict(overwrite=True), True, "is writing this run directory now"),
    "live --out with --resume DIR": (dict(resume="DIR"), True, "is writing this run directory now"),
    "live --out with --resume auto": (dict(resume="auto"), True, "is writing this run directory now"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("task_kind", ["toy", "pretrain", "adapt"])
def test_every_refusal_of_out_comes_before_any_build(case, task_kind, tmp_path, monkeypatch):
    kw, live, message = CASES[case]
    kw = dict(kw)
    out = tmp_path / "run"
    _another_run(out)
    overwrite = kw.pop("overwrite", False)
    if kw.get("resume") == "DIR":
        kw["resume"] = str(out)
    holder = _lock_in_child(out, tmp_path / "locked") if live else None
    try:
        if task_kind == "toy":
            task = LeastSquaresTask(_cfg(out, **kw))
        elif task_kind == "pretrain":
            from pawn.train.pretrain import PretrainTask

            task = PretrainTask(_cfg(out, **kw))
        else:
            from pawn.train.adapt import AdaptTask
            from pawn.train.adapt_config import AdaptSettings

            kw.pop("total_steps", None)
            task = AdaptTask(AdaptSettings.load(backbone=str(tmp_path / "no-backbone"), data=str(tmp_path / "no-data.pgn"),
                                                strategy="lora", out=str(out), cache_dir=str(tmp_path / "cache"), **kw))
        built = []
        monkeypatch.setattr(type(task), "build", lambda self, ck, stop: built.append(ck) or pytest.fail("built"))
        with pytest.raises(TrainingError, match=message) as e:
            spine.run(task, overwrite=overwrite, **QUIET)
        assert built == [] and "\n" not in str(e.value)
        if live:
            assert f"pid {holder.pid}" in str(e.value)  # names the process writing it
        assert not (tmp_path / "cache").exists()
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()


# ----------------------------------------------------------------------------- no copy of the spine in a task

TRAIN_DIR = Path(pawn.__file__).resolve().parent  # the package under test (a mutant's copy included)
TASK_FILES = ("train/pretrain.py", "train/adapt.py", "sweep/population.py")
SPINE_FILES = ("train/spine.py", "train/task.py")


def _shapes(path: Path, min_statements: int = 4) -> dict[str, str]:
    """``{shape: function name}`` of every function of ``path`` with at least ``min_statements``
    statements (nested ones included): its body's AST with every name, argument and attribute
    replaced by a placeholder in order of first use, so a renamed copy has the same shape."""
    import ast

    out: dict[str, str] = {}
    for fn in ast.walk(ast.parse(path.read_text("utf-8"))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = [s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(getattr(s, "value", None), ast.Constant))]
        if sum(1 for s in body for _ in ast.walk(s) if isinstance(_, ast.stmt)) < min_statements:
            continue
        names: dict[str, str] = {}

        def norm(node):
            for n in ast.walk(node):
                for field in ("id", "arg", "attr"):
                    v = getattr(n, field, None)
                    if isinstance(v, str):
                        setattr(n, field, names.setdefault(v, f"n{len(names)}"))
            return node

        shape = ast.dump(ast.Module(body=[norm(s) for s in body], type_ignores=[]), annotate_fields=False)
        out.setdefault(shape, fn.name)
    return out


def test_no_task_module_holds_a_renamed_copy_of_a_spine_function():
    spine_shapes: dict[str, str] = {}
    for f in SPINE_FILES:
        spine_shapes.update({k: f"{f}:{v}" for k, v in _shapes(TRAIN_DIR / f).items()})
    for f in TASK_FILES:
        copies = sorted(f"{name} (= {spine_shapes[s]})" for s, name in _shapes(TRAIN_DIR / f).items() if s in spine_shapes)
        assert copies == [], f"{f} holds a copy of the spine: {copies}"


def test_the_copy_check_finds_a_renamed_copy(tmp_path):
    # the check itself: the resume rule pasted under another name, its variables renamed, is found
    import ast

    src = (TRAIN_DIR / "train/spine.py").read_text("utf-8")
    fn = next(n for n in ast.parse(src).body if isinstance(n, ast.FunctionDef) and n.name == "resolve_resume")
    copy = ast.get_source_segment(src, fn).replace("def resolve_resume(", "def _reconcile(").replace("mutable", "may_change")
    (tmp_path / "task.py").write_text("from typing import Any, Callable, Optional\n\n\n" + copy + "\n")
    assert "_reconcile" in _shapes(tmp_path / "task.py").values()
    assert set(_shapes(tmp_path / "task.py")) & set(_shapes(TRAIN_DIR / "train/spine.py"))


# ----------------------------------------------------------------------------- the resume rule reads the tags

def test_every_field_tagged_mutable_on_resume_is_accepted_on_resume(tmp_path):
    out = tmp_path / "toy"
    spine.run(LeastSquaresTask(_cfg(out, pause_after_steps=4)), **QUIET)
    stored = PretrainConfig.load(**{k: v for k, v in json.loads((out / "config.json").read_text()).items()
                                    if k not in ("resume", "pause_after_steps")})
    tried = []
    for field in sorted(spine.resume_mutable(PretrainConfig) - {"resume", "out"}):
        for v in other_values(PretrainConfig, field, getattr(stored, field)):
            try:
                cfg = PretrainConfig.load(resume=str(out), out=str(out), **{field: v})
            except Exception:  # noqa: BLE001 - not a valid value of this field: the next candidate
                continue
            try:
                got, ck = spine.resolve_resume(cfg, LeastSquaresTask(cfg), log=lambda m: None)
            except TrainingError as e:
                assert "settings differ" not in str(e), (field, v, str(e))  # the property: never a conflict
                continue  # a value this run cannot take (e.g. a pause that is no multiple of its chunk)
            assert ck is not None and getattr(got, field) == getattr(cfg, field), field
            tried.append(field)
            break
    assert sorted(tried) == sorted(spine.resume_mutable(PretrainConfig) - {"resume", "out"})
    # and a field without the tag is refused, naming it
    with pytest.raises(TrainingError, match=r"settings differ from the checkpoint's run \(lr\)"):
        cfg = PretrainConfig.load(resume=str(out), out=str(out), lr=0.01)
        spine.resolve_resume(cfg, LeastSquaresTask(cfg), log=lambda m: None)
