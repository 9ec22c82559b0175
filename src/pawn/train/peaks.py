"""The peak FLOP/s of the devices PAWN trains on, and the model FLOP utilisation PAWN recorded on
them (:mod:`pawn.train.walltime` turns them into a rate; :mod:`pawn.bench` prints them): the GPU
and TPU datasheet tables, their look-ups, and the measured MFU rows."""

from __future__ import annotations

from typing import Optional

PEAK_SOURCE = "vendor datasheet dense (no sparsity) figures, TFLOP/s; fp32 = non-tensor-core FP32"
"""Where :data:`GPU_PEAKS` comes from."""

# (substring of jax's device_kind, bf16 dense TFLOP/s, fp32 TFLOP/s). More specific names first.
GPU_PEAKS: tuple[tuple[str, float, float], ...] = (
    ("GB200", 2500.0, 80.0),
    ("B200", 2250.0, 75.0),
    ("GH200", 989.4, 66.9),
    ("H200 NVL", 835.0, 60.0),
    ("H200", 989.4, 66.9),
    ("H100 PCIe", 756.0, 51.2),
    ("H100 NVL", 835.0, 60.0),
    ("H100", 989.4, 66.9),
    ("A100", 312.0, 19.5),
    ("L40S", 362.05, 91.6),
    ("L40", 181.0, 90.5),
    ("L4", 121.0, 30.3),
    ("A10G", 70.0, 31.2),
    ("A10", 125.0, 31.2),
    ("RTX 6000 Ada", 364.2, 91.1),
    ("RTX A6000", 154.8, 38.7),
    ("RTX 4090", 165.2, 82.6),
    ("RTX 3090", 71.0, 35.6),
)
"""Published dense peaks per GPU (:data:`PEAK_SOURCE`). Consumer cards list bf16 with fp32
accumulation. Note that JAX may run fp32 matmuls on TF32 tensor cores on Ampere and newer, so fp32
MFU against the non-tensor figure can exceed what the name suggests."""

TPU_PEAK_SOURCE = ("Google Cloud TPU pages (cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e): peak bf16 TFLOP/s per "
                   "chip; no fp32 figure is published (fp32 matmuls run as several bf16 passes)")
"""Where :data:`TPU_PEAKS` comes from."""

TPU_PEAKS: tuple[tuple[str, float], ...] = (
    ("TPU v6 lite", 918.0),
    ("TPU v6e", 918.0),
    ("TPU v5 lite", 197.0),
    ("TPU v5e", 197.0),
    ("TPU v5p", 459.0),
    ("TPU v5", 459.0),
    ("TPU v4", 275.0),
)
"""Google Cloud's published bf16 peak per TPU chip, TFLOP/s (v6e, v5e, v5p, v4), by the exact
``device_kind`` JAX reports (``"TPU v5 lite"`` is a v5e chip, ``"TPU v5"`` a v5p, ``"TPU v6 lite"``
a v6e; a ``"TPU v4 lite"`` inference chip is not a v4). No fp32 figure: fp32 there is timed."""

RECORDED_MFU: tuple[tuple[str, str, float, str], ...] = (
    ("cpu", "supernet tiny", 0.60, "2-core AMD EPYC, batch 16 × 128, fp32: 0.36–0.57 measured under a load average of 3–20, "
                                   "≈ 0.8 alone"),
    ("cpu", "supernet large", 0.24, "2-core AMD EPYC, batch 256 × 512, fp32, remat full, accumulation 2"),
    ("TPU v5 lite", "supernet large", 0.408, "one TPU v5e chip, batch 256 × 512, bf16, remat none, accumulation 8 "
                                            "(the --remat auto search's plan; 0.256 with remat full)"),
    ("TPU v5 lite", "supernet tiny", 0.145, "one TPU v5e chip, batch 256 × 256, bf16"),
    ("H200", "supernet large", 0.328, "one H200, batch 256 × 512, bf16, remat attention"),
)
"""Model FLOP utilisation PAWN measured per (device class: ``"cpu"`` or a substring of
``device_kind``, model) and how: on CPU relative to :func:`measure_matmul_rate`'s matmul, elsewhere to
the datasheet peak. A model not listed takes the row of its device class whose model has the nearest
FLOPs per token; a device class not listed, :data:`DEFAULT_MFU`."""

DEFAULT_MFU = 0.3
"""MFU assumed on a device class with no :data:`RECORDED_MFU` row (said as such in the plan)."""


def lookup_gpu_peak(device_kind: str) -> Optional[tuple[str, float, float]]:
    """The :data:`GPU_PEAKS` row whose name occurs in ``device_kind`` (first match), or None."""
    kind = device_kind.upper()
    for row in GPU_PEAKS:
        if row[0].upper() in kind:
            return row
    return None


def lookup_tpu_peak(device_kind: str) -> Optional[tuple[str, float]]:
    """The :data:`TPU_PEAKS` row ``(device_kind, bf16 TFLOP/s)`` for exactly this ``device_kind``
    (case and surrounding blanks aside), or None."""
    kind = device_kind.strip().lower()
    return next((row for row in TPU_PEAKS if row[0].lower() == kind), None)


def published_peak(backend: str, device_kind: str, dtype: str) -> Optional[tuple[float, str]]:
    """``(FLOP/s per device, where the figure comes from)`` published for this device and compute
    dtype, or None where there is none (a CPU, a device in neither table, fp32 on a TPU).

    Args:
        backend: ``jax.default_backend()`` (``"gpu"``, ``"tpu"``, ``"cpu"``).
        device_kind: ``jax.devices()[0].device_kind``.
        dtype: the compute dtype's name, ``"bfloat16"`` or ``"float32"``.
    """
    bf16 = dtype == "bfloat16"
    if backend == "gpu":
        row = lookup_gpu_peak(device_kind)
        if row is not None:
            return (row[1] if bf16 else row[2]) * 1e12, f"{PEAK_SOURCE} ({row[0]}, {'bf16' if bf16 else 'fp32'})"
    elif backend == "tpu" and bf16:
        row_t = lookup_tpu_peak(device_kind)
        if row_t is not None:
            return row_t[1] * 1e12, f"{TPU_PEAK_SOURCE} ({row_t[0]}, bf16)"
    return None


__all__ = ["DEFAULT_MFU", "GPU_PEAKS", "PEAK_SOURCE", "RECORDED_MFU", "TPU_PEAKS", "TPU_PEAK_SOURCE", "lookup_gpu_peak",
           "lookup_tpu_peak", "published_peak"]
