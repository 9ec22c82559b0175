"""``pawn bench`` section ``memory``: the compiled memory of the K-step train chunk per remat mode
(spec ``eval-probe-generate-sweep-bench.md`` §7), from shapes alone."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from pawn.errors import UsageError
from pawn.bench.settings import BenchSettings, pretrain_optimizer
from pawn.bench.section import Section, register
from pawn.bench.report import _YES, BenchColumn, TableView, size_text


@dataclass
class MemoryRow:
    """One remat mode: XLA's per-device estimate (``*_bytes`` and ``*_gib`` figures of
    :meth:`pawn.train.memory.MemoryEstimate.to_dict`), compile seconds, the attention kernel
    (``cudnn``/``xla``) and whether the peak fits this device and each named device."""

    remat: str
    estimate: dict[str, float]
    compile_s: float
    attention: str
    fits_this_device: Optional[bool]
    fits: dict[str, bool]

    def to_dict(self) -> dict[str, Any]:
        return {"remat": self.remat, **self.estimate, "compile_s": self.compile_s, "attention": self.attention,
                "fits_this_device": self.fits_this_device, "fits": dict(self.fits)}


@dataclass
class MemoryResult:
    """The ``memory`` section: the step's shape, the devices compared against and one
    :class:`MemoryRow` per remat mode. ``this_device`` = ``{"bytes", "source"}`` (bytes None when
    unknown); ``named_devices`` = ``[{"name", "bytes"}]``."""

    model: str
    batch_size: int
    seq_len: int
    steps_per_chunk: int
    compute_dtype: str
    accumulation_steps: int
    backend: str
    devices: int
    headroom: float
    this_device: dict[str, Any]
    named_devices: list[dict[str, Any]]
    rows: list[MemoryRow] = field(default_factory=list)
    source: str = ""


def bench_memory(s: BenchSettings) -> MemoryResult:
    """Compiled memory of the K-step train chunk, without running it: for each remat mode of
    :meth:`BenchSettings.remat_candidates` (``auto`` = all), the chunk is compiled from shapes
    alone (nothing allocated) and XLA's ``memory_analysis()`` reported per device: argument,
    output, alias (donated) and temp bytes, and the peak (arguments + unaliased outputs + temps),
    with whether that fits this device and each of :data:`pawn.train.memory.NAMED_DEVICES`
    after :data:`~pawn.train.memory.HEADROOM`. On CPU the figure is a proxy for a GPU (no cuDNN
    fused attention there). A mode XLA refuses to compile for lack of device memory (a TPU
    does so at compile time) is a row that does not fit here, with the size XLA named
    (:meth:`pawn.train.memory.MemoryEstimate.from_refusal`), not an error.

    Raises:
        ValueError: the batch does not split over devices × micro-batches.
    """
    import jax
    import jax.numpy as jnp

    from pawn.model import ATTENTION_IMPL, resolve_dtype
    from pawn.train.loop import TrainProgram, make_mesh
    from pawn.train.memory import HEADROOM, NAMED_DEVICES, compile_chunk, device_memory, fits

    cfg, variants, label = s.model()
    n_dev = jax.device_count()
    if s.batch_size % (n_dev * s.accumulation_steps):
        raise UsageError(f"batch_size {s.batch_size} does not split over {n_dev} devices × {s.accumulation_steps} micro-batches")
    opt, schedule = pretrain_optimizer()
    cap, where = device_memory()
    dt_name = jnp.dtype(resolve_dtype(s.compute_dtype())).name
    backend = jax.default_backend()
    out = MemoryResult(label, s.batch_size, s.seq_len, s.steps_per_chunk, dt_name, s.accumulation_steps, backend, n_dev,
                       HEADROOM, {"bytes": cap, "source": where}, [{"name": n, "bytes": b} for n, b in NAMED_DEVICES],
                       source="XLA memory_analysis() of the compiled K-step chunk, per device"
                              + ("; CPU: a proxy for a GPU, which can use cuDNN fused attention" if backend == "cpu" else ""))
    for mode in s.remat_candidates():
        program = TrainProgram(opt, schedule=schedule, variants=variants, dtype=s.compute_dtype(), remat=mode, mesh=make_mesh(),
                               accumulation_steps=s.accumulation_steps)
        ATTENTION_IMPL.clear()
        t0 = time.perf_counter()
        _, est = compile_chunk(program, cfg, s.steps_per_chunk, s.batch_size, s.seq_len)
        known = est.peak_bytes > 0  # a compile refusal may not say how much it needed
        out.rows.append(MemoryRow(mode, est.to_dict(), time.perf_counter() - t0, ATTENTION_IMPL.get(dt_name, "?"),
                                  False if est.refused else None if cap is None else fits(est.peak_bytes, cap),
                                  {name: fits(est.peak_bytes, size) if known else None for name, size in NAMED_DEVICES}))
    return out


# memory: three compilations of 10–25 s (toy to large supernet).
def view(m) -> TableView:
    """The printed table of the section (:class:`pawn.bench.report.TableView`)."""
    # every size in binary units (a device sold as "80 GB" is 74.5 GiB); the note names the devices
    dev_cols = [BenchColumn(f"fits {size_text(d['bytes'])}", _YES.__getitem__) for d in m.named_devices]
    cap = m.this_device["bytes"]
    here = BenchColumn(f"fits here ({size_text(cap)})" if cap else "fits here", lambda x: x if isinstance(x, str) else _YES[x])
    v = TableView(f"compiled train-step memory: {m.model}, batch {m.batch_size} × seq {m.seq_len} ({m.compute_dtype}), "
                  f"K = {m.steps_per_chunk}, accumulation {m.accumulation_steps}, per device ({m.backend})",
                  ["remat", "attention", "temp_bytes", "argument_bytes", "output_bytes", "alias_bytes", "peak_bytes", "chunk_compile_s",
                   *dev_cols, here],
                  notes=[f"{m.source}; fits = peak ≤ {100 * (1 - m.headroom):.0f}% of the device; this device: {m.this_device['source']}",
                         "devices: " + ", ".join(f"{size_text(d['bytes'])} = {d['name']}" for d in m.named_devices)])
    for r in m.rows:
        v.rows.append({"remat": r.remat, "attention": r.attention, **r.estimate, "chunk_compile_s": r.compile_s,
                       **{c.label: r.fits[d["name"]] for c, d in zip(dev_cols, m.named_devices)},
                       here.label: r.estimate.get("verdict") or r.fits_this_device})
    return v


SECTION = register(Section("memory", 10, lambda s, ctx: bench_memory(s), view, (30.0, 60.0),
                           lambda s: float(len(s.remat_candidates()))))
"""The ``memory`` row of the section table (:mod:`pawn.bench.section`)."""
