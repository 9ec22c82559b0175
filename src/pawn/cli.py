"""The ``pawn`` command line. Each subcommand parses options and calls one library function."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from typer.core import TyperGroup

try:  # recent Typer vendors Click; older releases use the click package
    from typer._click import exceptions as _click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as _click_exc


class _OneLineErrors(TyperGroup):
    """Report a bad command line (unknown option, invalid value, negative --games, ...) as one
    ``error: ...`` line with exit code 2 instead of Click's boxed usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
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
        """Run the subcommand; Ctrl-C that the command does not handle itself ends with exit code
        130 and one line saying what is on disk (outputs are written whole or not at all)."""
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            typer.secho("error: interrupted (Ctrl-C); files are written whole or not at all: those reported as written "
                        "above are complete, nothing else was written", err=True, fg=typer.colors.RED)
            raise typer.Exit(130) from None


app = typer.Typer(
    name="pawn",
    cls=_OneLineErrors,
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
    sources: Annotated[list[str], typer.Argument(help="One or more sources: Hugging Face Hub ids (owner/name, optionally @revision: a branch, tag or commit) or local directories with a v1 model.safetensors + config.json (with --slice: v2 supernet checkpoints).")],
    output: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Destination directory (with several sources: a parent directory, one sub-folder per source). Default: the conversion cache ($PAWN_CONVERTED_DIR, else $HF_HOME/assets/pawn/converted), keyed by the source and, for a Hub id, its resolved commit."),
    ] = None,
    slice_variant: Annotated[Optional[str], typer.Option("--slice", help="Instead of converting, write this nested variant (small, base, large) of a supernet checkpoint as a standalone checkpoint; `pawn eval` gives it the same numbers as --variant on the supernet.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Rewrite even if the cache already holds this source (a Hub id is keyed by its resolved commit, so a re-published repo is converted again without --force).")] = False,
    push_to_hub: Annotated[Optional[str], typer.Option("--push-to-hub", help="Then publish the converted checkpoint (with its README.md model card) to this Hub model repo (owner/name; created if missing) as one commit; one source only. For a finished run's files, use `hf upload`.")] = None,
    hub_branch: Annotated[str, typer.Option("--hub-branch", help="Branch for --push-to-hub (created if missing).")] = "main",
    hub_private: Annotated[bool, typer.Option("--hub-private", help="Create the --push-to-hub repo private.")] = False,
) -> None:
    """Convert published v1 PAWN checkpoints to the v2 format and check their logits.

    Each source is reported in a table row (result, output, parity) and a failure does not stop
    the others; the exit code is 1 if any failed. The last lines are the output directories. The
    parity check compares the converted fp32 model with an independent float64 NumPy v1 forward
    on a fixed batch: max |Δlogit| ≤ 1e-3 and mean ≤ 1e-4 over real positions. HF_HUB_OFFLINE=1
    is honoured (cached downloads only).
    """
    from pawn.convert import convert_many
    from pawn.progress import output_console
    from rich.markup import escape
    from rich.table import Table

    if push_to_hub is not None:  # offline mode or a bad repo id: refused before any work
        from pawn.errors import PawnError
        from pawn.hub.push import check_can_push

        if len(sources) != 1:
            raise _fail("--push-to-hub takes one source")
        try:
            check_can_push(push_to_hub)
        except PawnError as e:
            raise _fail(str(e), e.exit_code)
    reports = convert_many(sources, output, force=force, slice_variant=slice_variant,
                           on_done=lambda r: None if r.ok else typer.secho(f"error: {r.error}", err=True, fg=typer.colors.RED))
    table = Table(title="pawn convert" + (f" --slice {slice_variant}" if slice_variant else ""))
    for col in ("source", "result", "output", "parity max / mean |Δlogit|"):
        table.add_column(col, overflow="fold")
    for r in reports:
        res = r.result
        if res is None:
            table.add_row(escape(r.source), "[red]failed[/red]", "", escape(r.error))
            continue
        c = res.config
        what = ("cached" if res.cached else ("sliced" if res.variant else "converted")) + f" d{c.d_model} L{c.n_layers} H{c.n_heads} F{c.d_ff}"
        parity = "—" if res.max_abs_dlogit is None else f"{res.max_abs_dlogit:.2e} / {res.mean_abs_dlogit:.2e}"
        table.add_row(escape(r.source + (f" ({res.commit[:12]})" if res.commit else "")), what, escape(str(res.path)), parity)
    output_console().print(table)
    for r in reports:
        if r.ok:
            typer.echo(str(r.result.path))
    if not all(r.ok for r in reports):
        raise typer.Exit(1)
    if push_to_hub is not None:
        from pawn.errors import PawnError
        from pawn.hub.push import push_checkpoint

        try:
            o = push_checkpoint(reports[0].result.path, push_to_hub, branch=hub_branch, private=hub_private, log=lambda m: typer.echo(m, err=True))
        except PawnError as e:
            raise _fail(str(e), e.exit_code)
        typer.echo(f"pushed to {push_to_hub}@{hub_branch}: commit {o.commit}")


