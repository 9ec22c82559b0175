"""Build Typer options from a pydantic settings model, so every config field is a CLI flag with
the field's description as help and a ``PAWN_`` environment variable named in it."""

from __future__ import annotations

import inspect
import typing
from pathlib import Path
from typing import Any, Optional

import typer
from pydantic import BaseModel
from rich.markup import escape as rich_escape

from pawn.settings import LAPTOP_PRESET, PretrainConfig


def _cli_type(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return str
    if origin is typing.Union and args:
        return _cli_type(args[0])
    if annotation in (int, float, str, bool, Path):
        return annotation
    return str


def settings_parameters(model: type[BaseModel], env_prefix: str = "PAWN_", flags: Optional[dict[str, str]] = None) -> list[inspect.Parameter]:
    """One keyword parameter per model field, default ``None`` (= not given on the command line,
    so environment, config file and defaults apply in that order). Each help text ends with the
    field's default (and the laptop preset's, where it differs) and its environment variable.
    ``flags`` maps a field name to a flag other than ``--<field-name>`` (e.g. ``json_out`` →
    ``--json``)."""
    preset = LAPTOP_PRESET if model is PretrainConfig else {}
    params = []
    for name, f in model.model_fields.items():
        typ = _cli_type(f.annotation)
        choices = typing.get_args(f.annotation)
        lit = [a for a in choices if typing.get_origin(a) is typing.Literal] or ([f.annotation] if typing.get_origin(f.annotation) is typing.Literal else [])
        extra = f" One of: {', '.join(map(str, typing.get_args(lit[0])))}." if lit else ""
        default = "" if f.is_required() or f.default is None else f" [default: {f.default}]"
        if name in preset:
            default += f" (tiny supernet and toy model: {preset[name]})"
        # Escaped: Typer renders help as rich markup, which silently drops ``[default: …]``.
        help_text = rich_escape(f"{f.description or ''}{extra}{default} Env: {env_prefix}{name.upper()}.")
        flag = (flags or {}).get(name) or "--" + name.replace("_", "-")
        decls = [f"{flag}/--no-{name.replace('_', '-')}"] if typ is bool else [flag]
        opt = typer.Option(None, *decls, help=help_text.strip(), show_default=False)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=Optional[typ]))
    return params
