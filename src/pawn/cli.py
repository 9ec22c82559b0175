"""The ``pawn`` command line. Each subcommand parses options and calls one library function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

app = typer.Typer(
    name="pawn",
    help="PAWN: chess world-model transformers trained on random legal games.",
    no_args_is_help=True,
    add_completion=False,
)


def _version_callback(value: bool) -> None:
    if value:
        from pawn import __version__, _engine

        typer.echo(f"pawn {__version__} (pawn-engine {_engine.__version__})")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version_callback, is_eager=True, help="Print the package and engine versions."),
    ] = None,
) -> None:
    """PAWN: chess world-model transformers trained on random legal games."""


def _fail(message: str, code: int = 1) -> "typer.Exit":
    """Print a one-line error to stderr and return the exit to raise."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    return typer.Exit(code)


@app.command()
def convert(
    source: Annotated[str, typer.Argument(help="Hugging Face repo id (owner/name) or a local directory with a v1 model.safetensors + config.json.")],
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Destination directory. Default: the conversion cache ($PAWN_CONVERTED_DIR, else $HF_HOME/pawn-jax-converted), keyed by the source id."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Reconvert even if this source id is already in the cache (the cache key is the id, not the weights' content).")] = False,
) -> None:
    """Convert a published v1 PAWN checkpoint to the v2 format and check its logits.

    After writing, the converted model and an independent NumPy v1 forward run on a fixed batch;
    the command fails if max |Δlogit| over real positions exceeds 1e-4. HF_HUB_OFFLINE=1 is honoured.
    """
    from pawn.checkpoint import CheckpointError
    from pawn.convert import ConversionError, convert as run_convert

    try:
        res = run_convert(source, output, force=force)
    except (ConversionError, CheckpointError) as e:
        raise _fail(str(e))
    c = res.config
    shape = f"d_model={c.d_model} n_layers={c.n_layers} n_heads={c.n_heads} (head_dim {c.head_dim}) d_ff={c.d_ff}"
    if res.cached:
        typer.echo(f"cached conversion of {source} ({shape}); use --force to reconvert")
    else:
        typer.echo(f"converted {source} ({shape}) in {res.seconds:.1f} s; parity max |Δlogit| = {res.max_abs_dlogit:.2e}")
    typer.echo(str(res.path))


def _pretrain(config: Optional[Path] = None, **fields) -> None:
    from pydantic import ValidationError

    from pawn.settings import ConfigFileError, PretrainConfig, format_validation_error
    from pawn.train.pretrain import TrainingError, run_pretrain

    try:
        cfg = PretrainConfig.load(config, **fields)
    except ConfigFileError as e:
        raise _fail(str(e), 2)
    except ValidationError as e:
        raise _fail(format_validation_error(e), 2)
    try:
        res = run_pretrain(cfg, log=lambda msg: typer.echo(msg, err=True))
    except TrainingError as e:
        raise _fail(str(e))
    except KeyboardInterrupt:
        raise _fail("interrupted twice; stopped without a final checkpoint (the last complete one is still loadable)", 130)
    if res.reason == "sigterm":
        typer.echo(f"stopped by signal at step {res.step}; checkpoint {res.checkpoint} (resume with --resume {res.run_dir})")
        return
    if res.reason == "paused":
        typer.echo(f"paused at step {res.step}; checkpoint {res.checkpoint} (resume with --resume {res.run_dir})")
        return
    if res.reason == "resume_no_op":
        typer.echo(f"nothing to do: {res.run_dir} already reached step {res.step}")
        return
    typer.echo(f"finished {res.step} steps; run directory {res.run_dir}")
    if res.last_val:
        vals = {k: v for k, v in res.last_val.items() if k.startswith("val/")}
        typer.echo("validation: " + ", ".join(f"{k[4:]}={v:.4f}" for k, v in sorted(vals.items()) if isinstance(v, float)))
    typer.echo(f"checkpoint: {res.checkpoint}")
    for name, p in res.variant_checkpoints.items():
        typer.echo(f"variant {name}: {p}")


def _register_pretrain() -> None:
    import inspect

    from pawn.cli_options import settings_parameters
    from pawn.settings import PretrainConfig

    config_param = inspect.Parameter(
        "config", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[Path],
        default=typer.Option(None, "--config", help="JSON or TOML file of config fields (lowest priority above defaults).", show_default=False),
    )

    def pretrain(**kwargs) -> None:
        _pretrain(**kwargs)

    pretrain.__signature__ = inspect.Signature([config_param, *settings_parameters(PretrainConfig)])  # type: ignore[attr-defined]
    pretrain.__doc__ = (
        "Pretrain a supernet (--supernet tiny|large) or one model (--variant) on random legal games.\n\n"
        "Every option can also come from a PAWN_<NAME> environment variable or a --config file; "
        "precedence: command line > environment > config file > defaults. "
        "Writes metrics.jsonl, config.json, schedule_health.json and checkpoints/step_XXXXXXXX "
        "under --out; SIGTERM/Ctrl-C checkpoints and stops; --resume DIR|auto continues exactly."
    )
    app.command("pretrain")(pretrain)


_register_pretrain()


if __name__ == "__main__":
    app()
