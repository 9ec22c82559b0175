"""Will the training step fit? XLA's own buffer assignment for the compiled K-step chunk.

Every command that compiles a train step (``pawn pretrain``, ``pawn bench``) compiles it first
from shapes alone (``jax.eval_shape`` state, :meth:`~pawn.train.loop.TrainProgram.abstract_chunk`
chunk: nothing allocated), reads ``Compiled.memory_analysis()`` and compares the per-device peak
with what the device has — accelerator memory (``memory_stats()["bytes_limit"]``), or available
RAM (``MemAvailable``) on CPU. A step that will not fit is refused in one line naming the size
needed, the size available and the flags that would fit. The executable compiled for the check
is the one the run then uses (no second compilation).

On CPU the figure is a proxy for an accelerator: XLA:CPU has no fused (flash) attention kernel,
so an NVIDIA GPU with cuDNN needs less than the CPU analysis of the same bf16 step says.
"""

from __future__ import annotations

from pawn.errors import PawnError

import math
import os
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

GIB = 2 ** 30

NAMED_DEVICES: tuple[tuple[str, float], ...] = (("16 GiB (TPU v5e)", 16 * 2 ** 30), ("80 GB (A100/H100 80GB)", 80e9),
                                                ("141 GB (H200)", 141e9))
"""Device sizes ``pawn bench --only memory`` checks the step against, in bytes (GPUs as sold, 10⁹;
the TPU v5e's HBM as Google Cloud's TPU v5e page gives it, 16 GiB per chip)."""

HEADROOM = 0.10
"""Fraction of a device kept free when deciding "fits" (allocator fragmentation, the runtime's
own buffers, the prefetched next chunk)."""


class InsufficientMemoryError(PawnError, RuntimeError):
    """The compiled step needs more memory than the device has; the message is one line with the
    size needed, the size available and the flags that would fit."""


@dataclass(frozen=True)
class MemoryEstimate:
    """XLA's buffer assignment of one compiled program, per device, in bytes.

    Attributes:
        argument_bytes: inputs (state + chunk). output_bytes: outputs (new state + metrics).
        alias_bytes: outputs written into donated inputs (counted once).
        temp_bytes: everything else live at some point (activations kept for the backward,
            gradients, optimizer temporaries): XLA's ``temp_size_in_bytes``.
        code_bytes: generated code.
        refused: empty for a program that compiled; otherwise XLA's own refusal to compile it
            (a TPU refuses at compile time a program that does not fit its HBM, where CPUs and
            GPUs compile it and report its size), shortened to one line. Then ``temp_bytes`` is
            the size XLA said the program needs (0 when the message gives none) and
            ``available_bytes`` the size it said the device has.
        available_bytes: the device memory XLA's refusal names (None when it compiled).
    """

    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    temp_bytes: int
    code_bytes: int
    refused: str = ""
    available_bytes: Optional[int] = None

    @classmethod
    def from_refusal(cls, message: str) -> "MemoryEstimate":
        """The estimate of a program XLA refused to compile for lack of device memory, from its
        ``RESOURCE_EXHAUSTED`` message (:func:`parse_compile_oom`)."""
        needed, available = parse_compile_oom(message)
        first = next((ln.strip() for ln in message.splitlines() if ln.strip()), message.strip())
        return cls(0, 0, 0, needed or 0, 0, refused=first[:300], available_bytes=available)

    @classmethod
    def from_compiled(cls, compiled: Any) -> "MemoryEstimate":
        """Read ``compiled.memory_analysis()`` (a ``jax.stages.Compiled``).

        Raises:
            RuntimeError: the backend gives no memory analysis.
        """
        ma = compiled.memory_analysis()
        if ma is None:
            raise RuntimeError("this JAX backend reports no memory analysis for compiled programs")
        return cls(int(ma.argument_size_in_bytes), int(ma.output_size_in_bytes), int(ma.alias_size_in_bytes),
                   int(ma.temp_size_in_bytes), int(ma.generated_code_size_in_bytes))

    @property
    def fixed_bytes(self) -> int:
        """Arguments plus outputs not aliased onto donated arguments."""
        return self.argument_bytes + self.output_bytes - self.alias_bytes

    @property
    def peak_bytes(self) -> int:
        """Per-device bytes the program needs: :attr:`fixed_bytes` + :attr:`temp_bytes`."""
        return self.fixed_bytes + self.temp_bytes

    def to_dict(self) -> dict[str, Any]:
        """Plain dict with every field, the peak and GiB figures (and, for a refused program,
        ``refused``, ``verdict`` and ``available_bytes``/``available_gib``)."""
        d = {k: getattr(self, k) for k in ("argument_bytes", "output_bytes", "alias_bytes", "temp_bytes", "code_bytes")}
        d["peak_bytes"] = self.peak_bytes
        if self.refused:
            d["available_bytes"] = self.available_bytes
        d.update({k.replace("_bytes", "_gib"): (v / GIB if v is not None else None) for k, v in list(d.items())})
        if self.refused:
            d["refused"], d["verdict"] = self.refused, self.verdict()
        return d

    def verdict(self) -> str:
        """A short "does not fit: XLA needs 95.0 GiB of 15.7" for a refused program, else ""."""
        if not self.refused:
            return ""
        need = f"{self.temp_bytes / GIB:.1f} GiB" if self.temp_bytes else "more than the device has"
        of = f" of {self.available_bytes / GIB:.1f}" if self.available_bytes else ""
        return f"does not fit: XLA needs {need}{of}"


