"""``pawn bench`` section ``decode``: generation speed with and without the KV cache, per model
step and end to end (spec ``eval-probe-generate-sweep-bench.md`` §3.1, §7)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from pawn.bench.records import OMIT_NONE, Measurement
from pawn.bench.settings import BenchSettings
from pawn.bench.section import Section, register
from pawn.bench.report import _range, TableView
from pawn.config import flops_per_token
from pawn.bench.timing import time_call


@dataclass
class DecodeStep:
    """One generation step, model time only: the KV-cache decode step, the full recompute
    forward, and ``step_speedup`` = recompute median / KV median."""

    kv_cache: Measurement
    recompute: Measurement
    step_speedup: float


@dataclass
class DecodeWorkload:
    """``games × seq_len``: the :class:`DecodeStep` and end-to-end generation per form
    (``kv_cache``, ``recompute``: :class:`Measurement` with ``tokens_per_s`` and ``tokens``);
    ``kv_speedup`` = KV tokens/s ÷ recompute tokens/s when both ran."""

    games: int
    seq_len: int
    step: DecodeStep
    forms: dict[str, Measurement] = field(default_factory=dict)
    kv_speedup: Optional[float] = field(default=None, metadata=OMIT_NONE)


@dataclass
class DecodeResult:
    """The ``decode`` section: the model and its two :class:`DecodeWorkload`."""

    model: str
    config: str
    workloads: list[DecodeWorkload] = field(default_factory=list)


def decode_step_timing(model, games: int, seq_len: int, *, repeats: int, warmup: int) -> DecodeStep:
    """Model time of one generation step at batch ``games`` and length ``seq_len``, engine
    excluded: the jitted KV-cache decode step (cache of ``seq_len`` slots, donated, written at the
    middle position; its cost does not depend on the position) against the jitted full-recompute
    forward over the [games, seq_len] buffer that ``use_kv_cache=False`` runs at every step.
    Each is :func:`~pawn.bench.timing.time_call` per single step (dispatch + compute + sync)."""
    import jax.numpy as jnp

    from pawn.evaluate.generation import _decode, _full_at, _prefill_at
    from pawn.vocab import PLY_LIMIT

    seq = np.full((games, seq_len), 100, np.int32)  # any real move tokens
    seq[:, 0] = PLY_LIMIT
    pos = seq_len // 2
    attn = np.arange(seq_len)[None, :].repeat(games, 0) <= pos - 1
    _, cache = _prefill_at(model, jnp.asarray(seq), jnp.asarray(attn), jnp.int32(pos - 1), None)
    state: dict[str, Any] = {"cache": cache}
    tok, p = jnp.asarray(seq[:, pos]), jnp.int32(pos)

    def kv():
        logits, state["cache"] = _decode(model, state["cache"], tok, p)  # rewrites slot pos each call
        return logits

    dev = jnp.asarray(seq)
    kv_m = Measurement.of(time_call(kv, repeats=max(10, repeats), warmup=max(1, warmup)))
    re_m = Measurement.of(time_call(lambda: _full_at(model, dev, p, None), repeats=max(1, min(repeats, 2)), warmup=max(1, warmup)))
    return DecodeStep(kv_m, re_m, re_m.median_s / kv_m.median_s)


def bench_decode(s: BenchSettings) -> DecodeResult:
    """Decoding speed on two workloads, ``decode_games × decode_len`` and ``decode_long_games ×
    decode_long_len`` (default 64 games × 257 positions: 256 plies after the outcome token).

    Per workload: ``step`` = :func:`decode_step_timing` (KV-cache decode step against the full
    recompute forward, model time only), and ``forms`` = end-to-end generation tokens/s of
    :func:`pawn.evaluate.generation.autoregressive_generate` from the outcome token PLY_LIMIT,
    legal moves only (so random weights still play full games), the engine's legal masks and
    moves per step included; tokens = moves generated. The first workload runs both forms
    (``kv_speedup`` = KV tokens/s ÷ recompute tokens/s); the long one runs the KV cache only
    (recomputing 64 × 257 positions per ply is minutes per game batch on a CPU; its per-step
    ratio is ``step.step_speedup``). The model is the step section's stored model, random init.
    """
    import jax

    from pawn.evaluate.generation import autoregressive_generate
    from pawn.model import PAWNModel
    from pawn.vocab import PLY_LIMIT

    cfg, _, label = s.model()
    model = PAWNModel(cfg, jax.random.key(0))
    out = DecodeResult(label, cfg.name)
    loads = [(s.decode_games, s.decode_len, ("kv_cache", "recompute")), (s.decode_long_games, s.decode_long_len, ("kv_cache",))]
    for games, seq_len, forms in loads:
        w = DecodeWorkload(games, seq_len, decode_step_timing(model, games, seq_len, repeats=s.repeats, warmup=s.warmup))
        for name in forms:
            res = {}

            def run(kv=name == "kv_cache"):
                res["r"] = autoregressive_generate(model, games, outcome_token=PLY_LIMIT, max_seq_len=seq_len,
                                                   mask_illegal=True, batch_size=games, seed=0, use_kv_cache=kv)
                return res["r"].sequences

            st = time_call(run, repeats=max(1, min(s.repeats, 2)), warmup=s.warmup)
            toks = int(res["r"].game_lengths.astype(np.int64).sum())
            w.forms[name] = Measurement.of(st, tokens=toks).per(toks, "tokens_per_s")
        if "recompute" in w.forms:
            w.kv_speedup = w.forms["kv_cache"].rates["tokens_per_s"] / w.forms["recompute"].rates["tokens_per_s"]
        out.workloads.append(w)
    return out


def view(d) -> TableView:
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""
    v = TableView(f"decode: {d.model} ({d.config}), legal sampling; step = one jitted model step, engine excluded",
                  ["workload", "form", "time_ms", "tokens", "tokens_per_s", "tokens_per_s_range", "first_call_s"])
    for w in d.workloads:
        wl = f"{w.games} games × {w.seq_len}"
        for name, f in (("step, KV cache", w.step.kv_cache), ("step, recompute", w.step.recompute)):
            v.rows.append({"workload": wl, "form": name, "time_ms": f, "first_call_s": f.first_call_s})
        v.rows.append({"workload": wl, "form": "step speed-up", "time_ms": f"{w.step.step_speedup:.2f}×"})
        for k, f in w.forms.items():
            v.rows.append({"workload": wl, "form": "generate, KV cache" if k == "kv_cache" else "generate, recompute", "time_ms": f,
                           "tokens": str(f.work["tokens"]), "tokens_per_s": f.rates["tokens_per_s"],
                           "tokens_per_s_range": _range(f, "tokens_per_s"), "first_call_s": f.first_call_s})
        if w.kv_speedup is not None:
            v.rows.append({"workload": wl, "form": "generate speed-up", "time_ms": f"{w.kv_speedup:.2f}×"})
    return v


SECTION = register(Section("decode", 80, lambda s, ctx: bench_decode(s), view, (5.0, 60.0),
                           lambda s: flops_per_token(s.model()[0], s.decode_len) / 3 * s.decode_games * s.decode_len * s.decode_len))
"""The ``decode`` row of the section table (:mod:`pawn.bench.section`)."""
