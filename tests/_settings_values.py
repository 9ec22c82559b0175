"""Other values of a settings field, for the tests that try every field carrying a tag (the resume
rule's properties): candidates only, the caller keeps the first its settings class validates."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any


def other_values(model: Any, field: str, current: Any) -> list:
    """Candidate values of ``model.model_fields[field]`` (a pydantic settings class) other than
    ``current``: its Literal choices, a flipped bool, nearby numbers, then a few strings and paths."""
    ann = model.model_fields[field].annotation
    parts = (ann,) if typing.get_origin(ann) is typing.Literal else (typing.get_args(ann) or (ann,))
    lits = [a for t in parts for a in (typing.get_args(t) if typing.get_origin(t) is typing.Literal else ())]
    cands = [v for v in lits if v != current]
    if isinstance(current, bool):
        cands.append(not current)
    elif isinstance(current, int):
        cands += [current + 1, 1]
    elif isinstance(current, float):
        cands += [current * 2 if current else 1.0, 0.5]
    cands += [True, 8, 3, 2.5, 0.5, "me/some-repo", "elsewhere", str(Path("/tmp") / "pawn-elsewhere")]
    return [v for v in cands if v != current]