_SIZE = r"([0-9]+(?:\.[0-9]+)?)\s*([KMGTP]i?B?|B)?"
_OOM_PATTERNS = (
    # XLA:TPU "Ran out of memory in memory space hbm. Used 21.95G of 15.48G hbm."
    re.compile(r"Used\s+" + _SIZE + r"\s+of\s+" + _SIZE + r"\s+hbm", re.I),
    # newer XLA: "... HLO temporaries (95.03G) exceeds available HBM (15.75G)"
    re.compile(r"\(" + _SIZE + r"\)\s+exceeds\s+available\s+\w+\s+\(" + _SIZE + r"\)", re.I),
)


def _bytes(num: str, unit: Optional[str]) -> int:
    """XLA's human-readable sizes are binary (``21.95G`` = 21.95 · 2³⁰ bytes)."""
    power = {"B": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}[(unit or "B")[0].upper()]
    return int(float(num) * 1024 ** power)


def is_compile_oom(err: BaseException) -> bool:
    """Whether ``err`` is XLA refusing to compile a program for lack of device memory
    (a ``RESOURCE_EXHAUSTED`` status raised by ``Lowered.compile()``, as XLA:TPU does)."""
    return "RESOURCE_EXHAUSTED" in str(err)


def parse_compile_oom(message: str) -> tuple[Optional[int], Optional[int]]:
    """``(bytes needed, bytes available)`` from an XLA ``RESOURCE_EXHAUSTED`` compile error
    message; either is None where the message does not say. Reads XLA:TPU's "Used 21.95G of
    15.48G hbm" and the newer "HLO temporaries (95.03G) exceeds available HBM (15.75G)"."""
    for pat in _OOM_PATTERNS:
        m = pat.search(message)
        if m:
            return _bytes(m.group(1), m.group(2)), _bytes(m.group(3), m.group(4))
    return None, None


_LIBC_TRIM: Any = None  # glibc's malloc_trim once looked up; False where there is none


def release_free_heap() -> bool:
    """Give the C heap's free pages back to the operating system (glibc ``malloc_trim(0)``).

    XLA's compiler and runtime threads free far more than they keep; glibc gives back only the free
    memory at the top of each arena by itself, not free pages inside the heap, so the resident set
    between chunks holds hundreds of MiB of free heap on top of which each chunk's temp buffer is
    allocated. Called before every compiled chunk (:func:`pawn.train.run.training_steps`, population
    sweeps): the README's tiny supernet run (300 steps) peaked at 1.18–1.30 GiB resident without it
    and 0.97 GiB with it, at the same tokens/s; a K = 4 LoRA adapter chunk measured 196.7 → 199.8 ms
    a step, within noise (``docs/measurements.md``, Memory). The call itself takes 1.4 ms the first
    time and microseconds after.

    Returns:
        True where glibc's ``malloc_trim`` was called (Linux with glibc), False elsewhere (macOS,
        musl, Windows), where nothing is done. Never raises.
    """
    global _LIBC_TRIM
    if _LIBC_TRIM is None:
        _LIBC_TRIM = False
        try:
            import ctypes

            trim = ctypes.CDLL("libc.so.6").malloc_trim
            trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
            _LIBC_TRIM = trim
        except (OSError, AttributeError):
            pass
    if _LIBC_TRIM is False:
        return False
    _LIBC_TRIM(0)
    return True


