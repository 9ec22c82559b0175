"""Shared command-line options, and the ONE flag generator: :func:`settings_command` turns a
pydantic-settings model (:class:`pawn.settings.CommandSettings`) into a Typer command whose flags
are the model's fields (help = the field's description, its default and its environment
variable; ranges = the field's ``ge``/``le``/``gt`` constraints), plus ``--config FILE``.

Precedence, for every command: command line > ``<PREFIX><FIELD>`` environment > config file >
defaults (:meth:`pawn.settings.CommandSettings.load`)."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Callable, Optional, Sequence

import annotated_types
from pydantic_settings import NoDecode
import typer
from pydantic import BaseModel, ValidationError
from rich.markup import escape as rich_escape

from pawn.dtypes import canonical_dtype
from pawn.settings import LAPTOP_PRESET, PretrainConfig, SettingsError, format_validation_error


def dtype_option(value: Optional[str]) -> Optional[str]:
    """--dtype callback: map bf16/fp32/... to the canonical name, or fail in one line listing them."""
    try:
        return canonical_dtype(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


JsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write every figure and the exact settings to this JSON file.")]
GamesOpt = Annotated[int, typer.Option("--games", min=1, help="Number of games.")]
DtypeOpt = Annotated[Optional[str], typer.Option("--dtype", callback=dtype_option, help="Compute dtype: float32 (fp32) or bfloat16 (bf16). Default: float32 on CPU, bfloat16 on accelerators.")]
PrefixOpt = Annotated[Optional[bool], typer.Option("--prepend-outcome/--pure-moves", help="Sequence layout. Default: what the checkpoint records, else pure moves (the published models).")]
"""Shared ``Annotated`` options for commands whose flags are not (yet) a settings model (e.g. the
``cli_<name>.py`` commands of other branches); settings-model commands use :func:`settings_command`."""


_CALLBACKS: dict[str, Callable[[Any], Any]] = {"dtype": dtype_option}
"""Click callbacks a settings field may name (``json_schema_extra={"callback": "dtype"}``) so its
bad values fail as a usage error naming the flag, like the same flag of other commands."""


def _cli_type(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return str
    if origin is list or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return list[_cli_type(args[0])] if args else list[str]
    if origin is typing.Union and args:
        return _cli_type(args[0])
    if annotation in (int, float, str, bool, Path):
        return annotation
    return str


def _literal_choices(annotation: Any) -> tuple:
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    for a in typing.get_args(annotation):
        if typing.get_origin(a) is typing.Literal:
            return typing.get_args(a)
    return ()


def _float_bounds(metadata: Sequence[Any], typ: Any) -> tuple[Any, Any, Any, Any]:
    """A float field's ``(ge, gt, le, lt)`` constraints (None where absent; all None for other types)."""
    if typ is not float:
        return (None, None, None, None)
    get = lambda cls, attr: next((getattr(m, attr) for m in metadata if isinstance(m, cls)), None)  # noqa: E731
    return (get(annotated_types.Ge, "ge"), get(annotated_types.Gt, "gt"), get(annotated_types.Le, "le"), get(annotated_types.Lt, "lt"))


def _range(metadata: Sequence[Any], typ: Any) -> dict[str, Any]:
    """Click ``min``/``max`` from an int field's ``ge``/``gt``/``le`` constraints. A float field
    gets no click range: click's check would let ``nan`` through to a range message ("greater
    than or equal to 0") where the model says "Input should be a finite number", and its help
    would show ``[x<=1.0]`` for ``(0, 1]``; :func:`_range_text` writes the range in the help and
    the model validates it (non-finite values first)."""
    out: dict[str, Any] = {}
    if typ is float:
        return out
    for m in metadata:
        if isinstance(m, annotated_types.Ge):
            out["min"] = m.ge
        elif isinstance(m, annotated_types.Gt) and typ is int:
            out["min"] = m.gt + 1
        elif isinstance(m, annotated_types.Le):
            out["max"] = m.le
    return out


