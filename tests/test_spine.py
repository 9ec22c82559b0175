"""The run spine (pawn.train.spine) that pretrain and adapt share: one definition of the resume
rule, the initial state, the default hooks, the run opening and the settings facts (issue 40);
and a run killed right after a checkpoint completed keeps that chunk's records (issue 41.3)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pawn.checkpoint import MANIFEST, load_checkpoint
from pawn.settings import MUTABLE_ON_RESUME, NOT_RUN_IDENTITY, PATH, RECIPE, PretrainConfig, fields_with
from pawn.train.metrics import read_metrics

TRAIN_DIR = Path(__file__).resolve().parents[1] / "src" / "pawn" / "train"
TASKS = ("pretrain.py", "adapt.py")

SPINE_ONLY = ("RESUME_MUTABLE", "_resolve_resume", "resolve_resume", "_load_resumable", "_default_run_dir", "default_run_dir",
              "_pretrain_hooks_chain", "default_hooks", "_adapt_hooks_chain", "_open_run", "_open_pretrain_run", "open_run",
              "_train_fields", "train_record", "_start_hub", "start_hub", "_check_outputs", "check_outputs", "initial_state",
              "run_loop", "EpochCheckpointHook")
"""Names that belong to the spine: defined there once, never again in a task module."""


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text("utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Name):
                    names.add(t.id)
    return names


def test_pretrain_and_adapt_define_nothing_twice_and_nothing_of_the_spine():
    pre, ada = (_top_level_names(TRAIN_DIR / f) for f in TASKS)
    assert pre & ada == set(), f"defined in both train/pretrain.py and train/adapt.py: {sorted(pre & ada)}"
    for f, names in zip(TASKS, (pre, ada)):
        again = sorted(names & set(SPINE_ONLY))
        assert again == [], f"train/{f} defines again what train/spine.py holds: {again}"
    spine = _top_level_names(TRAIN_DIR / "spine.py")
    assert {"resolve_resume", "initial_state", "default_hooks", "open_run", "train_record", "default_run_dir"} <= spine


def test_one_hook_chain_in_the_task_modules():
    # Every default hook list goes through spine.default_hooks: no task builds EarlyStoppingHook,
    # CheckpointHook, SignalStopHook or MetricsHook itself.
    for f in TASKS:
        text = (TRAIN_DIR / f).read_text("utf-8")
        for hook in ("EarlyStoppingHook(", "CheckpointHook(", "SignalStopHook(", "MetricsHook("):
            assert hook not in text, f"train/{f} builds {hook[:-1]} outside spine.default_hooks"


# ----------------------------------------------------------------------------- the settings facts, as properties

FACTS = (MUTABLE_ON_RESUME, NOT_RUN_IDENTITY, PATH, RECIPE)
PGN = "lichess/lichess_db_2013-01_first100_reexported_chess.js-benchmark.pgn"


def _settings_classes():
    from pawn.train.adapt_config import AdaptSettings

    return {"pretrain": PretrainConfig, "adapt": AdaptSettings}


def test_the_schema_the_lab_hands_out_carries_each_fields_facts():
    for name, model in _settings_classes().items():
        schema = model.model_json_schema()["properties"]
        for field in model.model_fields:
            tags = [f for f in FACTS if field in fields_with(model, f)]
            assert sorted(schema.get(field, {}).get("facts", [])) == sorted(tags), (name, field)
    # the recipe a model card shows names how the model was trained (spec: training defaults)
    assert {"lr", "total_steps", "batch_size", "seed", "corpus_dir"} <= set(fields_with(PretrainConfig, RECIPE))


def test_every_field_tagged_path_is_read_beside_its_config_file(tmp_path, monkeypatch):
    # a relative path in a --config file that exists beside the file is read as that path seen from
    # the working directory; a field without the tag would keep the text as given
    monkeypatch.chdir(tmp_path)
    required = {"pretrain": {"total_steps": 10}, "adapt": {"backbone": "some/hub-id"}}
    tried = []
    for name, model in _settings_classes().items():
        for field in fields_with(model, PATH):
            (tmp_path / "conf" / field).mkdir(parents=True, exist_ok=True)
            f = tmp_path / "conf" / f"{name}.json"
            f.write_text(json.dumps({**required[name], field: field}))
            got = getattr(model.load(f), field)
            assert str(got) == os.path.join("conf", field), (name, field, got)
            tried.append(field)
    assert set(tried) == set(fields_with(PretrainConfig, PATH)) | set(fields_with(_settings_classes()["adapt"], PATH))
    assert tried  # (the tags exist)


@pytest.fixture(scope="module")
def paused_runs(tmp_path_factory, tiny_backbone, shared_data) -> dict:
    """``{task: (settings class, task class, run directory)}``: a tiny run of each task paused after
    its first chunk (a checkpoint to resume, steps left)."""
    from pawn.train.adapt import AdaptTask, run_adapt
    from pawn.train.adapt_config import AdaptSettings
    from pawn.train.pretrain import PretrainTask, run_pretrain

    root = tmp_path_factory.mktemp("paused")
    quiet = dict(log=lambda m: None, progress=False, install_signal_handlers=False)
    run_pretrain(PretrainConfig.load(variant="toy", batch_size=4, seq_len=32, val_games=4, val_every=2, checkpoint_every=2,
                                     total_steps=4, steps_per_chunk=2, lr=1e-3, warmup_steps=1, pause_after_steps=2,
                                     out=root / "pretrain"), **quiet)
    run_adapt(AdaptSettings.load(backbone=str(tiny_backbone), strategy="bottleneck", bottleneck_dim=4, data=str(shared_data / PGN),
                                 epochs=2, steps_per_epoch=2, batch_size=4, seq_len=32, val_games=8, lr=1e-2,
                                 cache_dir=str(root / "cache"), pause_after_steps=2, out=str(root / "adapt")), **quiet)
    return {"pretrain": (PretrainConfig, PretrainTask, root / "pretrain"), "adapt": (AdaptSettings, AdaptTask, root / "adapt")}


def _resolve(model, task_cls, out: Path, **given):
    """The resume rule of the task on the paused run ``out`` with ``given`` settings (None when
    ``given`` is no valid value of the settings class)."""
    from pawn.train import spine

    try:
        cfg = model.load(resume=str(out), out=str(out), **given)
    except Exception:  # noqa: BLE001 - not a valid value of this field: the caller tries the next
        return None
    return cfg, lambda: spine.resolve_resume(cfg, task_cls(cfg, log=lambda m: None), log=lambda m: None)


@pytest.mark.parametrize("task", ["pretrain", "adapt"])
def test_every_field_tagged_mutable_on_resume_is_accepted_and_every_other_refused(paused_runs, task, tmp_path):
    from _settings_values import other_values

    from pawn.train import spine
    from pawn.train.run import TrainingError

    model, task_cls, out = paused_runs[task]
    stored = json.loads((out / "config.json").read_text())
    usable = {}  # values only a real file makes valid: the same backbone, moved
    if "backbone" in stored:
        usable["backbone"] = [str(shutil.copytree(stored["backbone"], tmp_path / "bb-moved"))]
    accepted, refused, untried = [], [], []
    for field in sorted(set(model.model_fields) - {"resume", "out"}):
        mutable = field in spine.resume_mutable(model)
        for v in usable.get(field, []) + other_values(model, field, stored.get(field)):
            r = _resolve(model, task_cls, out, **{field: v})
            if r is None:
                continue
            cfg, resolve = r
            if mutable:
                try:
                    got, ck = resolve()
                except TrainingError as e:
                    assert "settings differ" not in str(e), (field, v, str(e))  # never a conflict
                    continue  # a value this run cannot take (e.g. a pause that is no multiple of its chunk)
                assert ck is not None and getattr(got, field) == getattr(cfg, field), (field, v)
                accepted.append(field)
            else:
                with pytest.raises(TrainingError, match=rf"settings differ from the checkpoint's run \(.*\b{field}\b|--total-steps"):
                    resolve()
                refused.append(field)
            break
        else:
            untried.append(field)
    assert sorted(accepted) == sorted(spine.resume_mutable(model) - {"resume", "out"}), untried
    assert len(refused) >= 10 and not set(refused) & spine.resume_mutable(model)


@pytest.mark.parametrize("task", ["pretrain", "adapt"])
def test_a_real_resume_takes_the_mutable_settings_it_is_given(paused_runs, task, tmp_path):
    # pawn pretrain / pawn adapt --resume DIR with several tagged settings changed: the run goes on from
    # its checkpoint to the end, and the settings it ran with are the new ones
    from pawn.runs import open_run
    from pawn.train import spine
    from pawn.train.adapt import run_adapt
    from pawn.train.pretrain import run_pretrain

    model, _, paused = paused_runs[task]
    out = tmp_path / task
    shutil.copytree(paused, out)  # the module's paused run stays paused for the other tests
    given = {"patience": 5, "keep_checkpoints": 1, "log_every_s": 7.0, "checkpoint_every_minutes": 60.0}
    if task == "adapt":
        shutil.copytree(json.loads((paused / "config.json").read_text())["backbone"], tmp_path / "bb-moved")
        given |= {"epochs": 3, "backbone": str(tmp_path / "bb-moved"), "cache_dir": str(tmp_path / "cache2")}
    else:
        given |= {"prefetch_chunks": 3}
    assert set(given) <= spine.resume_mutable(model)
    cfg = model.load(resume=str(out), out=str(out), **given)
    quiet = dict(log=lambda m: None, progress=False, install_signal_handlers=False)
    res = (run_adapt if task == "adapt" else run_pretrain)(cfg, **quiet)
    assert res.step == (6 if task == "adapt" else 4)  # adapt: the third epoch given on resume ran too
    run = open_run(out)
    ran = run.config_record.fields["run_config"]  # the resumed segment's settings
    assert {k: ran[k] for k in given} == given
    assert run.status.state == "complete" and run.status.step == res.step
    if task == "adapt":
        assert (tmp_path / "cache2").is_dir() and len(list((out / "checkpoints").glob("step_*"))) == 1


# ----------------------------------------------------------------------------- issue 41.3: a kill after a checkpoint

_KILLED_RUN = r"""
import sys, time
from pathlib import Path
from pawn.settings import PretrainConfig
from pawn.train.pretrain import run_pretrain
from pawn.train.run import CheckpointEvent, Hook

