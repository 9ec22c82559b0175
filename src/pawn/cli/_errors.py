"""The CLI's one error map. Every failure a user can cause ends as ONE ``error: <message>`` line on
stderr and an exit code, never a traceback:

- :class:`pawn.errors.PawnError` (any subclass) → its message and the class's ``exit_code``
  (1: the input or the run failed; 2: a bad setting);
- :class:`pydantic.ValidationError` of a command's settings → the fields at fault, exit 2;
- Click usage errors (unknown option, invalid value, missing argument) → the message and a
  ``(see 'pawn CMD --help')`` hint, exit 2;
- Ctrl-C not handled by the command → exit 130 with what is on disk.
"""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from pawn.errors import PawnError

try:  # recent Typer vendors Click; older releases use the click package
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as _click_exc


def fail(message: str, code: int = 1) -> "typer.Exit":
    """Print ``error: <message>`` (one line) to stderr and return the exit to raise."""
    typer.secho(f"error: {' '.join(str(message).splitlines())}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


def exit_for(e: BaseException) -> "typer.Exit | None":
    """The one-line report and exit for an exception the CLI maps, else None (a bug: let it raise)."""
    from pydantic import ValidationError

    if isinstance(e, PawnError):
        return fail(str(e), e.exit_code)
    if isinstance(e, ValidationError):
        from pawn.settings import format_validation_error

        return fail(format_validation_error(e), 2)
    return None


def _warn_unused_accelerator(args) -> None:
    """One warning line on stderr when a training command (:data:`pawn.cli._accel.COMMANDS`) starts
    on a machine with a GPU or TPU that the installed JAX cannot use (:mod:`pawn.cli._accel`);
    nothing for help, for other commands, or when the check finds nothing."""
    import sys

    argv = list(sys.argv[1:] if args is None else args)
    from pawn.cli._accel import COMMANDS, unused_accelerator_warning

    command = next((a for a in argv if not a.startswith("-")), None)
    if command not in COMMANDS or {"--help", "-h"} & set(argv):
        return
    line = unused_accelerator_warning()
    if line:
        typer.secho(line, err=True, fg=typer.colors.YELLOW)


class OneLineErrors(TyperGroup):
    """A Typer group whose failures follow the map above (instead of Click's boxed usage block),
    and whose commands are loaded on first use (``lazy_commands``: name → (target, load,
    summary), filled by :func:`pawn.cli.register`): the command list of ``--help`` shows each
    command's summary without importing it."""

    lazy_commands: dict = {}
    _listing = False

    def list_commands(self, ctx):
        return [*super().list_commands(ctx), *(n for n in self.lazy_commands if n not in self.commands)]

    def get_command(self, ctx, name):
        if name not in self.commands and name in self.lazy_commands:
            _, load, summary = self.lazy_commands[name]
            if self._listing:  # the command list: its summary only, the module is not imported
                import click

                return click.Command(name, help=summary(), short_help=summary())
            self.commands[name] = load()
        return super().get_command(ctx, name)

    def format_help(self, ctx, formatter):
        self._listing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._listing = False

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        _warn_unused_accelerator(args)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _click_exc.NoArgsIsHelpError as e:
            e.show()
            raise SystemExit(e.exit_code) from None
        except _click_exc.ClickException as e:
            ctx = getattr(e, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if isinstance(e, _click_exc.UsageError) and ctx else ""
            message = " ".join(e.format_message().split())
            typer.secho(f"error: {message}{hint}", err=True, fg=typer.colors.RED)
            raise SystemExit(e.exit_code) from None
        except (typer.Abort, _click_exc.Abort if hasattr(_click_exc, "Abort") else typer.Abort):
            typer.secho("error: aborted", err=True, fg=typer.colors.RED)
            raise SystemExit(1) from None
        raise SystemExit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx):
        """Run the subcommand; map its errors (see the module docstring)."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            raise fail("interrupted (Ctrl-C); files are written whole or not at all: those reported as written "
                       "above are complete, nothing else was written", 130) from None
        except Exception as e:
            mapped = exit_for(e)
            if mapped is None:
                raise
            raise mapped from None
