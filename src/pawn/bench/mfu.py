"""``pawn bench`` section ``mfu``: model FLOPs per token and model FLOP utilisation of the K-step
chunk against the device's peak (spec ``eval-probe-generate-sweep-bench.md`` §7.3)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from pawn.bench.records import Measurement
from pawn.bench.settings import BenchSettings
from pawn.bench.section import Section, register, train_step_work
from pawn.bench.report import _n, TableView
from pawn.bench.step import StepResult, StepSetup, chunk_timing, make_setup
from pawn.bench.timing import time_call
from pawn.config import flops_per_token
from pawn.train.walltime import (  # noqa: F401  (re-exported: pawn.bench names them)
    GPU_PEAKS, PEAK_SOURCE, TPU_PEAK_SOURCE, TPU_PEAKS, lookup_gpu_peak, lookup_tpu_peak, published_peak)

FLOPS_FORMULA = "FLOPs/token = 6·N + 12·L·T·d (N = all parameters, L layers, T sequence length, d width); supernet = sum over variants"
"""The model-FLOP convention of spec §7.3, as printed in the output."""

def step_flops_per_token(variants: Sequence, seq_len: int) -> int:
    """Supernet joint step: the sum of :func:`~pawn.config.flops_per_token` over the variants
    trained (each runs its own forward and backward). ``variants`` are configs or
    ``(config, weight)`` pairs."""
    return sum(flops_per_token(v[0] if isinstance(v, tuple) else v, seq_len) for v in variants)


def measure_matmul_peak(n: int, dtype: str, repeats: int) -> Measurement:
    """Measured matmul throughput on the default device: a jitted ``[n, n] @ [n, n]`` in
    ``dtype`` (2·n³ FLOPs per call), median over ``repeats`` (at least 3) runs; ``work["n"]`` is
    the matrix size."""
    import jax

    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    f = jax.jit(lambda x, y: x @ y)
    st = time_call(lambda: f(a, b), repeats=max(3, repeats), warmup=2)
    return Measurement.of(st, n=n, dtype=dtype).per(2.0 * n ** 3, "flops_per_s")


@dataclass
class Peak:
    """The peak MFU divides by: all devices, one device, the device count and where the figure
    comes from (the measured matmul when there is no published figure)."""

    flops_per_s: float
    per_device_flops_per_s: float
    devices: int
    source: str
    matmul: Optional[Measurement] = None

    def to_dict(self) -> dict[str, Any]:
        d = {"flops_per_s": self.flops_per_s, "per_device_flops_per_s": self.per_device_flops_per_s,
             "devices": self.devices, "source": self.source}
        if self.matmul is not None:
            d["matmul"] = self.matmul.to_dict()
        return d


@dataclass
class VariantFlops:
    """FLOPs per token of one trained variant (attention part apart)."""

    name: str
    param_count: int
    flops_per_token: int
    attention_flops_per_token: int


@dataclass
class MfuResult:
    """The ``mfu`` section: FLOPs/token per variant and in all, the chunk's tokens/s, achieved
    FLOP/s, the :class:`Peak` and ``mfu`` = achieved / peak."""

    formula: str
    seq_len: int
    variants: list[VariantFlops]
    flops_per_token: int
    tokens_per_s: float
    tokens_per_s_measured_in_mfu: bool
    achieved_flops_per_s: float
    compute_dtype: str
    peak: Optional[Peak] = None
    mfu: Optional[float] = None


def peak_flops(dt_name: str, s: BenchSettings) -> Peak:
    """On GPUs the published dense figure for the compute dtype (:data:`GPU_PEAKS`), on TPUs the
    published bf16 figure (:data:`TPU_PEAKS`); on a CPU, a device not in the tables or fp32 on a
    TPU, a matmul peak measured in this run; times the device count."""
    import jax

    backend = jax.default_backend()
    kind = jax.devices()[0].device_kind
    n_dev = jax.device_count()
    pub = published_peak(backend, kind, dt_name)
    if pub is not None:
        return Peak(pub[0] * n_dev, pub[0], n_dev, pub[1])
    mm = measure_matmul_peak(s.matmul_n, dt_name, s.repeats)
    why = "CPU" if backend == "cpu" else f"no published {dt_name} peak for {kind}"
    one = mm.rates["flops_per_s"]
    return Peak(one * n_dev, one, n_dev, f"measured in this run ({why}): jitted {s.matmul_n}×{s.matmul_n} {dt_name} matmul, median", mm)


def bench_mfu(s: BenchSettings, step: Optional[StepResult] = None, setup: Optional[StepSetup] = None) -> MfuResult:
    """Model FLOPs per token (:data:`FLOPS_FORMULA`) and MFU of the K-step scan chunk:
    ``flops_per_token · tokens_per_s / peak`` (:func:`peak_flops`). The chunk's tokens/s comes
    from the step section when it ran, else it is timed here."""
    import jax.numpy as jnp

    from pawn.config import param_count
    from pawn.model import resolve_dtype

    setup = setup or make_setup(s)
    if step is None or "scan_chunk" not in step.forms:
        tps = s.batch_size * s.seq_len * s.steps_per_chunk / chunk_timing(setup, s, s.repeats).median_s
        measured_here = True
    else:
        tps, measured_here = step.forms["scan_chunk"].rates["tokens_per_s"], False
    dt_name = jnp.dtype(resolve_dtype(s.compute_dtype())).name
    per_variant = [VariantFlops(c.name, param_count(c), flops_per_token(c, s.seq_len), 12 * c.n_layers * s.seq_len * c.d_model)
                   for c, _ in setup.variants]
    fpt = step_flops_per_token(setup.variants, s.seq_len)
    out = MfuResult(FLOPS_FORMULA, s.seq_len, per_variant, fpt, tps, measured_here, fpt * tps, dt_name)
    out.peak = peak_flops(dt_name, s)
    out.mfu = out.achieved_flops_per_s / out.peak.flops_per_s
    return out


def view(m) -> TableView:
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""
    rows = [(f"FLOPs/token {x.name} ({x.param_count:,} params)", f"{x.flops_per_token:,} (attention {x.attention_flops_per_token:,})")
            for x in m.variants]
    rows += [("FLOPs/token, step total", f"{m.flops_per_token:,}"), ("tokens/s (scan chunk)", _n(m.tokens_per_s)),
             ("achieved", f"{m.achieved_flops_per_s / 1e9:,.2f} GFLOP/s"), ("peak", f"{m.peak.flops_per_s / 1e9:,.2f} GFLOP/s"),
             ("MFU", f"{100 * m.mfu:.2f}%")]
    return TableView("MFU", ["quantity", "value"], [{"quantity": q, "value": x} for q, x in rows],
                     notes=[m.formula, f"peak: {m.peak.source}"])


SECTION = register(Section("mfu", 40, lambda s, ctx: bench_mfu(s, ctx.results.get("step"), ctx.setup), view, (2.0, 3.0),
                           lambda s: train_step_work(s) * s.repeats, shared_setup=True))
"""The ``mfu`` row of the section table (:mod:`pawn.bench.section`)."""