def usable(capacity_bytes: float, headroom: float = HEADROOM) -> float:
    """Bytes a step may use on a device of ``capacity_bytes``: ``(1 − headroom) · capacity``."""
    return (1.0 - headroom) * capacity_bytes


def fits(needed_bytes: float, capacity_bytes: float, headroom: float = HEADROOM) -> bool:
    """Whether ``needed_bytes`` ≤ :func:`usable` of ``capacity_bytes``."""
    return needed_bytes <= usable(capacity_bytes, headroom)


def _mem_available() -> Optional[int]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def device_memory() -> tuple[Optional[int], str]:
    """``(bytes, description)`` of memory one device of the default backend can use: the
    allocator limit of an accelerator (``memory_stats()["bytes_limit"]``, which reflects
    ``XLA_PYTHON_CLIENT_MEM_FRACTION``), or on CPU the host's available RAM (``MemAvailable``)
    shared by the CPU devices. ``(None, why)`` when neither is known."""
    import jax

    dev = jax.local_devices()[0]
    if jax.default_backend() == "cpu":
        avail = _mem_available()
        if avail is None:
            return None, "host RAM (unknown)"
        return avail // max(1, jax.local_device_count()), "available host RAM" + (
            f" / {jax.local_device_count()} CPU devices" if jax.local_device_count() > 1 else "")
    try:
        stats = dev.memory_stats() or {}
    except Exception:  # some plugins do not implement memory_stats
        stats = {}
    limit = stats.get("bytes_limit")
    if limit is None:
        return None, f"{dev.device_kind} memory (unknown)"
    return int(limit), f"{dev.device_kind} memory"


def abstract_state(program, stored_config):
    """The shapes and dtypes of a fresh :class:`~pawn.train.loop.TrainState` for ``program``'s
    optimizer and ``stored_config`` (``jax.eval_shape``: nothing is allocated)."""
    import jax

    from pawn.model import PAWNModel
    from pawn.train.loop import init_state

    return jax.eval_shape(lambda: init_state(PAWNModel(stored_config, jax.random.key(0)), program.optimizer))


def compile_chunk(program, stored_config, k: int, batch_size: int, seq_len: int) -> tuple[Any, MemoryEstimate]:
    """Compile ``program``'s K-step chunk for a [K, B, T] chunk from shapes alone and read its
    memory. Returns ``(compiled, MemoryEstimate)``; ``program`` keeps the executable. Where XLA
    refuses to compile the chunk for lack of device memory (TPUs do, at compile time), returns
    ``(None, MemoryEstimate.from_refusal(...))`` instead of raising: a row that does not fit.

    Raises:
        Exception: any other compile error, as XLA raised it.
    """
    try:
        compiled = program.compile(abstract_state(program, stored_config), program.abstract_chunk(k, batch_size, seq_len))
    except Exception as e:  # noqa: BLE001 - only XLA's out-of-memory status is a result; the rest re-raise
        if not is_compile_oom(e):
            raise
        return None, MemoryEstimate.from_refusal(str(e))
    return compiled, MemoryEstimate.from_compiled(compiled)


def accumulation_choices(batch_size: int, n_devices: int) -> list[int]:
    """Valid ``--accumulation-steps`` values above 1: A such that every device's share of the
    batch splits into A equal micro-batches (``batch_size % (A · n_devices) == 0``)."""
    per_dev = batch_size // n_devices if batch_size % n_devices == 0 else 0
    return [a for a in range(2, per_dev + 1) if per_dev % a == 0]


