"""``pawn adapt`` (issue 13): the adapter trainer on the shared Lichess games, its loss, resume,
signals and the CLI. Backbone: a tiny random-init checkpoint made once per session."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from pawn.checkpoint import save_checkpoint
from pawn.config import ModelConfig
from pawn.model import PAWNModel
from pawn.train.adapt import run_adapt
from pawn.train.adapter_step import make_validator, position_terms
from pawn.train.adapt_config import AdaptSettings
from pawn.train.run import Hook

BB_CFG = ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64)


@pytest.fixture(scope="session")
def backbone(tiny_backbone) -> Path:
    return tiny_backbone


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("adapt-cache")


def _cfg(backbone, shared_data, cache_dir, out, **kw) -> AdaptSettings:
    base = dict(backbone=str(backbone), strategy="bottleneck", bottleneck_dim=8, data=str(shared_data / "lichess"),
                elo_min=1200, elo_max=2200, epochs=2, steps_per_epoch=6, batch_size=16, seq_len=96, val_games=96,
                lr=3e-3, data_seed=7, cache_dir=str(cache_dir), out=str(out))
    base.update(kw)
    return AdaptSettings.load(**base)


def _records(run_dir: Path, kind: str) -> list[dict]:
    """The run's ``kind`` records in file order, read through the run record (pawn.runs), flat:
    step, metric values (pawn.metrics keys), other fields."""
    from pawn.runs import open_run

    return [{"step": r.step, **r.values, **r.fields} for r in open_run(run_dir).records(types=[kind])[0]]


# ---------------------------------------------------------------------------------------- loss
def test_position_terms_match_a_hand_computed_masked_cross_entropy():
    logits = jnp.array([[[1.0, 2.0, 0.5, -1.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]]])  # [1, 2, 5]
    targets = jnp.array([[1, 0]])
    loss_mask = jnp.array([[True, False]])
    legal = jnp.array([[[True, True, True, False, False], [False] * 5]])  # row 2 all-false, outside the mask
    t = position_terms(logits, targets, loss_mask, legal, legal_mask=True)
    z = np.array([1.0, 2.0, 0.5])
    want = -(z[1] - np.log(np.exp(z).sum()))
    assert np.isclose(float(t["loss"][0, 0]), want, atol=1e-6)
    assert float(t["loss"][0, 1]) == 0.0 and float(t["top1"][0, 0]) == 1.0  # argmax among legal = 1
    assert float(t["illegal_mass"].sum()) == 0.0 and float(t["illegal_pred"].sum()) == 0.0
    # no mask: plain CE over all 5, penalty λ·(mass on 3 and 4), argmax 4 is illegal
    u = position_terms(logits, targets, loss_mask, legal, legal_mask=False, illegal_penalty=0.5)
    za = np.array([1.0, 2.0, 0.5, -1.0, 3.0])
    p = np.exp(za) / np.exp(za).sum()
    assert np.isclose(float(u["nll"][0, 0]), -np.log(p[1]), atol=1e-6)
    assert np.isclose(float(u["illegal_mass"][0, 0]), p[3] + p[4], atol=1e-6)
    assert np.isclose(float(u["loss"][0, 0]), -np.log(p[1]) + 0.5 * (p[3] + p[4]), atol=1e-6)
    assert float(u["illegal_pred"][0, 0]) == 1.0 and float(u["top1"][0, 0]) == 0.0


def test_masked_loss_gradient_is_finite_with_empty_rows_outside_the_mask():
    legal = jnp.zeros((1, 3, 6), bool).at[0, 0, 2].set(True).at[0, 0, 4].set(True)  # rows 1, 2 all-false
    targets, mask = jnp.array([[2, 0, 0]]), jnp.array([[True, False, False]])

    def f(x):
        return position_terms(x, targets, mask, legal, legal_mask=True)["loss"].sum()

    x = jax.random.normal(jax.random.PRNGKey(0), (1, 3, 6))
    g = jax.grad(f)(x)
    assert np.all(np.isfinite(np.asarray(g))) and np.isfinite(float(f(x)))
    assert np.all(np.asarray(g)[0, 1:] == 0) and np.all(np.asarray(g)[0, 0, [0, 1, 3, 5]] == 0)


def test_masked_loss_counts_move_decisions_and_not_the_end_of_game_slot():
    """Under the hard mask the end-of-game slot (target PAD, legal set {PAD}) is a certain hit with
    zero loss: counting it added one free hit per game. Position 0 predicts a move among 3 legal
    ones, position 1 is the end of the game: the loss and top-1 are position 0's alone. Without
    the mask the PAD target is a real prediction and both positions count."""
    from pawn.train.adapter_step import make_adapter_count, make_adapter_loss
    from pawn.vocab import PAD_TOKEN, VOCAB_SIZE

    z = np.zeros((1, 2, VOCAB_SIZE), np.float32)
    z[0, 0, [5, 6, 7]] = [2.0, 1.0, 0.0]  # target 6: not the argmax
    legal = np.zeros((1, 2, VOCAB_SIZE), bool)
    legal[0, 0, [5, 6, 7]] = True
    legal[0, 1, PAD_TOKEN] = True
    batch = {"input_ids": jnp.array([[5, 6]]), "attn_mask": jnp.array([[True, True]]), "targets": jnp.array([[6, PAD_TOKEN]]),
             "loss_mask": jnp.array([[True, True]]), "legal": jnp.asarray(np.packbits(legal, axis=-1, bitorder="little"))}

    class Fixed(eqx.Module):
        def __call__(self, ids, attn, dtype=None, prefix_mask=False):
            return jnp.asarray(z)

    want = -(1.0 - np.log(np.exp([2.0, 1.0, 0.0]).sum()))
    loss, m = make_adapter_loss(legal_mask=True, illegal_penalty=0.0, dtype=None)(Fixed(), batch)
    assert float(loss) == pytest.approx(want, rel=1e-6) and float(m["top1"]) == 0.0  # was want / 2 and 0.5
    assert int(make_adapter_count(legal_mask=True)(batch)) == 1
    assert int(make_adapter_count(legal_mask=False)(batch)) == 2
    val = make_validator(legal_mask=True, illegal_penalty=0.0, dtype=None)(Fixed(), [batch])
    assert val["positions"] == 1 and val["top1"] == 0.0 and val["loss"] == pytest.approx(want, rel=1e-6)
    plain, _ = make_adapter_loss(legal_mask=False, illegal_penalty=0.0, dtype=None)(Fixed(), batch)
    nll = -np.array([z[0, 0, 6], z[0, 1, PAD_TOKEN]]) + np.log(np.exp(z[0]).sum(-1))
    assert float(plain) == pytest.approx(nll.mean(), rel=1e-6)


def test_validation_hand_count_on_real_games_cut_and_ended(shared_data):
    """The validator's positions, loss and top-1 under the mask, counted by hand with the engine's
    game state: each game contributes its L' − 1 move decisions (L' = plies kept at seq_len 48;
    the first move is never a target, the last slot predicts PAD: an ended game's end, a cut
    game's cut, neither a move decision). A model of constant logits is the uniform player over
    the legal moves: loss ln N per decision, and its argmax (the lowest legal token) is right
    where the game played that token."""
    from pawn.data.cache import CsrGames
    from pawn.data.layout import Layout
    from pawn.data.lichess_batches import ValidationBatches
    from pawn.engine import GameState, parse_pgn
    from pawn.train.adapter_step import BATCH_KEYS
    from pawn.vocab import VOCAB_SIZE

    g = parse_pgn(str(shared_data / "lichess" / "lichess_db_2013-01_first32_mliebelt-pgn-parser.pgn"))
    n, T = 6, 48
    lens = g.lengths[:n].astype(np.int64)
    assert (lens > T).any() and (lens <= T).any()  # both kinds: cut at the cap and ended
    flat = np.concatenate([g.tokens[i, :lens[i]] for i in range(n)]).astype(np.int16)
    games = CsrGames(flat, np.concatenate([[0], np.cumsum(lens)]), g.outcome[:n].astype(np.int16), {})
    batches = ValidationBatches(games, Layout.of(False), T, 4, BATCH_KEYS)

    class Constant(eqx.Module):
        def __call__(self, ids, attn, dtype=None, prefix_mask=False):
            return jnp.zeros(ids.shape + (VOCAB_SIZE,), jnp.float32)

    val = make_validator(legal_mask=True, illegal_penalty=0.0, dtype=None)(Constant(), batches)
    hits, logs, count = 0, [], 0
    for i in range(n):
        kept = min(int(lens[i]), T)
        s = GameState(32767)
        for ply in range(kept):
            tok = int(g.tokens[i, ply])
            if ply >= 1:  # a move decision: position ply − 1 predicts this move
                legal = sorted(int(t) for t in s.legal_move_tokens())
                hits += legal[0] == tok
                logs.append(np.log(len(legal)))
                count += 1
            s.make_move(tok)
    assert val["positions"] == count == int(sum(min(int(x), T) - 1 for x in lens))
    assert val["top1"] == pytest.approx(hits / count, abs=1e-9)
    assert val["loss"] == pytest.approx(float(np.mean(logs)), rel=1e-5)


# ---------------------------------------------------------------------------------------- settings
def test_settings_env_config_and_cross_field_rules(tmp_path, monkeypatch):
    from pydantic import ValidationError

    monkeypatch.setenv("PAWN_LORA_RANK", "8")
    monkeypatch.setenv("PAWN_ADAPTER_LAYERS", "1,3")
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"strategy": "lora", "lora_rank": 2, "epochs": 5}))
    c = AdaptSettings.load(f, backbone="x")
    assert (c.lora_rank, c.epochs, c.adapter_layers) == (8, 5, (1, 3))
    assert c.adapter_settings()["rank"] == 8 and c.adapter_settings()["layers"] == (1, 3)
    with pytest.raises(ValidationError, match="no-legal-mask"):
        AdaptSettings.load(backbone="x", strategy="lora", illegal_penalty=0.1)
    with pytest.raises(ValidationError, match="unknown"):
        AdaptSettings.load(backbone="x", strategy="lorax")


# ---------------------------------------------------------------------------------------- runs
def test_bottleneck_run_lifts_val_top1_and_baseline_is_the_bare_backbone(backbone, shared_data, cache_dir, tmp_path):
    res = run_adapt(_cfg(backbone, shared_data, cache_dir, tmp_path / "run"), log=lambda m: None, progress=False,
                    install_signal_handlers=False)
    assert res.reason == "step_limit" and res.step == 12 and res.trainable_params == 2 * 2 * 2 * 32 * 8
    base = res.baseline_val
    vals = _records(res.run_dir, "val")
    assert vals[0]["step"] == 0 and vals[0]["epoch"] == -1 and [v["step"] for v in vals] == [0, 6, 12]
    assert vals[-1]["top1"] > base["top1"], (base, vals[-1])
    # round trip (an adapter run's curves had no validation line): what the run wrote → the curves
    from pawn.runs import open_run
    from pawn.train.hooks import curve_series

    series = curve_series(open_run(res.run_dir).all_records())
    assert series["loss"]["val"] == ([0, 6, 12], [v["loss"] for v in vals])
    assert series["top-1 accuracy"]["val"] == ([0, 6, 12], [v["top1"] for v in vals]) and "train" in series["top-1 accuracy"]
    assert (res.run_dir / "curves.png").stat().st_size > 0
    # step-0 validation == the bare backbone's, through the same validator and batches
    from pawn.data.lichess import LichessFilters, load_corpus
    from pawn.data.lichess_batches import GameBatches
    from pawn.data.layout import Layout
    from pawn.train.adapter_step import BATCH_KEYS, batch_dict

    corpus = load_corpus(shared_data / "lichess", LichessFilters(1200, 2200, 10), val_games=96, cache_dir=cache_dir)
    gb = GameBatches(corpus.val, Layout.of(False), 96, 16, shuffle=False, drop_last=False)
    batches = [batch_dict(b, (*BATCH_KEYS, "legal")) for b in gb.iter_from(0, prefetch=0)]
    bare = make_validator(legal_mask=True, illegal_penalty=0.0, dtype=None)(
        PAWNModel(BB_CFG, jax.random.PRNGKey(1)), batches)
    for k in ("loss", "top1", "top5"):
        assert abs(bare[k] - base[k]) < 1e-5, (k, bare[k], base[k])
    assert bare["positions"] == base["positions"] > 0
    # best link, training state, schedule health
    assert (res.run_dir / "best").is_symlink() and (res.run_dir / "best" / "adapter.safetensors").is_file()
    ts = json.loads((res.run_dir / "checkpoints" / "step_00000012" / "training_state.json").read_text())
    assert (ts["step"], ts["epoch"], ts["steps_per_epoch"], ts["data_seed"]) == (12, 2, 6, 7)
    assert ts["best_val_loss"] == min(v["loss"] for v in vals[1:])
    health = json.loads((res.run_dir / "schedule_health.json").read_text())
    assert health["reason_for_stop"] == "step_limit" and health["actual_total_steps"] == 12


@pytest.mark.slow
@pytest.mark.parametrize("strategy,extra", [
    ("lora", {"lora_rank": 4}), ("film", {"use_output_film": True}), ("hybrid", {"lora_rank": 2}),
    ("unfreeze", {"n_unfreeze": 1}), ("sparse", {"density": 0.05}), ("specialized_clm", {"d_model": 32, "n_layers": 1, "n_heads": 1, "specialized_d_ff": 64}),
])
def test_every_strategy_lifts_val_top1(strategy, extra, backbone, shared_data, cache_dir, tmp_path):
    res = run_adapt(_cfg(backbone, shared_data, cache_dir, tmp_path / strategy, strategy=strategy, **extra),
                    log=lambda m: None, progress=False, install_signal_handlers=False)
    vals = _records(res.run_dir, "val")
    assert res.reason == "step_limit"
    assert vals[-1]["top1"] > vals[0]["top1"], (strategy, vals[0], vals[-1])


@pytest.mark.slow
def test_resume_mid_epoch_reproduces_the_uninterrupted_run(backbone, shared_data, cache_dir, tmp_path):
    kw = dict(strategy="lora", lora_rank=2, steps_per_epoch=4, epochs=2, steps_per_chunk=1)
    full = run_adapt(_cfg(backbone, shared_data, cache_dir, tmp_path / "full", **kw), log=lambda m: None,
                     progress=False, install_signal_handlers=False)
    part = run_adapt(_cfg(backbone, shared_data, cache_dir, tmp_path / "part", pause_after_steps=3, **kw),
                     log=lambda m: None, progress=False, install_signal_handlers=False)
    assert part.reason == "paused" and part.step == 3  # mid-epoch 0 (4 steps per epoch)
    res = run_adapt(AdaptSettings.load(resume="auto", out=str(tmp_path / "part")), log=lambda m: None,
                    progress=False, install_signal_handlers=False)
    assert res.step == 8 and res.reason == "step_limit"
    want = [(r["step"], r["loss"]) for r in _records(full.run_dir, "train")]
    got = [(r["step"], r["loss"]) for r in _records(res.run_dir, "train")]
    assert got == want
    from safetensors.numpy import load_file

    a = load_file(str(full.checkpoint / "adapter.safetensors"))
    b = load_file(str(res.checkpoint / "adapter.safetensors"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_sigterm_checkpoints_and_stops(backbone, shared_data, cache_dir, tmp_path):
    class Kill(Hook):
        def on_chunk(self, ctx):
            if ctx.step == 2:
                os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    logged: list[str] = []
    res = run_adapt(_cfg(backbone, shared_data, cache_dir, tmp_path / "run", steps_per_chunk=2, epochs=1),
                    log=logged.append, progress=False, install_signal_handlers=True, hooks=[Kill()])
    data = next(m for m in logged if m.startswith("data: "))
    assert " steps per epoch × 1 epoch = " in data, data  # was "× 1 epochs"
    assert res.reason == "sigterm" and res.step == 4  # the flag is read after the chunk of step 2's hooks
    assert res.checkpoint.name == "step_00000004"
    assert json.loads((res.run_dir / "schedule_health.json").read_text())["reason_for_stop"] == "sigterm"
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_sigterm_before_the_first_step_checkpoints_and_exits_zero(backbone, shared_data, cache_dir, tmp_path):
    # SIGTERM right after the backbone is loaded (before the data, the step-0 validation and the
    # compile): the same clean stop as a later one, not the default handler's exit 143.
    import subprocess
    import sys

    out = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "pawn.cli", "adapt", str(backbone), "--strategy", "bottleneck",
                          "--bottleneck-dim", "8", "--data", str(shared_data / "lichess"), "--elo-min", "1200",
                          "--elo-max", "2200", "--epochs", "1", "--steps-per-epoch", "4", "--steps-per-chunk", "2",
                          "--batch-size", "16", "--seq-len", "96", "--val-games", "96", "--lr", "3e-3", "--data-seed", "7",
                          "--cache-dir", str(cache_dir), "--out", str(out)],
                         env={**os.environ, "JAX_PLATFORMS": "cpu"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = p.stderr.readline()  # "strategy bottleneck: N trainable parameters …", logged after the backbone load
        assert "trainable parameters" in first, first
        p.send_signal(signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=300)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, (p.returncode, first + stderr)
    assert "SIGTERM: stopping after this chunk" in stderr
    ck = out / "checkpoints" / "step_00000002"
    assert f"stopped by signal at step 2; checkpoint {ck}" in stdout, stdout
    assert json.loads((out / "schedule_health.json").read_text())["reason_for_stop"] == "sigterm"
    assert json.loads((ck / "training_state.json").read_text())["step"] == 2
    assert [v["step"] for v in _records(out, "val")] == [0]  # the step-0 baseline ran before the stop
    res = run_adapt(AdaptSettings.load(resume="auto", out=str(out)), log=lambda m: None, progress=False,
                    install_signal_handlers=False)
    assert res.reason == "step_limit" and res.step == 4
    assert [r["step"] for r in _records(out, "train")] == [2, 4]


def test_cli_eval_of_best_and_refused_backbone(backbone, shared_data, cache_dir, tmp_path, lichess_pgns):
    import shutil

    from pawn.cli import app

    bb = tmp_path / "bb"
    shutil.copytree(backbone, bb)
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["adapt", str(bb), "--strategy", "film", "--data", str(shared_data / "lichess"),
                                 "--elo-min", "1200", "--elo-max", "2200", "--epochs", "1", "--steps-per-epoch", "4",
                                 "--batch-size", "16", "--seq-len", "96", "--val-games", "64", "--cache-dir", str(cache_dir),
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "trainable parameters" in r.output
    pgn = next(p for p in lichess_pgns if "first1000" in p.name)
    r = CliRunner().invoke(app, ["eval", str(out / "best"), "--pgn", str(pgn), "--elo-edges", "1200,1600,2000"])
    assert r.exit_code == 0, r.output
    assert "elo_1200_1600" in r.output
    # the backbone replaced by other weights of the same shape: refused, naming the hash
    other = PAWNModel(BB_CFG, jax.random.PRNGKey(2))
    shutil.rmtree(bb)
    save_checkpoint(bb, {k: np.asarray(v) for k, v in other.params().items()}, BB_CFG)
    r = CliRunner().invoke(app, ["eval", str(out / "best"), "--pgn", str(pgn)])
    assert r.exit_code != 0 and "SHA-256" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(app, ["adapt", "--resume", str(out)])
    assert r.exit_code != 0 and "SHA-256" in r.output


# ---------------------------------------------------------------------------------------- bench
@pytest.mark.slow
def test_bench_adapt_section_times_strategies_against_full_finetuning(shared_data, monkeypatch):
    from pawn.bench import SECTIONS, BenchSettings, bench_adapt, parse_only
    from pawn.bench.report import VIEWS, render

    assert "adapt" in SECTIONS and parse_only(["adapt"]) == ["adapt"]
    s = BenchSettings.load(quick=True, adapt_strategies=["lora"], adapt_data=str(shared_data / "lichess"), repeats=1)
    r = bench_adapt(s)
    assert [a.strategy for a in r.steps] == ["full_finetune", "lora"]
    d, L = 64, 2  # the toy variant
    assert r.steps[1].trainable_params == L * 4 * 2 * d * 4 and r.steps[0].trainable_params == r.backbone_params
    assert r.steps[0].vs_full == 1.0
    lora = r.steps[1]
    assert np.isclose(lora.vs_full, lora.chunk.rates["tokens_per_s"] / r.steps[0].chunk.rates["tokens_per_s"])
    assert np.isclose(lora.chunk.rates["tokens_per_s"], s.steps_per_chunk * s.batch_size * s.seq_len / lora.chunk.median_s)
    # model FLOPs: 4·N + 12·L·T·d for the frozen-backbone step, 6·N + … for full fine-tuning
    T, N = s.seq_len, r.backbone_params
    assert lora.flops_per_token == 4 * N + 12 * L * T * d and r.steps[0].flops_per_token == 6 * N + 12 * L * T * d
    assert r.peak is not None and r.peak.flops_per_s > 0 and r.pretrain_mfu is None  # the mfu section did not run
    for a in r.steps:
        assert np.isclose(a.mfu, a.flops_per_token * a.chunk.rates["tokens_per_s"] / r.peak.flops_per_s)
    w = r.data_wait
    assert w.strategy == "lora" and 0.0 <= w.wait_frac <= 1.0 and w.wait_s <= w.wall_s and w.tokens_per_s > 0
    assert r.train_games > 1000  # the real Lichess games, not the fallback
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=300, color_system=None).print(render(VIEWS["adapt"](r)))
    text = buf.getvalue()
    assert "% of peak" in text and f"{100 * lora.mfu:.2f}%" in text


def test_eval_pgn_reads_a_folder_as_its_files_in_name_order(shared_data, lichess_pgns):
    from pawn.engine import parse_pgn
    from pawn.evaluate.accuracy import evaluate_pgn

    model = PAWNModel(ModelConfig(d_model=16, n_layers=1, n_heads=1, d_ff=32), jax.random.PRNGKey(0))
    r = evaluate_pgn(model, str(shared_data / "lichess"), seq_len=16, elo_edges=(0, 4000), max_games_per_band=2, min_ply=10)
    read = sum(parse_pgn(str(p), max_ply=16, min_ply=10).counts["read"] for p in lichess_pgns)
    assert r["parser"]["read"] == read > 7000
    assert r["bands"]["elo_0_4000"]["n_games"] == 2


def test_unused_strategy_flags_and_a_longer_seq_len_than_the_backbone_warn(backbone, shared_data, cache_dir, tmp_path):
    """`--strategy film --lora-rank 8` once ran silently (the rank unused), as did a --seq-len
    past the backbone's trained context (the tiny backbone's run config says 128 plies)."""
    lines = []
    cfg = AdaptSettings.load(backbone=str(backbone), strategy="film", lora_rank=8, bottleneck_dim=16,
                             data=str(shared_data / "lichess"), elo_min=1200, elo_max=2200, epochs=1, steps_per_epoch=2,
                             steps_per_chunk=2, batch_size=4, seq_len=160, val_games=16, data_seed=7,
                             cache_dir=str(cache_dir), out=str(tmp_path / "run"))
    res = run_adapt(cfg, log=lines.append, progress=False, install_signal_handlers=False)
    assert res.step == 2
    assert "WARNING: strategy film does not use --bottleneck-dim, --lora-rank (ignored)" in lines, lines
    assert any(m.startswith("WARNING: --seq-len 160 is longer than the 128 plies the backbone was trained on")
               for m in lines), lines


@pytest.mark.parametrize("fields,unused", [
    (dict(strategy="film", lora_rank=8, adapter_layers="0"), ["lora_rank"]),
    (dict(strategy="bottleneck", bottleneck_dim=16, density=0.1), ["density"]),
    (dict(strategy="retro-bottleneck", bottleneck_dim=16, density=0.1, lora_rank=2, seed=3), []),
    (dict(strategy="lora", lora_rank=2, init_scale=0.5, seed=3), []),
])
def test_unused_strategy_fields(fields, unused):
    assert AdaptSettings.load(backbone="x", **fields).unused_strategy_fields() == unused