def _range_text(metadata: Sequence[Any], typ: Any) -> str:
    """A float field's range in interval notation for its help: `` Range (0, 1].``,
    `` Range [0, 1].``, `` Greater than 0.``, `` At least 0.``, `` At most 1.``; ``""`` for
    other fields (click shows an int's range)."""
    ge, gt, le, lt = _float_bounds(metadata, typ)
    lo, hi = (ge if ge is not None else gt), (le if le is not None else lt)
    if lo is not None and hi is not None:
        return f" Range {'[' if ge is not None else '('}{lo:g}, {hi:g}{']' if le is not None else ')'}."
    if lo is not None:
        return f" At least {lo:g}." if ge is not None else f" Greater than {lo:g}."
    if hi is not None:
        return f" At most {hi:g}." if le is not None else f" Less than {hi:g}."
    return ""


_SPEC_REFS = ((re.compile(r"\s*\((?:see )?spec\b[^()]*\)"), ""), (re.compile(r"\bspec(?: [\w.-]+)? §[\d.]+"), "the reference"),
              (re.compile(r"\bshared/spec/\S*"), "the reference"), (re.compile(r"\(the spec's ([^)]*)\)"), r"(a \1)"),
              (re.compile(r" §[\d.]+ "), " built-in "))


def user_help(text: str) -> str:
    """``text`` without references to the project's internal spec (``(spec §1.8)``, ``spec
    engine §6.3``, ``shared/spec/``), which users of the package do not have."""
    for pattern, repl in _SPEC_REFS:
        text = pattern.sub(repl, text)
    return text


def format_default(value: Any) -> str:
    """A default as a user types it on the command line: a list or tuple as ``q,k,v,o`` (not
    ``('q', 'k', 'v', 'o')``), an empty one as ``none``, anything else as ``str``."""
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(map(str, value)) if value else "none"
    return str(value)


def _place_groups(model: type[BaseModel], fields: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``fields`` with each shared group that names an anchor (a base class's
    ``cli_fields_after = "seq_len"``, e.g. :class:`pawn.settings.OptimizerSettings`) moved to
    just after that field, in the group's declaration order; a group whose anchor the model
    lacks stays where it is."""
    for base in model.__mro__[1:]:
        anchor = vars(base).get("cli_fields_after")
        if not anchor or anchor not in model.model_fields:
            continue
        group = [kv for kv in fields if kv[0] in base.model_fields]
        rest = [kv for kv in fields if kv[0] not in base.model_fields]
        i = next(j for j, kv in enumerate(rest) if kv[0] == anchor) + 1
        fields = rest[:i] + group + rest[i:]
    return fields


def settings_parameters(model: type[BaseModel], exclude: Sequence[str] = ()) -> list[inspect.Parameter]:
    """One keyword parameter per model field, default ``None`` (= not given on the command line,
    so environment, config file and defaults apply in that order). Each help text ends with the
    field's default (and the laptop preset's, where it differs) and its environment variable.
    Fields named in ``exclude`` get no flag (the command sets them from its own options).

    Shared field groups (a base class with ``cli_fields_last = True``, e.g.
    :class:`pawn.settings.RunOutputSettings`) come after the command's own fields, a group with
    ``cli_fields_after`` (:class:`pawn.settings.OptimizerSettings`) right after that field, and
    a model's ``field_help`` dict replaces the description of a field."""
    env_prefix = model.model_config.get("env_prefix", "PAWN_")
    preset = LAPTOP_PRESET if model is PretrainConfig else {}
    field_help = getattr(model, "field_help", {})
    shared = {n for base in model.__mro__[1:] if vars(base).get("cli_fields_last") for n in base.model_fields}
    fields = sorted(model.model_fields.items(), key=lambda kv: kv[0] in shared)  # stable: declaration order within each part
    fields = _place_groups(model, fields)
    params = []
    for name, f in fields:
        if name in exclude:
            continue
        cli = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        # A comma-list field (``Annotated[list[...], NoDecode]`` with a splitting validator) takes one string,
        # or with ``json_schema_extra={"repeatable": True}`` a repeatable flag (each value may be a comma list).
        if any(m is NoDecode or isinstance(m, NoDecode) for m in f.metadata):
            typ = list[str] if cli.get("repeatable") else str
        else:
            typ = _cli_type(f.annotation)
        choices = _literal_choices(f.annotation)
        extra = (f" One of: {', '.join(map(str, choices))}." if choices else "") + _range_text(f.metadata, typ)
        default = "" if f.is_required() or f.default is None else f" [default: {format_default(f.default)}]"
        if name in preset:
            default += f" (tiny supernet and toy model: {preset[name]})"
        # Escaped: Typer renders help as rich markup, which silently drops ``[default: …]``.
        help_text = rich_escape(user_help(f"{field_help.get(name, f.description) or ''}{extra}{default} Env: {env_prefix}{name.upper()}{' (true = off)' if typ is bool and name.startswith('no_') else ''}."))
        flag = cli.get("flag") or ("--" + name.replace("_", "-") + (f"/--no-{name.replace('_', '-')}" if typ is bool else ""))
        callback = _CALLBACKS[cli["callback"]] if "callback" in cli else None
        opt = typer.Option(None, flag, help=help_text.strip(), show_default=False, callback=callback, **_range(f.metadata, typ))
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=Optional[typ]))
    return params


