"""What a pretraining run is going to do, said before it starts: the model and its variants,
parameter counts, FLOPs per token, batch × sequence, devices and total tokens. Printed as a few
lines and written into ``metrics.jsonl``'s ``config`` record (``summary``)."""

from __future__ import annotations

from typing import Optional, Sequence

from pawn.config import ModelConfig, flops_per_token, param_count
from pawn.progress import counted


def run_summary(
    stored: ModelConfig,
    variants: Sequence[tuple[str, ModelConfig]],
    *,
    label: str,
    batch_size: int,
    seq_len: int,
    start_step: int,
    end_step: int,
    total_steps: int,
    steps_per_chunk: int,
    devices: int,
    processes: int,
    backend: str,
    dtype: str,
    compiled_memory: Optional[dict] = None,
) -> dict:
    """The start-of-run summary as a JSON-ready dict.

    FLOPs per token follow ``pawn bench``'s convention (:func:`pawn.config.flops_per_token`,
    spec eval §7.3: ``6·N + 12·L·T·d``, summed over the variants a supernet step trains).
    ``tokens`` are padded sequence positions, ``batch_size · seq_len`` per step.
    ``compiled_memory`` is the memory check's result for the compiled K-step chunk
    (:func:`pawn.train.memory.check_step_memory`): ``{"peak_bytes", "temp_bytes", "fixed_bytes"``
    (per device, bytes, XLA memory analysis), ``"remat", "accumulation_steps", "capacity_bytes"``
    (None when unknown), ``"capacity_source"}``; stored as given.

    Returns:
        ``{"model", "stored_params", "variants": {name: {"config", "params", "flops_per_token"}},
        "flops_per_token", "batch_size", "seq_len", "tokens_per_step", "steps_this_run",
        "tokens_this_run", "flops_this_run", "total_steps", "steps_per_chunk", "devices",
        "processes", "backend", "dtype", "compiled_memory"}`` (``compiled_memory`` only when given).
    """
    per = {name: {"config": c.name, "params": param_count(c), "flops_per_token": flops_per_token(c, seq_len)} for name, c in variants}
    fpt = sum(v["flops_per_token"] for v in per.values())
    steps = max(0, end_step - start_step)
    tokens = steps * batch_size * seq_len
    return {
        "model": label, "stored_params": param_count(stored), "variants": per, "flops_per_token": fpt,
        "batch_size": batch_size, "seq_len": seq_len, "tokens_per_step": batch_size * seq_len,
        "start_step": start_step, "end_step": end_step, "steps_this_run": steps, "tokens_this_run": tokens,
        "flops_this_run": fpt * tokens, "total_steps": total_steps, "steps_per_chunk": steps_per_chunk,
        "devices": devices, "processes": processes, "backend": backend, "dtype": dtype,
        **({"compiled_memory": dict(compiled_memory)} if compiled_memory is not None else {}),
    }


def _si(x: float, unit: str = "") -> str:
    for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def memory_line(m: dict) -> str:
    """``compiled step: 1.23 GiB per device (remat none, accumulation 1); available host RAM: 20.1 GiB``
    for a ``compiled_memory`` dict (see :func:`run_summary`)."""
    gib = 2 ** 30
    cap = m.get("capacity_bytes")
    where = m.get("capacity_source", "device memory")
    return (f"compiled step: {m['peak_bytes'] / gib:.2f} GiB per device (remat {m.get('remat')}, "
            f"accumulation {m.get('accumulation_steps')}); " + (f"{where}: {cap / gib:.1f} GiB" if cap else f"{where}: not checked"))


def summary_lines(s: dict, memory: Optional[str] = None) -> list[str]:
    """Three or four human lines for :func:`run_summary`'s dict: the compiled-memory line when
    the summary has ``compiled_memory`` (or ``memory``, a line from the caller, is given)."""
    parts = ", ".join(f"{n} {v['config']} {_si(v['params'])} params" for n, v in s["variants"].items())
    lines = [
        f"model: {s['model']} ({_si(s['stored_params'])} stored params): {parts}",
        f"batch {s['batch_size']} × {s['seq_len']} = {s['tokens_per_step']:,} tokens/step; steps {s['start_step']:,} → {s['end_step']:,} "
        f"of {s['total_steps']:,} = {_si(s['tokens_this_run'])} tokens; {_si(s['flops_per_token'])} FLOPs/token "
        f"= {_si(s['flops_this_run'])} FLOPs in all",
        f"devices: {s['devices']} × {s['backend']} ({s['processes']} process{'es' if s['processes'] != 1 else ''}), "
        f"compute dtype {s['dtype']}, {counted(s['steps_per_chunk'], 'step')} per compiled chunk",
    ]
    if memory is None and s.get("compiled_memory"):
        memory = memory_line(s["compiled_memory"])
    if memory:
        lines.append(memory)
    return lines