def round_batch(b: int, multiple: int = 1) -> int:
    """The batch size to suggest at most ``b``: rounded down to a multiple of ``multiple`` (the
    devices × micro-batches it must split into) times the largest power of two ≤
    b / (4 · multiple), so 177 becomes 160 and 210 becomes 192 on one device, sizes a user
    would pick, at most a quarter below ``b``; 0 when no multiple of ``multiple`` is ≤ b."""

    step = 1
    while step * 2 <= b / (4 * multiple):
        step *= 2
    step = step * multiple // math.gcd(step, multiple)
    return b - b % step if b >= step else 0


def suggest_flags(est: MemoryEstimate, capacity: float, *, batch_size: int, n_devices: int, remat: str,
                  accumulation_steps: int, headroom: float = HEADROOM) -> list[str]:
    """Flags that should make a step of estimate ``est`` fit ``capacity`` bytes.

    Activation memory (``temp_bytes``) scales with the games per micro-batch, state and chunk
    (``fixed_bytes``) do not, so the accumulation and batch-size figures are estimates from
    ``est`` scaled by the micro-batch size; ``--remat full`` is suggested whenever it is not on.
    """
    room = usable(capacity, headroom) - est.fixed_bytes
    out: list[str] = []
    if remat != "full":
        out.append("--remat full")
    micro = batch_size // accumulation_steps
    if room > 0:
        for a in accumulation_choices(batch_size, n_devices):
            if a > accumulation_steps and est.temp_bytes * accumulation_steps / a <= room:
                out.append(f"--accumulation-steps {a} (≈{(est.fixed_bytes + est.temp_bytes * accumulation_steps / a) / GIB:.1f} GiB)")
                break
        b = round_batch(int(micro * room / max(est.temp_bytes, 1)) * accumulation_steps, n_devices * accumulation_steps)
        if 0 < b < batch_size:
            out.append(f"--batch-size {b} (≈{(est.fixed_bytes + est.temp_bytes * b / batch_size) / GIB:.1f} GiB)")
    return out


def _on_cpu() -> bool:
    """Whether JAX computes on the CPU (no accelerator)."""
    import jax

    return jax.default_backend() == "cpu"


def refusal(est: MemoryEstimate, capacity: Optional[int], where: str, *, batch_size: int, n_devices: int,
            remat: str, accumulation_steps: int, what: str = "the train step") -> str:
    """The one-line message for a step that will not fit (``est`` compiled, or refused by XLA at
    compile time: :attr:`MemoryEstimate.refused`): the figures, the flags of :func:`suggest_flags`,
    then the other ways out: a smaller model, an accelerator (when JAX runs on the CPU) and
    ``--dry-run`` to see the plan without training."""
    capacity = capacity or est.available_bytes
    flags = suggest_flags(est, capacity or 0, batch_size=batch_size, n_devices=n_devices, remat=remat,
                          accumulation_steps=accumulation_steps)
    hint = f"; try {', or '.join(flags)}" if flags else "; no batch size or flag found that fits this model"
    hint += ("; or train a smaller model (--supernet tiny, or --variant small or base)"
             + ("; or run it on an accelerator (GPU or TPU: a CPU takes days to years for a large model)"
                if _on_cpu() else "")
             + "; pawn pretrain --dry-run prints the plan and this check without training")
    if est.refused:
        need = f"{est.temp_bytes / GIB:.1f} GiB per device" if est.temp_bytes else "more memory than the device has"
        return (f"{what} does not fit: XLA refused to compile it (remat {remat}, accumulation {accumulation_steps}), "
                f"it needs {need} and {where} is {(capacity or 0) / GIB:.1f} GiB{hint}")
    return (f"{what} needs {est.peak_bytes / GIB:.1f} GiB per device (XLA memory analysis: "
            f"{est.temp_bytes / GIB:.1f} GiB temporaries + {est.fixed_bytes / GIB:.1f} GiB state and batch, "
            f"remat {remat}, accumulation {accumulation_steps}) but {where} is {(capacity or 0) / GIB:.1f} GiB "
            f"({100 * (1 - HEADROOM):.0f}% usable){hint}")