def _pretrain(config: Optional[Path] = None, overwrite: bool = False, **fields) -> None:
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
        res = run_pretrain(cfg, log=lambda msg: typer.echo(msg, err=True), overwrite=bool(overwrite))
    except TrainingError as e:
        raise _fail(str(e))
    except KeyboardInterrupt:
        raise _fail("interrupted; stopped without writing a checkpoint (the last complete one, if any, is still loadable)", 130)
    if res.reason == "sigterm":
        typer.echo(f"stopped by signal at step {res.step}; checkpoint {res.checkpoint} (resume with --resume {res.run_dir})")
        return
    if res.reason == "paused":
        typer.echo(f"paused at step {res.step}; checkpoint {res.checkpoint} (resume with --resume {res.run_dir})")
        return
    if res.reason == "resume_no_op":
        typer.echo(f"nothing to do: {res.run_dir} already reached step {res.step}")
        return
    if res.reason == "patience":
        typer.echo(f"stopped early at step {res.step}: validation stopped improving (--patience); run directory {res.run_dir}")
    else:
        typer.echo(f"finished {res.step} steps; run directory {res.run_dir}")
    if res.last_val:
        from pawn.progress import output_console
        from rich.table import Table

        table = Table(title=f"validation at step {res.last_val['step']}")
        cols = ("loss", "accuracy", "top5_accuracy", "legal_move_rate", "game_completion_rate")
        table.add_column("model")
        for c in ("loss", "top-1", "top-5", "legal rate", "completion"):
            table.add_column(c, justify="right")
        names = sorted((k[len("val/loss_"):] for k in res.last_val if k.startswith("val/loss_")),
                       key=lambda n: int(n.split("_")[0][1:]))
        for n in names:
            label = next((f"{v} ({n})" for v, vc in cfg.model_configs()[1].items() if vc.name == n), n)
            table.add_row(label, *(f"{res.last_val.get(f'val/{c}_{n}', float('nan')):.4f}" for c in cols))
        output_console().print(table)
    typer.echo(f"checkpoint: {res.checkpoint}")
    if res.best_checkpoint is not None:
        typer.echo(f"best checkpoint (lowest val loss, step {res.best_step}): {res.best_checkpoint}")
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

    overwrite_param = inspect.Parameter(
        "overwrite", inspect.Parameter.KEYWORD_ONLY, annotation=bool,
        default=typer.Option(False, "--overwrite", help="If --out holds another run, move it aside to OUT.old-<time> (never deleted) and start a new run there. Without it (or --resume), such a directory is refused."),
    )
    pretrain.__signature__ = inspect.Signature([config_param, overwrite_param, *settings_parameters(PretrainConfig)])  # type: ignore[attr-defined]
    pretrain.__doc__ = (
        "Pretrain a supernet (--supernet tiny|large) or one model (--variant) on random legal games.\n\n"
        "Every option can also come from a PAWN_<NAME> environment variable or a --config file; "
        "precedence: command line > environment > config file > defaults. "
        "Writes metrics.jsonl, config.json, schedule_health.json, curves.png (with matplotlib), checkpoints/step_NNNNNNNN and "
        "checkpoints/best (lowest val loss) under --out (a directory holding another run is refused unless "
        "--resume or --overwrite); --patience N stops early; SIGTERM/Ctrl-C checkpoints and stops (Ctrl-C twice "
        "stops at once); --resume DIR|auto continues exactly (skipping damaged checkpoints). "
        "In a log file (not a terminal) progress is a plain line every --log-every-s seconds. "
        "--tensorboard and --wandb also log every record (extras pawn[tensorboard], pawn[wandb])."
    )
    app.command("pretrain")(pretrain)


_register_pretrain()

# ============================================================================ eval / probe / generate
from pawn.settings import VAL_SEED_PUBLISHED as PUBLISHED_VAL_SEED  # noqa: E402

GamesOpt = Annotated[int, typer.Option("--games", min=1, help="Number of games.")]
JsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write every figure and the exact settings to this JSON file.")]
VariantOpt = Annotated[Optional[str], typer.Option("--variant", help="For a supernet checkpoint: evaluate only this nested variant (default: all).")]


def _dtype_option(value: Optional[str]) -> Optional[str]:
    """--dtype: map bf16/fp32/... to the canonical name, or fail in one line listing them."""
    from pawn.dtypes import canonical_dtype

    try:
        return canonical_dtype(value)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None


DtypeOpt = Annotated[Optional[str], typer.Option("--dtype", callback=_dtype_option, help="Compute dtype: float32 (fp32) or bfloat16 (bf16). Default: float32 on CPU, bfloat16 on accelerators.")]
PrefixOpt = Annotated[
    Optional[bool],
    typer.Option("--prepend-outcome/--pure-moves", help="Sequence layout. Default: what the checkpoint records, else pure moves (the published models)."),
]


