"""Run hooks (pawn.train.hooks): curves.png, TensorBoard and W&B logging of the records a run
writes to metrics.jsonl, and the compiled memory in the start-of-run summary.

The hooks' logic is tested with fakes of the TensorBoard writer and of ``wandb.init``; the tests
that use the real packages (optional extras ``pawn[tensorboard]``, ``pawn[wandb]``) skip when
they are not installed.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from pawn.settings import PretrainConfig
from pawn.train import hooks as H
from pawn.train.metrics import MetricsLogger, read_metrics
from pawn.train.pretrain import TrainingError, run_pretrain

SMALL = dict(variant="toy", batch_size=4, seq_len=32, steps_per_chunk=2, lr=1e-3, warmup_steps=1)

SMALL_KEY, BASE_KEY = "d256_L8_F1024", "d512_L8_F2048"


def supernet_records() -> list[dict]:
    """A hand-made metrics.jsonl of a two-variant supernet: config, 3 train chunks (the first
    with compilation, step 4 written twice as after a crash and resume), one validation."""
    cfg = {"type": "config", "summary": {"variants": {"small": {"config": SMALL_KEY}, "base": {"config": BASE_KEY}}}}

    def train(step, loss, lr, tps, compile_=False):
        return {"type": "train", "step": step, "loss": loss, "loss_mean": loss + 1, f"loss_{SMALL_KEY}": loss + 0.5,
                f"loss_{BASE_KEY}": loss - 0.5, "train/accuracy": 0.9, f"accuracy_{SMALL_KEY}": loss / 10,
                f"accuracy_{BASE_KEY}": loss / 20, "lr": lr, "tokens_per_s": tps, "includes_compile": compile_}

    val = {"type": "val", "step": 4, f"val/loss_{SMALL_KEY}": 3.5, f"val/loss_{BASE_KEY}": 3.0,
           f"val/accuracy_{SMALL_KEY}": 0.2, f"val/accuracy_{BASE_KEY}": 0.25,
           f"val/legal_move_rate_{SMALL_KEY}": 0.7, f"val/legal_move_rate_{BASE_KEY}": None,
           "val/improved": True}
    return [cfg, train(2, 5.0, 1e-4, 10.0, compile_=True), train(4, 9.0, 9e-4, 99.0), train(4, 4.0, 2e-4, 2000.0),
            val, train(6, 3.0, 3e-4, 3000.0)]


def test_curve_series_picks_every_panel_per_variant_from_the_records():
    s = H.curve_series(supernet_records())
    assert list(s) == ["loss", "top-1 accuracy", "val legal-move rate", "learning rate", "tokens/s"]
    small, base = "small", "base"  # variant names from the config record (v1 records migrated on read)
    # the re-done step 4 is drawn once, with the last record's values
    assert s["loss"]["train (joint)"] == ([2, 4, 6], [5.0, 4.0, 3.0])
    assert s["loss"][f"train {small}"] == ([2, 4, 6], [5.5, 4.5, 3.5])
    assert s["loss"][f"train {base}"] == ([2, 4, 6], [4.5, 3.5, 2.5])
    assert s["loss"][f"val {small}"] == ([4], [3.5]) and s["loss"][f"val {base}"] == ([4], [3.0])
    assert s["top-1 accuracy"][f"train {small}"] == ([2, 4, 6], [0.5, 0.4, 0.3])
    assert "train" not in s["top-1 accuracy"]  # per-variant accuracies replace train/accuracy
    assert s["top-1 accuracy"][f"val {base}"] == ([4], [0.25])
    assert s["val legal-move rate"] == {small: ([4], [0.7])}  # None (NaN) is not drawn
    assert s["learning rate"]["lr"] == ([2, 4, 6], [1e-4, 2e-4, 3e-4])
    assert s["tokens/s"]["tokens/s"] == ([4, 6], [2000.0, 3000.0])  # the compiling chunk is left out


def test_curve_series_of_a_single_model_draws_its_loss_once():
    recs = [{"type": "train", "step": 2, "loss": 7.0, "loss_d64_L2_F256": 7.0, "train/accuracy": 0.1, "lr": 1e-3}]
    s = H.curve_series(recs)
    assert s["loss"] == {"train": ([2], [7.0])}
    assert s["top-1 accuracy"] == {"train": ([2], [0.1])}
    assert H.curve_series([{"type": "config"}]) == {}


def _png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_plot_curves_writes_a_png_with_one_panel_per_series_group(tmp_path):
    out = tmp_path / "curves.png"
    assert H.plot_curves(supernet_records(), out, title="run")
    # 5 panels → 2 columns × 3 rows of 6 × 3.6 inches at 100 dpi
    assert _png_size(out) == (1200, 1080)
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]  # the temp file was renamed
    one = tmp_path / "one.png"
    assert H.plot_curves([{"type": "train", "step": 2, "lr": 1e-3}], one)
    assert _png_size(one) == (600, 360)
    assert not H.plot_curves([{"type": "config"}], tmp_path / "none.png") and not (tmp_path / "none.png").exists()


def test_run_hooks_drop_a_failing_hook_with_one_warning_and_keep_the_others():
    seen, msgs, closed = [], [], []

    class Good:
        def on_record(self, kind, record):
            seen.append((kind, record["step"]))

        def close(self):
            closed.append("good")

    class Bad:
        def on_record(self, kind, record):
            raise OSError("No space left on device")

        def close(self):
            raise AssertionError("a dropped hook is not closed")

    assert isinstance(Good(), H.RunHook)
    hooks = H.RunHooks([Bad(), Good()], log=msgs.append)
    hooks.on_record("train", {"step": 2})
    hooks.on_record("train", {"step": 4})
    assert seen == [("train", 2), ("train", 4)]
    assert len(msgs) == 1 and "Bad failed on a train record" in msgs[0] and "No space left" in msgs[0] and "\n" not in msgs[0]
    hooks.close()
    assert closed == ["good"] and len(hooks) == 0


def test_metrics_logger_hands_each_record_as_written_to_its_hooks_and_closes_them(tmp_path):
    got, closed = [], []

    class Rec:
        def on_record(self, kind, record):
            got.append((kind, record))

        def close(self):
            closed.append(True)

    log = MetricsLogger(tmp_path / "metrics.jsonl", hooks=H.RunHooks([Rec()]))
    log.write("train", step=2, loss=float("nan"), lr=1e-3)
    log.close()
    (kind, rec), = got
    assert kind == "train" and rec["loss"] is None and rec["step"] == 2 and "timestamp" in rec
    assert read_metrics(tmp_path / "metrics.jsonl") == [rec]
    assert closed == [True]


def test_scalars_prefix_train_keys_and_drop_non_numbers():
    rec = {"type": "train", "step": 4, "loss": 2.0, "lr": 1e-3, "train/accuracy": 0.5, "mem/rss_gb": 1.0,
           "includes_compile": False, "step_start": 2, "timestamp": "t", "grad_norm": None, "elapsed": 3}
    # a schema-1 record (as older runs wrote it) gives the tags of the run record's keys
    assert H.scalars("train", rec) == {"train/loss": 2.0, "train/lr": 1e-3, "train/top1": 0.5, "mem/rss_gb": 1.0}
    assert H.scalars("val", {"step": 4, "val/loss_d64_L2_F256": 3.0, "val/improved": True}) == {"val/loss": 3.0}
    v2 = {"type": "val", "schema": 2, "step": 4, "loss": 3.0, "variants": {"small": {"loss": 3.5, "top1": None}},
          "weights": {"layer0.wq.A": 1.25}, "improved": True}
    assert H.scalars("val", v2) == {"val/loss": 3.0, "val/small/loss": 3.5, "weights/layer0.wq.A": 1.25}


class FakeWriter:
    def __init__(self, logdir, **kw):
        self.logdir, self.kw, self.scalars, self.texts, self.closed = logdir, kw, [], [], False

    def add_scalar(self, tag, value, step):
        self.scalars.append((tag, value, step))

    def add_text(self, tag, text):
        self.texts.append((tag, text))

    def flush(self):
        pass

    def close(self):
        self.closed = True


def test_tensorboard_hook_writes_scalars_at_their_steps_and_purges_redone_steps_on_resume(tmp_path):
    hook = H.TensorBoardHook(tmp_path / "tb", writer_factory=FakeWriter)
    assert hook.writer.kw == {}
    hook.on_record("config", {"type": "config", "summary": {"model": "variant toy"}})
    hook.on_record("train", {"type": "train", "step": 2, "loss": 7.5, "lr": 1e-3})
    hook.on_record("val", {"type": "val", "schema": 2, "step": 2, "loss": 7.0})
    hook.close()
    assert hook.writer.scalars == [("train/loss", 7.5, 2), ("train/lr", 1e-3, 2), ("val/loss", 7.0, 2)]
    assert hook.writer.texts[0][0] == "config" and '"variant toy"' in hook.writer.texts[0][1]
    assert hook.writer.closed and hook.writer.logdir == str(tmp_path / "tb")
    resumed = H.TensorBoardHook(tmp_path / "tb", purge_step=9, writer_factory=FakeWriter)
    assert resumed.writer.kw == {"purge_step": 9}


def _tfrecords(path: Path):
    """Records of a TFRecord event file: u64 length, u32 crc, data, u32 crc."""
    data, i = path.read_bytes(), 0
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        yield data[i + 12:i + 12 + n]
        i += 12 + n + 4


def test_tensorboard_event_file_holds_the_scalars(tmp_path):
    event_pb2 = pytest.importorskip("tensorboardX.proto.event_pb2", reason="the tensorboard extra (tensorboardX) is not installed")

    hook = H.TensorBoardHook(tmp_path / "tensorboard")
    hook.on_record("train", {"type": "train", "step": 2, "loss": 7.5})
    hook.on_record("train", {"type": "train", "step": 4, "loss": 7.25})
    hook.close()
    (f,) = (tmp_path / "tensorboard").glob("events.out.tfevents.*")
    got = []
    for raw in _tfrecords(f):
        ev = event_pb2.Event.FromString(raw)
        got += [(v.tag, ev.step, v.simple_value) for v in ev.summary.value]
    assert got == [("train/loss", 2, 7.5), ("train/loss", 4, 7.25)]


class FakeRun:
    def __init__(self, **kw):
        self.kw, self.logged, self.finished = kw, [], False
        run = self

        class Config:
            def update(self, d, allow_val_change=False):
                run.config_updates = d

        self.config = Config()

    def log(self, d, step):
        self.logged.append((step, d))

    def finish(self):
        self.finished = True


def test_wandb_hook_names_the_run_after_its_directory_and_logs_records_at_their_steps(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    hook = H.WandbHook(tmp_path / "run7", {"lr": 1e-3}, mode="offline", init=lambda **kw: FakeRun(**kw))
    kw = hook.run.kw
    assert kw["project"] == "from-env" and kw["name"] == kw["group"] == "run7" and kw["dir"] == str(tmp_path / "run7")
    assert kw["mode"] == "offline" and kw["job_type"] == "pretrain" and "run_type:pretrain" in kw["tags"]
    assert kw["config"]["lr"] == 1e-3 and kw["config"]["run_dir"] == str(tmp_path / "run7")
    hook.on_record("config", {"type": "config", "summary": {"devices": 1}, "timestamp": "t"})
    hook.on_record("train", {"type": "train", "step": 2, "loss": 7.5, "grad_norm": 1.0})
    hook.on_record("val", {"type": "val", "schema": 2, "step": 2, "loss": 7.0})
    hook.close()
    assert hook.run.config_updates == {"summary": {"devices": 1}}
    assert hook.run.logged == [(2, {"train/loss": 7.5, "train/grad_norm": 1.0}), (2, {"val/loss": 7.0})]
    assert hook.run.finished
    assert H.WandbHook(tmp_path, {}, project="mine", init=lambda **kw: FakeRun(**kw)).run.kw["project"] == "mine"
    monkeypatch.delenv("WANDB_PROJECT")
    assert H.wandb_project(None) == "pawn"


def test_wandb_init_failure_is_one_line(tmp_path):
    def init(**kw):
        raise RuntimeError("api_key not configured (no-tty)\ncall wandb login")

    with pytest.raises(H.HookError) as e:
        H.WandbHook(tmp_path, {}, init=init)
    msg = str(e.value)
    assert "\n" not in msg and "wandb.init failed in online mode" in msg and "api_key" in msg and "--wandb-mode offline" in msg


def test_wandb_offline_run_writes_its_files_without_a_network(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="the wandb extra is not installed")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    hook = H.WandbHook(tmp_path / "run", {"lr": 1e-3}, mode="offline")
    hook.on_record("train", {"type": "train", "step": 2, "loss": 7.5})
    hook.close()
    (run_file,) = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    assert run_file.stat().st_size > 0


def test_missing_extras_are_one_line_errors_naming_the_extra(monkeypatch):
    monkeypatch.setattr(H, "has_module", lambda m: False)
    with pytest.raises(H.HookError, match=r"^--tensorboard needs tensorboardX, which is not installed: pip install 'pawn\[tensorboard\]'"):
        H.check_extras(tensorboard=True)
    with pytest.raises(H.HookError, match=r"^--wandb needs wandb, .*'pawn\[wandb\]'"):
        H.check_extras(wandb=True)
    H.check_extras()  # nothing asked, nothing needed


def test_without_matplotlib_there_is_one_note_and_no_curves_hook(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "has_module", lambda m: m not in ("matplotlib", "plotly"))
    monkeypatch.setattr(H, "_NOTED", {"matplotlib": False})  # a fresh process
    msgs = []
    hooks = H.open_run_hooks(tmp_path, config={}, log=msgs.append)
    assert len(hooks) == 0 and len(msgs) == 1 and "matplotlib is not installed" in msgs[0] and "pawn[plot]" in msgs[0]
    # the next runs of the same process (a sweep's trials) draw no curves either, and say nothing more
    for i in range(3):
        assert len(H.open_run_hooks(tmp_path / f"trial{i}", config={}, log=msgs.append)) == 0
    assert len(msgs) == 1


def test_logging_settings_come_from_flags_environment_and_config(monkeypatch):
    monkeypatch.setenv("PAWN_WANDB_MODE", "offline")
    monkeypatch.setenv("PAWN_TENSORBOARD", "true")
    c = PretrainConfig.load(total_steps=4, wandb=True)
    assert (c.tensorboard, c.wandb, c.wandb_mode, c.wandb_project) == (True, True, "offline", None)
    monkeypatch.setenv("PAWN_WANDB_MODE", "sometimes")
    with pytest.raises(Exception, match="wandb_mode"):
        PretrainConfig.load(total_steps=4)


def test_pretrain_draws_curves_and_records_compiled_memory_in_the_summary(tmp_path):
    msgs: list[str] = []
    res = run_pretrain(PretrainConfig.load(**SMALL, total_steps=4, val_every=2, checkpoint_every=4, val_games=4,
                                           out=tmp_path / "run"), log=msgs.append, progress=False, install_signal_handlers=False)
    assert _png_size(res.run_dir / "curves.png")[0] > 0
    assert not list(res.run_dir.glob("*.tmp*"))
    cfg_rec = read_metrics(res.run_dir / "metrics.jsonl")[0]
    mem = cfg_rec["summary"]["compiled_memory"]
    assert mem["peak_bytes"] == mem["temp_bytes"] + mem["fixed_bytes"] > 0
    assert mem["remat"] == "none" and mem["accumulation_steps"] == 1 and mem["capacity_source"] == "available host RAM"
    line = next(m for m in msgs if m.startswith("compiled step:"))
    assert f"{mem['peak_bytes'] / 2**30:.2f} GiB per device (remat none, accumulation 1)" in line
    assert json.loads((res.run_dir / "config.json").read_text())["wandb"] is False


def test_pretrain_with_a_missing_extra_stops_in_one_line_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "has_module", lambda m: m != "tensorboardX")
    with pytest.raises(TrainingError, match=r"^--tensorboard needs tensorboardX") as e:
        run_pretrain(PretrainConfig.load(**SMALL, total_steps=2, val_every=2, checkpoint_every=2, val_games=0, tensorboard=True,
                                         out=tmp_path / "run"), progress=False, install_signal_handlers=False)
    assert "\n" not in str(e.value) and not (tmp_path / "run").exists()


def test_pretrain_hook_opening_failure_leaves_no_run_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(H, "has_module", lambda m: True)

    def fail(*a, **kw):
        raise H.HookError("--wandb: wandb.init failed in online mode (CommError: no network)")

    monkeypatch.setattr(H, "WandbHook", fail)
    cfg = PretrainConfig.load(**SMALL, total_steps=2, val_every=2, checkpoint_every=2, val_games=0, wandb=True, out=tmp_path / "run")
    with pytest.raises(TrainingError, match="wandb.init failed"):
        run_pretrain(cfg, progress=False, install_signal_handlers=False)
    from pawn.train.rundir import run_markers

    assert run_markers(tmp_path / "run") == []  # a retry with --wandb-mode offline is not refused