def layer_activation_elements(cfg, remat: str) -> int:
    """Activation elements the backward keeps per position for ``cfg``'s ``n_layers`` blocks
    under ``remat``, counted from the block's dataflow (spec architecture: pre-norm attention
    with RoPE, blockwise attention saving q, k, v, its output and a log-sum-exp per head; SwiGLU
    FFN of width F):

    - ``none``: every intermediate of every layer: ``L · (9d + 3F + H)`` (the layer input,
      the two norm outputs, q, k, v, the rotated q and k, the attention output, the residual;
      gate, up and their product; the log-sum-exp);
    - ``attention``: q, k, v, the attention output and the layer input per layer
      (``L · (5d + H)``) plus one layer's full set while it is recomputed;
    - ``full``: the layer input per layer (``L · d``) plus one layer's full set.

    An estimate to rank the modes before anything is compiled; XLA's buffer assignment
    (:class:`MemoryEstimate`) decides.

    Raises:
        ValueError: an unknown remat mode.
    """
    d, F, H, L = cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.n_layers
    one = 9 * d + 3 * F + H
    if remat == "none":
        return L * one
    if remat == "attention":
        return L * (5 * d + H) + one
    if remat == "full":
        return L * d + one
    raise ValueError(f"unknown remat mode {remat!r}")


def analytic_step_bytes(variants: Sequence[Any], stored_config: Any, *, batch_size: int, seq_len: int, n_devices: int,
                        accumulation_steps: int, compute_bytes: int, remat: str) -> int:
    """Per-device bytes of one train step, estimated from the shapes alone (no compile):

    ``state`` = 4 bytes × P × 5 (fp32 parameters, gradients, two AdamW moments, the updated
    parameters) for the stored model's P parameters, plus
    ``activations`` = (B / (A · devices)) · T · Σ_variants [layer activations
    (:func:`layer_activation_elements`) · compute bytes + 2 · V · 4 (fp32 logits and their
    gradient)] for the jointly trained ``variants`` (configs).

    Used to rank the remat modes and to choose which to compile first
    (:func:`plan_remat_order`); it overestimates XLA's figure (which reuses buffers between the
    variants' passes): 27.6 GiB against XLA:CPU's 22.1 GiB for the published supernet (remat full, fp32,
    batch 256 × 512 tokens).
    """
    from pawn.config import param_count

    positions = batch_size // max(1, accumulation_steps * n_devices) * seq_len
    per_pos = sum(layer_activation_elements(c, remat) * compute_bytes + 2 * c.vocab_size * 4 for c in variants)
    return 20 * param_count(stored_config) + positions * per_pos


def plan_remat_order(analytic: dict[str, int], capacity: Optional[int], headroom: float = HEADROOM) -> list[str]:
    """The remat modes to compile, in order, from their analytic estimates (cheapest compute
    first in ``analytic``'s order: none, attention, full): the first mode whose estimate fits
    ``capacity`` and the ones after it; when no estimate fits, only the last (most
    memory-saving) mode, so the refusal costs one compile. With an unknown capacity, the
    modes as given."""
    modes = list(analytic)
    if capacity is None:
        return modes
    first = next((i for i, m in enumerate(modes) if fits(analytic[m], capacity, headroom)), len(modes) - 1)
    return modes[first:]