def _json_safe(obj):
    """Replace NaN/±Inf by None recursively (JSON has no NaN)."""
    import math

    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _write_json(path: Optional[Path], data: dict) -> None:
    if path is None:
        return
    import json

    from pawn.fileio import atomic_output

    try:
        with atomic_output(path) as tmp:
            tmp.write_text(json.dumps(_json_safe(data), indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        raise _fail(f"--json {path}: cannot write ({e.strerror or e})")
    typer.echo(f"wrote {path}")


def _check_outputs(**paths: Optional[Path]) -> None:
    """Fail in one line, before any work, if an output file cannot be written (flag=path)."""
    from pawn.fileio import OutputPathError, check_output_file

    for flag, p in paths.items():
        if p is not None:
            try:
                check_output_file(p, "--" + flag.replace("_", "-"))
            except OutputPathError as e:
                raise _fail(str(e))


def _load(checkpoint: str, variant: Optional[str]):
    """Load models for a command; every loading problem becomes a one-line error."""
    from pawn.checkpoint import CheckpointError
    from pawn.convert import ConversionError
    from pawn.evaluate.loading import load_models

    try:
        return load_models(checkpoint, variant)
    except (CheckpointError, ConversionError, FileNotFoundError, ValueError) as e:
        raise _fail(str(e))


def _heartbeat(label: str):
    """When stdout is not a terminal, a "still running" line every PAWN_LOG_EVERY_S seconds (30 by
    default) until the command ends (:class:`pawn.progress.Heartbeat`)."""
    try:  # the Click that Typer runs on (vendored in recent Typer)
        from typer._click.globals import get_current_context
    except ImportError:  # pragma: no cover
        from click import get_current_context

    from pawn.progress import Heartbeat

    try:
        hb = Heartbeat(label).start()
    except ValueError as e:  # a bad PAWN_LOG_EVERY_S
        raise _fail(str(e), 2)
    get_current_context().call_on_close(hb.stop)
    return hb


def _pct(x) -> str:
    return "—" if x is None or x != x else f"{100 * x:.4f}%"


def _num(x, fmt: str = ".4f") -> str:
    return "—" if x is None or x != x else format(x, fmt)


@app.command("eval")
def eval_cmd(
    checkpoint: Annotated[str, typer.Argument(help="v2 checkpoint directory (a supernet evaluates every nested variant) or a Hub id (converted on the fly).")],
    games: GamesOpt = 2048,
    seed: Annotated[int, typer.Option("--seed", min=0, max=2**64 - 1, help="Random-game seed; default is the published validation seed 2^63 − 1.")] = PUBLISHED_VAL_SEED,
    max_ply: Annotated[Optional[int], typer.Option("--max-ply", min=1, help="Ply cap of the random games; the sequence length is max_ply (+1 with the outcome prefix), capped at the model context. Default: the checkpoint's trained context (its run config's seq_len, less 1 with the outcome prefix), so the numbers match the run's own validation; 512 for a checkpoint that records none (published models).", show_default=False)] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Games per model call; also the batch of the published per-batch means (256 in the published runs).")] = 256,
    late_ply: Annotated[Optional[int], typer.Option("--late-ply", help="First sequence position of the late-game legal rate (default: sequence length // 2 = 256).")] = None,
    pgn: Annotated[Optional[Path], typer.Option("--pgn", help="Also evaluate on Lichess games from this PGN file, by Elo band.")] = None,
    elo_edges: Annotated[str, typer.Option("--elo-edges", help="Comma-separated Elo band edges for --pgn (average of both players).")] = "600,1000,1400,1800,2200",
    pgn_games_per_band: Annotated[int, typer.Option("--pgn-games-per-band", min=1, help="At most this many games per Elo band.")] = 1000,
    pgn_min_ply: Annotated[int, typer.Option("--pgn-min-ply", min=0, help="Skip PGN games shorter than this.")] = 10,
    variant: VariantOpt = None,
    dtype: DtypeOpt = None,
    prepend_outcome: PrefixOpt = None,
    json_out: JsonOpt = None,
) -> None:
    """Move accuracy, legality, game completion and the accuracy ceiling on random games.

    Reports both conventions of the spec: published (v1 val: terminal PAD slot included, argmax
    over all 1,980 tokens, mean of per-batch means) and moves-only (terminal slot excluded, argmax
    over the 1,968 actions, position-weighted). With --pgn, top-1/top-5/legal rate on human moves
    by Elo band.
    """
    import time

    from pawn.progress import output_console

    try:
        edges = tuple(int(x) for x in elo_edges.split(","))
    except ValueError:
        raise _fail(f"--elo-edges must be comma-separated integers, got {elo_edges!r}")
    if pgn is not None and not pgn.is_file():
        raise _fail(f"PGN file not found: {pgn}")
    if pgn is not None and max_ply is not None and pgn_min_ply > max_ply:
        raise _fail(f"--pgn-min-ply ({pgn_min_ply}) exceeds --max-ply ({max_ply}); lower it to at most {max_ply}", 2)
    _check_outputs(json=json_out)
    _heartbeat("pawn eval")
    models = _load(checkpoint, variant)
    console = output_console()
    record: dict = {"checkpoint": checkpoint, "settings": {}, "models": []}
    t0 = time.perf_counter()
    game_cache: dict[int, object] = {}
    done: list[str] = []
    try:
        for lm in models:
            layout = _layout(prepend_outcome, lm)
            plies, source = _eval_max_ply(max_ply, lm, layout)
            if pgn is not None and pgn_min_ply > plies:
                raise _fail(f"--pgn-min-ply ({pgn_min_ply}) exceeds the max_ply in use ({plies}, {source}); lower it or set --max-ply", 2)
            console.print(f"{lm.name}: max_ply {plies} ({source})")
            _eval_one(lm, layout, plies, source, games=games, seed=seed, batch_size=batch_size, late_ply=late_ply, pgn=pgn,
                      edges=edges, pgn_games_per_band=pgn_games_per_band, pgn_min_ply=pgn_min_ply, dtype=dtype,
                      game_cache=game_cache, record=record, console=console)
            done.append(lm.name)
    except KeyboardInterrupt:
        _interrupted(done, [lm.name for lm in models], json_out, record)
    record["settings"] = {"games": games, "seed": seed, "max_ply": max_ply, "batch_size": batch_size, "late_ply": late_ply,
                          "dtype": dtype, "variant": variant, "pgn": None if pgn is None else str(pgn), "elo_edges": list(edges),
                          "pgn_games_per_band": pgn_games_per_band, "pgn_min_ply": pgn_min_ply, "wall_s": time.perf_counter() - t0}
    _write_json(json_out, record)


def _layout(flag: Optional[bool], lm):
    """The :class:`pawn.data.layout.Layout` a command uses for loaded model ``lm``: the flag,
    else the layout its checkpoint records, else pure moves."""
    from pawn.data.layout import Layout

    return Layout.resolve(flag, lm.layout)


def _eval_max_ply(max_ply: Optional[int], lm, layout) -> tuple[int, str]:
    """The ply cap ``pawn eval`` uses for one model and where it comes from (for the report)."""
    if max_ply is not None:
        return max_ply, "--max-ply"
    if lm.trained_seq_len is not None:
        plies = max(1, layout.max_ply(min(lm.trained_seq_len, lm.config.max_seq_len)))
        return plies, f"the checkpoint's trained context, seq_len {lm.trained_seq_len}"
    return 512, "default: the checkpoint records no training context"


def _interrupted(done: list[str], names: list[str], json_out: Optional[Path], record: dict) -> None:
    """Ctrl-C in eval/probe: say what was kept (the finished models' results, if --json), exit 130."""
    left = [n for n in names if n not in done]
    if done and json_out is not None:
        record["interrupted"] = {"finished": done, "not_run_or_unfinished": left}
        _write_json(json_out, record)
        raise _fail(f"interrupted; kept the results of {', '.join(done)} in {json_out} (not finished: {', '.join(left)})", 130)
    kept = f"finished {', '.join(done)} (printed above; no --json given)" if done else "nothing was finished"
    raise _fail(f"interrupted; {kept}; nothing written", 130)


def _eval_one(lm, layout, max_ply, source, *, games, seed, batch_size, late_ply, pgn, edges, pgn_games_per_band, pgn_min_ply,
              dtype, game_cache, record, console) -> None:
    """Evaluate one loaded model for ``pawn eval``: append its record and print its tables."""
    import time

    from rich.table import Table

    from pawn.engine import random_games
    from pawn.evaluate.accuracy import evaluate_games, evaluate_pgn

    seq_len = min(lm.config.max_seq_len, layout.seq_len(max_ply))
    if max_ply not in game_cache:
        game_cache[max_ply] = random_games(games, max_ply, seed)
    g = game_cache[max_ply]
    t = time.perf_counter()
    try:
        lichess = None
        if pgn is not None:  # first: an unusable file fails before the long random-game pass
            lichess = evaluate_pgn(lm.model, str(pgn), seq_len=seq_len, elo_edges=edges, max_games_per_band=pgn_games_per_band,
                                   min_ply=pgn_min_ply, prepend_outcome=layout.prepend_outcome, batch_size=min(batch_size, 64), dtype=dtype)
        rep = evaluate_games(lm.model, g.tokens, g.lengths, g.outcome, seq_len=seq_len, batch_size=batch_size,
                             prepend_outcome=layout.prepend_outcome, dtype=dtype, late_ply=late_ply)
    except ValueError as e:
        raise _fail(str(e))
    wall = time.perf_counter() - t
    d = rep.to_dict()
    d["settings"].update(games=games, seed=seed, max_ply=max_ply, max_ply_source=source)
    rec = {"name": lm.name, "model_config": lm.config.to_json_dict(), "prepend_outcome": layout.prepend_outcome,
           "random_games": d, "eval_wall_s": wall}
    if lichess is not None:
        rec["lichess"] = lichess
    record["models"].append(rec)

    tab = Table(title=f"{lm.name}: {games} random games, seed {seed}, max_ply {max_ply}, seq_len {seq_len}"
                f"{' (outcome prefix)' if layout.prepend_outcome else ''}")
    tab.add_column("Metric")
    tab.add_column("Published (v1)", justify="right")
    tab.add_column("Moves-only", justify="right")
    tab.add_row("Loss (nats)", f"{rep.loss:.4f}", f"{rep.moves_only_loss:.4f}")
    tab.add_row("Perplexity", f"{rep.perplexity:.2f}", "")
    tab.add_row("Top-1", _pct(rep.top1), _pct(rep.moves_only_top1))
    tab.add_row("Top-5", _pct(rep.top5), _pct(rep.moves_only_top5))
    tab.add_row("Top-1 / ceiling", _pct(rep.top1_over_ceiling), _pct(rep.moves_only_top1_over_ceiling))
    tab.add_row("Ceiling E[1/N_legal]", _pct(rep.ceiling), _pct(rep.ceiling_moves_only))
    tab.add_row("Legal move rate", _pct(rep.legal_rate), _pct(rep.moves_only_legal_rate))
    tab.add_row(f"Late legal rate (pos ≥ {rep.late_ply})", _pct(rep.late_legal_rate), "")
    tab.add_row("Illegal prediction rate", _pct(rep.illegal_pred_rate), "")
    tab.add_row("Illegal probability mass", _pct(rep.illegal_prob_mass), "")
    tab.add_row("Game completion (teacher-forced)", _pct(rep.completion_rate), "")
    tab.add_row("Avg plies completed", f"{rep.avg_plies_completed:.1f}", "")
    tab.add_row("Avg % of game completed", _pct(rep.avg_pct_completion), "")
    tab.add_row("Forfeit ply min / median / max", f"{rep.min_forfeit_ply} / {rep.median_forfeit_ply} / {rep.max_forfeit_ply}", "")
    tab.add_row("Positions", f"{rep.n_positions}", f"{rep.n_move_positions}")
    console.print(tab)
    if lichess is not None:
        lt = Table(title=f"{lm.name}: Lichess {pgn.name} (parsed {lichess['parser'].get('kept', 0)} of "
                   f"{lichess['parser'].get('read', 0)}, {lichess['n_out_of_band']} outside the bands)")
        for c in ("Elo band", "Games", "Positions", "Loss", "Top-1", "Top-5", "Legal rate"):
            lt.add_column(c, justify="right")
        for key, b in lichess["bands"].items():
            lt.add_row(key, str(b["n_games"]), str(b["n_positions"]), _num(b["loss"]), _pct(b["top1"]),
                       _pct(b["top5"]), _pct(b["legal_rate"]))
        console.print(lt)


class _Progress:
    """Progress of a long command on stderr: a rich bar with elapsed time and ETA on a terminal,
    else one plain line at most every ``interval`` seconds (and at each task's end)."""

    def __init__(self, interval: float = 10.0):
        from pawn.progress import output_console

        self.console = output_console(stderr=True)
        self.interval = interval
        self.bar = None

    def __enter__(self) -> "_Progress":
        if self.console.is_terminal:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                                TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), TextColumn("{task.fields[msg]}"),
                                console=self.console)
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def task(self, name: str, total: float):
        """A callback ``(done, total, message)`` for one unit of work named ``name``."""
        import time

        if self.bar is not None:
            tid = self.bar.add_task(name, total=total, msg="")
            return lambda done, tot, msg: self.bar.update(tid, completed=done, total=tot, msg=msg)
        t0 = time.perf_counter()
        last = [t0]

        def plain(done: float, tot: float, msg: str) -> None:
            now = time.perf_counter()
            if now - last[0] < self.interval and done < tot:
                return
            last[0] = now
            el = now - t0
            eta = el / done * (tot - done) if done > 0 else float("nan")

            def hms(x: float) -> str:
                return "?" if x != x else f"{int(x) // 3600}:{int(x) % 3600 // 60:02d}:{int(x) % 60:02d}"

            self.console.print(f"{name}: {100 * done / tot:.0f}% elapsed {hms(el)} ETA {hms(eta)} {msg}", highlight=False)

        return plain