def settings_command(model: type, body: Callable[..., None], *, doc: str, before: Sequence[inspect.Parameter] = (),
                     after: Sequence[inspect.Parameter] = (), exclude: Sequence[str] = ()) -> Callable[..., None]:
    """A Typer command: ``before`` parameters (e.g. a CHECKPOINT argument), ``--config FILE``,
    ``after`` parameters, then one flag per field of ``model``. The command builds the settings
    (:meth:`load`: flags the user gave > environment > file > defaults) and calls
    ``body(settings, **before_and_after_values)``. Fields in ``exclude`` get no flag.

    Raises (inside the command): pawn.settings.ConfigFileError, pawn.settings.SettingsError (the
    settings do not validate; the line names each field by its flag, environment variable or
    config file), both mapped to one line and exit 2 by :mod:`pawn.cli._errors`.
    """
    own = {p.name for p in (*before, *after)}

    def command(**kwargs: Any) -> None:
        config = kwargs.pop("config")
        extra = {k: kwargs.pop(k) for k in own}
        given = {k: v for k, v in kwargs.items() if v not in (None, [], ())}
        try:
            settings = model.load(config, **given)
        except ValidationError as e:  # one line naming each field's source: --flag, PAWN_VAR or the config file
            raise SettingsError(format_validation_error(e, model.field_sources(config, given))) from None
        body(settings, **extra)

    config_param = inspect.Parameter(
        "config", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[Path],
        default=typer.Option(None, "--config", show_default=False,
                             help="JSON or TOML file of option values by field name (lowest priority above defaults); "
                                  "precedence: command line > environment > file > defaults."),
    )
    command.__signature__ = inspect.Signature([*before, config_param, *after, *settings_parameters(model, exclude)])  # type: ignore[attr-defined]
    command.__doc__ = rich_escape(doc)  # literal text: Typer renders help as rich markup, where pawn[wandb] would vanish
    command.__name__ = getattr(body, "__name__", "command")
    return command


def argument(name: str, annotation: Any, help: str) -> inspect.Parameter:
    """A positional argument for :func:`settings_command`'s ``before``."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=typer.Argument(..., help=help))


def flag(name: str, annotation: Any, default: Any, *decls: str, help: str) -> inspect.Parameter:
    """A command-only option (not a settings field) for :func:`settings_command`'s ``after``."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation,
                             default=typer.Option(default, *decls, help=help))


def uniform_env_help(command):
    """``command`` (a Click command) with every option that reads an environment variable saying
    so as the settings commands' flags do, `` Env: VAR.`` at the end of its help, instead of
    Click's ``[env var: VAR]`` (one form in every command's ``--help``). Returns ``command``."""
    for param in getattr(command, "params", []):
        if getattr(param, "envvar", None) and getattr(param, "show_envvar", False):
            var = param.envvar if isinstance(param.envvar, str) else " / ".join(param.envvar)
            param.show_envvar = False
            param.help = f"{(param.help or '').rstrip()} Env: {var}."
    return command
