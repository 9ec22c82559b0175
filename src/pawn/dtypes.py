"""Compute-dtype names as people type them (``bf16``, ``fp32``, …) mapped to the canonical names
the model takes (:func:`pawn.model.resolve_dtype`): ``float32`` and ``bfloat16``."""

from __future__ import annotations

from typing import Optional

DTYPE_ALIASES: dict[str, str] = {
    "float32": "float32", "fp32": "float32", "f32": "float32", "float": "float32", "single": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
}
"""Accepted spellings (lower-case) → canonical compute dtype."""

_UNSUPPORTED = {"float16": "float16", "fp16": "float16", "f16": "float16", "half": "float16",
                "float64": "float64", "fp64": "float64", "f64": "float64", "double": "float64"}


def canonical_dtype(name: Optional[str], *, allow_auto: bool = False) -> Optional[str]:
    """Map a compute-dtype spelling to ``"float32"`` or ``"bfloat16"`` (``"auto"`` too when
    ``allow_auto``); None stays None (the command's default).

    Raises:
        ValueError: an unknown or unsupported name; one line listing the accepted spellings.
    """
    if name is None:
        return None
    key = str(name).strip().lower()
    if allow_auto and key == "auto":
        return "auto"
    if key in DTYPE_ALIASES:
        return DTYPE_ALIASES[key]
    valid = ("auto, " if allow_auto else "") + "float32 (fp32, f32), bfloat16 (bf16)"
    why = f"{_UNSUPPORTED[key]} is not supported" if key in _UNSUPPORTED else f"unknown dtype {name!r}"
    raise ValueError(f"{why}; choose one of {valid}")