def check_step_memory(program, stored_config, *, k: int, batch_size: int, seq_len: int,
                      remat_candidates: Sequence[str], what: str = "the train step",
                      log: Optional[Callable[[str], None]] = None) -> tuple[str, MemoryEstimate, dict]:
    """Compile ``program``'s chunk for the remat modes in ``remat_candidates`` (cheapest compute
    first) until one fits this device; the program is left set to that mode, holding its
    executable.

    With more than one candidate the modes are ranked first by :func:`analytic_step_bytes`
    (nothing compiled): compiling starts at the cheapest mode whose estimate fits
    (:func:`plan_remat_order`) and stops at the first that fits. Once one mode is compiled, the
    ratio of XLA's figure to its estimate calibrates the others: a cheaper mode skipped above
    is compiled too when its calibrated estimate fits (and used if it does), and modes still to
    try whose calibrated estimate is over the device by more than a quarter are not compiled.
    ``log`` gets the plan before the first compile and one line per compile (its XLA figure and
    time).

    Returns:
        ``(remat mode, MemoryEstimate, {"capacity_bytes", "capacity_source", "tried": {mode: peak},
        "analytic": {mode: bytes}, "compile_s": the longest compile, seconds})``.

    Raises:
        InsufficientMemoryError: no candidate fits (one line, see :func:`refusal`). When the
            device's memory is unknown the first candidate is used without a check.
    """

    import jax

    say = log or (lambda _m: None)
    capacity, where = device_memory()
    n_dev = jax.device_count()
    from pawn.model import resolve_dtype

    import numpy as np

    cbytes = np.dtype(resolve_dtype(program.dtype)).itemsize
    variants = [c for c, _ in program.variants]
    analytic = {m: analytic_step_bytes(variants, stored_config, batch_size=batch_size, seq_len=seq_len, n_devices=n_dev,
                                       accumulation_steps=program.accumulation_steps, compute_bytes=cbytes, remat=m)
                for m in remat_candidates}
    order = plan_remat_order(analytic, capacity)
    cap = f"{capacity / GIB:.1f} GiB {where} ({100 * (1 - HEADROOM):.0f}% usable)" if capacity is not None else where
    say(f"memory check: compiling the train step from shapes (nothing allocated) to read XLA's memory figure against {cap}; "
        f"the run reuses this compile. It takes seconds for small models and can take several minutes for the large "
        f"supernet on a CPU.")
    if len(remat_candidates) > 1:
        est_s = ", ".join(f"{m} ≈{b / GIB:.1f} GiB" for m, b in analytic.items())
        say(f"memory plan: analytic estimate per device (remat {est_s}); compiling {order[0]} first"
            + (f", then {', '.join(order[1:])} until one fits" if len(order) > 1 else ""))
    tried: dict[str, int] = {}
    seconds: dict[str, float] = {}
    ests: dict[str, MemoryEstimate] = {}
    ratio: Optional[float] = None

    def compile_mode(mode: str) -> MemoryEstimate:
        nonlocal ratio
        program.set_remat(mode)
        t0 = time.perf_counter()
        _, est = compile_chunk(program, stored_config, k, batch_size, seq_len)
        tried[mode], ests[mode], seconds[mode] = est.peak_bytes, est, time.perf_counter() - t0
        if est.refused:
            say(f"memory check: remat {mode} {est.verdict()} ({time.perf_counter() - t0:.0f} s)")
        else:
            say(f"memory check: remat {mode} needs {est.peak_bytes / GIB:.1f} GiB per device (compiled in "
                f"{time.perf_counter() - t0:.0f} s): {'fits' if ok(est) else 'does not fit'}")
        if ratio is None and analytic[mode] > 0 and est.peak_bytes > 0:
            ratio = est.peak_bytes / analytic[mode]
        return est

    def ok(est: MemoryEstimate) -> bool:
        return not est.refused and (capacity is None or fits(est.peak_bytes, capacity))

    info = lambda: {"capacity_bytes": capacity, "capacity_source": where, "tried": tried, "analytic": analytic,  # noqa: E731
                    "compile_s": max(seconds.values(), default=0.0)}
    modes = list(remat_candidates)
    for i, mode in enumerate(order):
        if i > 0 and capacity is not None and ratio is not None and analytic[mode] * ratio > 1.25 * usable(capacity) \
                and mode != order[-1]:
            continue  # calibrated estimate far over the device: do not spend a compile on it
        est = compile_mode(mode)
        if ok(est):
            for cheaper in modes[:modes.index(mode)]:  # skipped by the analytic ranking: worth one compile?
                if cheaper not in tried and ratio is not None and fits(analytic[cheaper] * ratio, capacity):
                    c_est = compile_mode(cheaper)
                    if ok(c_est):
                        return cheaper, c_est, info()
                    program.set_remat(mode)  # back to the mode that fits; its executable is cached
                    compile_chunk(program, stored_config, k, batch_size, seq_len)
                    break
            return mode, est, info()
    last = order[-1] if order[-1] in ests else next(reversed(ests))
    raise InsufficientMemoryError(refusal(ests[last], capacity, where, batch_size=batch_size, n_devices=n_dev,
                                          remat=last, accumulation_steps=program.accumulation_steps,
                                          what=what))