out, barrier, hold_step = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])


class HoldAfterCheckpoint(Hook):
    # After step hold_step's checkpoint is complete (its CheckpointEvent comes after the rename),
    # before the chunk's records: say so, then wait for the SIGKILL.
    def on_event(self, event):
        if isinstance(event, CheckpointEvent) and event.kind == "interval" and event.step == hold_step:
            barrier.write_text(str(event.path))
            time.sleep(600)


cfg = PretrainConfig.load(variant="toy", batch_size=4, seq_len=32, val_games=4, val_every=4, checkpoint_every=4,
                          total_steps=8, steps_per_chunk=2, lr=1e-3, warmup_steps=1, out=out)
run_pretrain(cfg, progress=False, install_signal_handlers=False, hooks=[HoldAfterCheckpoint()])
"""


def _wait_for(path: Path, proc: subprocess.Popen, timeout_s: float) -> None:
    """Until ``path`` exists; fails with the process's output if it ended first or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-3000:]
        assert time.monotonic() < deadline, f"{path} did not appear within {timeout_s} s"
        time.sleep(0.2)


@pytest.mark.slow  # a toy run killed and resumed in two processes (~1-2 min on a shared CPU)
def test_sigkill_right_after_a_checkpoint_completes_loses_no_record_on_resume(tmp_path, monkeypatch):
    run, barrier = tmp_path / "run", tmp_path / "held"
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, str(run), str(barrier), "4"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        _wait_for(barrier, proc, 600)
        os.kill(proc.pid, signal.SIGKILL)  # its checkpoint is complete, its chunk's records are not written
    finally:
        proc.kill()  # (nothing left to do after the SIGKILL; here for a failed wait)
        proc.wait(60)
    step4 = run / "checkpoints" / "step_00000004"
    assert (step4 / MANIFEST).is_file()  # the checkpoint is complete ...
    before = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in before if r["type"] in ("train", "val")] == [2]  # ... its chunk's records are not
    best_step = load_checkpoint(run / "checkpoints" / "best").training_state["step"]
    assert best_step == 4  # the step-4 validation was the best so far: checkpoints/best holds it

    r = subprocess.run([sys.executable, "-m", "pawn.cli", "pretrain", "--resume", "auto", "--out", str(run)], env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = read_metrics(run / "metrics.jsonl")
    assert [x["step"] for x in recs if x["type"] == "train"] == [2, 4, 6, 8]
    vals = [x for x in recs if x["type"] == "val"]
    assert [v["step"] for v in vals] == [4, 8]
    stored = load_checkpoint(step4).training_state
    assert vals[0]["loss"] == stored["early_stopping"]["best"]["loss"]  # the record is the validation that made step 4 best
    assert vals[0]["val/best_loss_step"] == 4
    # the records and checkpoints/best agree: the step of the lowest val loss is the best checkpoint's
    lowest = min(vals, key=lambda v: v["loss"])["step"]
    assert load_checkpoint(run / "checkpoints" / "best").training_state["step"] == lowest

    from pawn.lab.tools import lab_audit

    monkeypatch.chdir(tmp_path)  # the lab's runs root
    audit = lab_audit(str(run))
    assert all(c["ok"] is not False for c in audit["checks"]), audit


def test_restore_chunk_records_appends_only_what_the_log_lacks(tmp_path):
    from pawn.train.hooks import RunHooks
    from pawn.train.run import Run
    from pawn.train.rundir import RunDirPlan
    from pawn.train.spine import restore_chunk_records

    run = Run(tmp_path / "r", RunDirPlan(tmp_path / "r"), log=lambda m: None)
    run.open(snapshot={"x": 1}, open_sinks=RunHooks,
             start_step=0, resumed_from=None)
    run.logger.write("train", step=2, loss=3.0)
    run.logger.write("train", step=4, loss=2.0)  # written before the kill; its val record was not
    recs = [{"type": "train", "step": 4, "loss": 9.0}, {"type": "val", "step": 4, "loss": 2.5}, {"type": "val", "step": 6, "loss": 1.0}]
    assert restore_chunk_records(run, 4, recs) == 1
    run.logger.close()
    lines = [json.loads(ln) for ln in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    got = [(x["type"], x["step"], x["loss"]) for x in lines if x["type"] in ("train", "val")]
    assert got == [("train", 2, 3.0), ("train", 4, 2.0), ("val", 4, 2.5)]