def _config_defaults(ctx: typer.Context, param: typer.CallbackParam, value: Optional[Path]) -> Optional[Path]:
    """Eager ``--config FILE`` callback: the file's fields become the command's defaults, below
    the command line and the PAWN_* environment variables (Click's own precedence)."""
    if value is None:
        return value
    from pawn.settings import ConfigFileError, read_config_file

    try:
        data = read_config_file(value)
    except ConfigFileError as e:
        raise typer.BadParameter(str(e))
    known = {p.name for p in ctx.command.params} - {"config", "checkpoint"}
    unknown = sorted(set(data) - known)
    if unknown:
        raise typer.BadParameter(f"{value}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    ctx.default_map = {**(ctx.default_map or {}), **data}
    return value


def _probe_env(name: str) -> str:
    return f"PAWN_PROBE_{name.upper()}"


@app.command("probe")
def probe_cmd(
    checkpoint: Annotated[str, typer.Argument(help="v2 checkpoint directory (a supernet probes every nested variant) or a Hub id.")],
    config: Annotated[Optional[Path], typer.Option("--config", is_eager=True, callback=_config_defaults, show_default=False,
                                                   help="JSON or TOML file of option values by name (games, val_games, max_ply, weight_decay, ...); precedence: command line > PAWN_PROBE_* environment > file > defaults.")] = None,
    games: Annotated[int, typer.Option("--games", min=1, envvar=_probe_env("games"), help="Training games (seed).")] = 4096,
    val_games: Annotated[Optional[int], typer.Option("--val-games", min=1, envvar=_probe_env("val_games"), show_default=False,
                                                     help="Validation games (seed + 1). Default: --games / 4, i.e. 1,024 for the default 4,096 (the spec's 4:1 split).")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, envvar=_probe_env("seed"), help="Training-corpus seed; validation uses seed + 1, probe init seed + 7.")] = 12345,
    max_ply: Annotated[Optional[int], typer.Option("--max-ply", min=1, envvar=_probe_env("max_ply"), show_default=False,
                                                   help="Ply cap of the probe games. Default (v2): min(context, 256), the context being the checkpoint's trained seq_len when it records one. The v1 per-run probe script used the full context (--max-ply 512 for the published models); which of 256 or 512 produced the published v1.0.0 table is not recorded.")] = None,
    epochs: Annotated[int, typer.Option("--epochs", min=0, envvar=_probe_env("epochs"), help="Training epochs.")] = 20,
    lr: Annotated[float, typer.Option("--lr", envvar=_probe_env("lr"), help="AdamW learning rate.")] = 1e-3,
    weight_decay: Annotated[float, typer.Option("--weight-decay", min=0.0, envvar=_probe_env("weight_decay"),
                                                help="AdamW weight decay. 1e-4 = the v2 default (optax); 0.01 = v1 (torch AdamW default), the setting of the published v1.0.0 probe table (use --weight-decay 0.01 --max-ply 512 to reproduce its v1 probe-script settings).")] = 1e-4,
    feature_cache_gb: Annotated[Optional[float], typer.Option("--feature-cache-gb", min=0.0, envvar=_probe_env("feature_cache_gb"), show_default=False,
                                                              help="Cache at most this many GiB of hidden states (validation set first); a set that does not fit is recomputed every epoch (same numbers, slower). Default: half the accelerator's memory, or 30% of available host memory on CPU.")] = None,
    probe: Annotated[Optional[list[str]], typer.Option("--probe", help="Probe to run (repeatable; default all nine).")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Draw accuracy (R² for regression) by layer to this PNG (needs matplotlib).")] = None,
    variant: VariantOpt = None,
    dtype: DtypeOpt = None,
    prepend_outcome: PrefixOpt = None,
    json_out: JsonOpt = None,
) -> None:
    """Train the nine linear probes of the spec on the embedding output and every layer; report the
    best layer per probe (accuracy, or R² and MAE) and the whole per-layer table in --json.

    Defaults are v2's (spec §2.4): 4,096/1,024 games, 20 epochs, lr 1e-3, weight decay 1e-4,
    max_ply min(context, 256). The published v1.0.0 probe table used weight decay 0.01 (see
    --weight-decay and --max-ply). The frozen backbone's hidden states are computed once per
    corpus; progress with ETA goes to stderr."""
    import time

    from pawn.progress import output_console
    from rich.table import Table

    from pawn.evaluate.probes import PROBES, REGRESSION, ProbeConfig, plot_probes, run_probes

    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise _fail("--plot needs matplotlib: pip install 'pawn[plot]' (or pip install matplotlib)")
    names = tuple(probe) if probe else tuple(PROBES)
    bad = sorted(set(names) - set(PROBES))
    if bad:
        raise _fail(f"unknown probe(s) {bad}; choose from {', '.join(PROBES)}")
    _check_outputs(json=json_out, plot=plot)
    _heartbeat("pawn probe")
    models = _load(checkpoint, variant)
    console = output_console()
    record: dict = {"checkpoint": checkpoint, "models": []}
    done: list[str] = []
    try:
        with _Progress() as prog:
            for lm in models:
                layout = _layout(prepend_outcome, lm)
                plies, source = max_ply, "--max-ply"
                if plies is None:
                    ctx = min(lm.trained_seq_len or lm.config.max_seq_len, lm.config.max_seq_len)
                    plies = max(1, min(layout.max_ply(ctx), 256))
                    source = f"min(trained context {ctx}, 256)" if lm.trained_seq_len else f"min(model context {ctx}, 256)"
                cfg = ProbeConfig(n_train_games=games, n_val_games=val_games, max_ply=plies, seed=seed, n_epochs=epochs, lr=lr,
                                  weight_decay=weight_decay, prepend_outcome=layout.prepend_outcome, probes=names, dtype=dtype,
                                  feature_cache_gb=feature_cache_gb)
                console.print(f"{lm.name}: {games}/{cfg.val_games} games, max_ply {plies} ({source}), weight decay {weight_decay:g}, "
                              f"{epochs} epochs", highlight=False)
                t0 = time.perf_counter()
                res = run_probes(lm.model, cfg, progress=prog.task(lm.name, epochs + 1))
                res["settings"]["max_ply_source"] = source
                record["models"].append({"name": lm.name, "model_config": lm.config.to_json_dict(), **res,
                                         "wall_s": time.perf_counter() - t0})
                cached = res["settings"]["features_cached"]
                tab = Table(title=f"{lm.name}: linear probes ({games}/{cfg.val_games} games, {epochs} epochs, max_ply {plies}, "
                                  f"weight decay {weight_decay:g})")
                for c in ("Probe", "Best layer", "Best"):
                    tab.add_column(c, justify="right" if c == "Best" else "left")
                for k, b in res["best"].items():
                    val = f"R² {b['best_accuracy']:.2f} (MAE {b['mae']:.1f})" if k in REGRESSION else f"{100 * b['best_accuracy']:.1f}%"
                    tab.add_row(k, b["layer"], val)
                console.print(tab)
                if not (cached["train"] and cached["val"]):
                    console.print(f"  note: hidden states recomputed every epoch for {', '.join(s for s in ('train', 'val') if not cached[s])} "
                                  "(over --feature-cache-gb)")
                if plot is not None:
                    target = plot if len(models) == 1 else plot.with_name(f"{plot.stem}_{lm.name.replace('/', '_')}{plot.suffix}")
                    plot_probes(res, str(target), title=f"{lm.name} linear probes")
                    typer.echo(f"wrote {target}")
                done.append(lm.name)
    except KeyboardInterrupt:
        _interrupted(done, [lm.name for lm in models], json_out, record)
    _write_json(json_out, record)


@app.command("generate")
def generate_cmd(
    checkpoint: Annotated[Optional[str], typer.Option("--checkpoint", help="Sample games from this checkpoint (v2 directory or Hub id).")] = None,
    random: Annotated[bool, typer.Option("--random", help="Uniformly random games from the engine instead of a model.")] = False,
    games: GamesOpt = 64,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Sampling seed (or random-game seed with --random).")] = 0,
    max_ply: Annotated[Optional[int], typer.Option("--max-ply", min=1, help="Ply cap (default: the model context, 512 with --random).")] = None,
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature (> 0).")] = 1.0,
    top_k: Annotated[Optional[int], typer.Option("--top-k", min=1, help="Sample only among the k most likely tokens.")] = None,
    mask_illegal: Annotated[bool, typer.Option("--mask-illegal/--no-mask-illegal", help="Restrict sampling to legal moves.")] = False,
    outcome: Annotated[Optional[str], typer.Option("--outcome", help="Condition on this outcome token name (e.g. WHITE_CHECKMATES); only for models trained with the outcome prefix.")] = None,
    prefix: Annotated[Optional[str], typer.Option("--prefix", help="Start every game from these UCI moves (space-separated) or from the first game of a PGN file.")] = None,
    kv_cache: Annotated[bool, typer.Option("--kv-cache/--no-kv-cache", help="Decode with the KV cache (default) or recompute the full forward each step.")] = True,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="Games per batch.")] = 64,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write the games to this parquet file (tokens, UCI, SAN, length, termination, outcome).")] = None,
    pgn_out: Annotated[Optional[Path], typer.Option("--pgn-out", help="Also write the games as PGN.")] = None,
    diagnostics: Annotated[bool, typer.Option("--diagnostics", help="Run the five outcome-conditioned tests and the edge-case diagnostics.")] = False,
    edge_positions: Annotated[int, typer.Option("--edge-positions", min=1, help="Positions per edge-case category (spec: 10,000).")] = 10_000,
    outcome_prefix_trained: PrefixOpt = None,
    variant: VariantOpt = None,
    dtype: DtypeOpt = None,
    json_out: JsonOpt = None,
) -> None:
    """Generate games from a checkpoint (autoregressive, Gumbel-max sampling, KV cache) or --random
    games from the engine; report the autoregressive completion (forfeit) rate and where forfeits
    happen; write parquet (--out) and PGN (--pgn-out)."""
    import numpy as np
    from pawn.progress import output_console

    from pawn.evaluate.generation import analyze, autoregressive_generate, games_table, write_games
    from pawn.vocab import OUTCOME_NAMES, OUTCOME_TOKEN_BASE

    if (checkpoint is None) == (not random):
        raise _fail("give exactly one of --checkpoint CKPT or --random")
    if not temperature > 0:
        raise _fail(f"--temperature must be > 0, got {temperature}")
    _check_outputs(json=json_out, out=out, pgn_out=pgn_out)
    _heartbeat("pawn generate")
    console = output_console()
    record: dict = {"settings": {"checkpoint": checkpoint, "random": random, "games": games, "seed": seed, "max_ply": max_ply,
                                 "temperature": temperature, "top_k": top_k, "mask_illegal": mask_illegal, "outcome": outcome,
                                 "prefix": prefix, "kv_cache": kv_cache, "batch_size": batch_size}, "models": []}
    if random:
        from pawn.engine import random_games

        g = random_games(games, max_ply or 512, seed)
        table = games_table(g.tokens, g.lengths, g.termination)
        write_games(table, out, pgn_out, event="PAWN random games")
        record["random_games"] = {"n_games": games, "mean_game_length": float(g.lengths.mean()),
                                  "termination_counts": {str(k): int(v) for k, v in zip(*np.unique(table.column("termination_name").to_numpy(zero_copy_only=False), return_counts=True))}}
        console.print(f"{games} random games, mean length {g.lengths.mean():.1f} plies")
        for p in (out, pgn_out):
            if p is not None:
                typer.echo(f"wrote {p}")
        _write_json(json_out, record)
        return
    token = None
    if outcome is not None:
        if outcome not in OUTCOME_NAMES:
            raise _fail(f"unknown outcome {outcome!r}; choose from {', '.join(OUTCOME_NAMES)}")
        token = OUTCOME_TOKEN_BASE + OUTCOME_NAMES.index(outcome)
    pre_moves = pre_len = None
    if prefix is not None:
        from pawn.engine import parse_pgn, uci_to_tokens

        try:
            if Path(prefix).is_file():
                pg = parse_pgn(prefix, max_ply=512, min_ply=1)
                if len(pg) == 0:
                    raise ValueError(f"no readable game in {prefix}")
                t1, l1 = pg.tokens[:1], pg.lengths[:1]
            else:
                t1, l1 = uci_to_tokens([prefix.split()], 512)
        except ValueError as e:
            raise _fail(f"bad --prefix: {e}")
        pre_moves, pre_len = np.repeat(t1, games, 0), np.repeat(l1, games, 0)
    from pawn.data.layout import Layout

    models = _load(checkpoint, variant)
    for lm in models:
        trained = _layout(outcome_prefix_trained, lm).prepend_outcome
        conditioned = Layout.of(token is not None)  # the outcome slot is used only when conditioning
        T = lm.config.max_seq_len if max_ply is None else min(lm.config.max_seq_len, conditioned.seq_len(max_ply))
        try:
            res = autoregressive_generate(lm.model, games, outcome_token=token, prefix_moves=pre_moves, prefix_lengths=pre_len,
                                          max_seq_len=T, temperature=temperature, top_k=top_k, mask_illegal=mask_illegal,
                                          batch_size=batch_size, seed=seed, use_kv_cache=kv_cache, dtype=dtype)
        except ValueError as e:
            raise _fail(str(e))
        stats = analyze(res, outcome)
        rec = {"name": lm.name, "model_config": lm.config.to_json_dict(), "generation": stats}
        console.print(f"[bold]{lm.name}[/bold]: {games} games, mean length {stats['mean_game_length']:.1f}, "
                      f"forfeit rate {100 * stats['forfeit_rate']:.2f}% ({'masked' if mask_illegal else 'unmasked'}), "
                      f"AR completion {100 * (1 - stats['forfeit_rate'] - stats['premature_padding_rate']):.2f}%")
        console.print(f"  outcomes: {stats['outcome_distribution']}")
        console.print(f"  forfeit plies: {stats['forfeit_plies']}")
        if out is not None or pgn_out is not None:
            table = games_table(res.moves, res.game_lengths, res.term_codes, {"forfeit_ply": res.forfeit_ply.tolist()})
            suffix = "" if len(models) == 1 else "_" + lm.name.replace("/", "_")
            o = None if out is None else out.with_name(out.stem + suffix + out.suffix)
            p = None if pgn_out is None else pgn_out.with_name(pgn_out.stem + suffix + pgn_out.suffix)
            write_games(table, o, p, event=f"PAWN {lm.name}")
            for f in (o, p):
                if f is not None:
                    typer.echo(f"wrote {f}")
        if diagnostics:
            from pawn.evaluate.diagnostics import edge_case_diagnostics, run_outcome_tests

            rec["outcome_tests"] = run_outcome_tests(lm.model, outcome_prefix_trained=trained, seed=seed, batch_size=min(batch_size, 32),
                                                     use_kv_cache=kv_cache, dtype=dtype)
            for t, r in rec["outcome_tests"].items():
                if "_skipped" in r:
                    console.print(f"  {t}: skipped — {r['_skipped']}")
            rec["edge_cases"] = edge_case_diagnostics(lm.model, n_per_category=edge_positions, prepend_outcome=trained, dtype=dtype)
            for c, r in rec["edge_cases"].items():
                what = f"P(PAD) {100 * r['mean_pad_prob']:.1f}%" if r["terminal"] else f"legal {100 * r['mean_legal_rate']:.1f}%"
                console.print(f"  edge {c}: {what} over {r['n_positions']} positions")
        record["models"].append(rec)
    _write_json(json_out, record)


# ============================================================================ bench
from pawn.cli_bench import bench_cmd  # noqa: E402

app.command("bench")(bench_cmd)


from pawn.cli_play import play_cmd  # noqa: E402
app.command("play")(play_cmd)


def _reflow(doc: str) -> str:
    """Join a docstring's hard-wrapped lines into one line per paragraph: Typer's rich help keeps
    single newlines, which broke the command list and the help texts in mid-sentence."""
    import inspect

    return "\n\n".join(" ".join(par.split()) for par in inspect.cleandoc(doc).split("\n\n"))


from pawn.cli_data import data_app  # noqa: E402
app.add_typer(data_app, name="data")

for _info in app.registered_commands:
    _info.help = _reflow(_info.help or _info.callback.__doc__ or "")


def run() -> None:
    """The ``pawn`` console script: :data:`app`, except that an interrupted run (exit code 130)
    leaves at once with ``os._exit`` once its message is flushed. A Ctrl-C that lands while XLA
    is compiling leaves native compiler threads running, and tearing the interpreter down under
    them crashed the process (SIGSEGV) after the message; nothing remains to be written then."""
    import os
    import sys

    try:
        app()
    except SystemExit as e:
        if e.code == 130:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        raise


if __name__ == "__main__":
    run()
