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


# ============================================================================ eval / probe / generate
PUBLISHED_VAL_SEED = 2**63 - 1
"""Seed of the published 2,048-game validation set (spec eval §1.1)."""

GamesOpt = Annotated[int, typer.Option("--games", min=1, help="Number of games.")]
JsonOpt = Annotated[Optional[Path], typer.Option("--json", help="Write every figure and the exact settings to this JSON file.")]
VariantOpt = Annotated[Optional[str], typer.Option("--variant", help="For a supernet checkpoint: evaluate only this nested variant (default: all).")]
DtypeOpt = Annotated[Optional[str], typer.Option("--dtype", help="Compute dtype (float32, bfloat16). Default: float32 on CPU, bfloat16 on accelerators.")]
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

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_json_safe(data), indent=2) + "\n", encoding="utf-8")
    typer.echo(f"wrote {path}")


def _load(checkpoint: str, variant: Optional[str]):
    """Load models for a command; every loading problem becomes a one-line error."""
    from pawn.checkpoint import CheckpointError
    from pawn.convert import ConversionError
    from pawn.evaluate.loading import load_models

    try:
        return load_models(checkpoint, variant)
    except (CheckpointError, ConversionError, FileNotFoundError, ValueError) as e:
        raise _fail(str(e))


def _pct(x) -> str:
    return "—" if x is None or x != x else f"{100 * x:.4f}%"


@app.command("eval")
def eval_cmd(
    checkpoint: Annotated[str, typer.Argument(help="v2 checkpoint directory (a supernet evaluates every nested variant) or a Hub id (converted on the fly).")],
    games: GamesOpt = 2048,
    seed: Annotated[int, typer.Option("--seed", min=0, max=2**64 - 1, help="Random-game seed; default is the published validation seed 2^63 − 1.")] = PUBLISHED_VAL_SEED,
    max_ply: Annotated[int, typer.Option("--max-ply", min=1, help="Ply cap of the random games; the sequence length is max_ply (+1 with the outcome prefix), capped at the model context.")] = 512,
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

    from rich.console import Console
    from rich.table import Table

    from pawn.engine import random_games
    from pawn.evaluate.accuracy import evaluate_games, evaluate_pgn

    try:
        edges = tuple(int(x) for x in elo_edges.split(","))
    except ValueError:
        raise _fail(f"--elo-edges must be comma-separated integers, got {elo_edges!r}")
    if pgn is not None and not pgn.is_file():
        raise _fail(f"PGN file not found: {pgn}")
    models = _load(checkpoint, variant)
    console = Console()
    record: dict = {"checkpoint": checkpoint, "settings": {}, "models": []}
    t0 = time.perf_counter()
    game_cache: dict[int, object] = {}
    for lm in models:
        layout = bool(prepend_outcome if prepend_outcome is not None else (lm.prepend_outcome or False))
        seq_len = min(lm.config.max_seq_len, max_ply + int(layout))
        if max_ply not in game_cache:
            game_cache[max_ply] = random_games(games, max_ply, seed)
        g = game_cache[max_ply]
        t = time.perf_counter()
        try:
            rep = evaluate_games(lm.model, g.tokens, g.lengths, g.outcome, seq_len=seq_len, batch_size=batch_size,
                                 prepend_outcome=layout, dtype=dtype, late_ply=late_ply)
            lichess = None
            if pgn is not None:
                lichess = evaluate_pgn(lm.model, str(pgn), seq_len=seq_len, elo_edges=edges, max_games_per_band=pgn_games_per_band,
                                       min_ply=pgn_min_ply, prepend_outcome=layout, batch_size=min(batch_size, 64), dtype=dtype)
        except ValueError as e:
            raise _fail(str(e))
        wall = time.perf_counter() - t
        d = rep.to_dict()
        d["settings"].update(games=games, seed=seed, max_ply=max_ply)
        rec = {"name": lm.name, "model_config": lm.config.to_json_dict(), "prepend_outcome": layout,
               "random_games": d, "eval_wall_s": wall}
        if lichess is not None:
            rec["lichess"] = lichess
        record["models"].append(rec)

        tab = Table(title=f"{lm.name}: {games} random games, seed {seed}, max_ply {max_ply}, seq_len {seq_len}"
                    f"{' (outcome prefix)' if layout else ''}")
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
                lt.add_row(key, str(b["n_games"]), str(b["n_positions"]), f"{b['loss']:.4f}", _pct(b["top1"]),
                           _pct(b["top5"]), _pct(b["legal_rate"]))
            console.print(lt)
    record["settings"] = {"games": games, "seed": seed, "max_ply": max_ply, "batch_size": batch_size, "late_ply": late_ply,
                          "dtype": dtype, "variant": variant, "pgn": None if pgn is None else str(pgn), "elo_edges": list(edges),
                          "pgn_games_per_band": pgn_games_per_band, "pgn_min_ply": pgn_min_ply, "wall_s": time.perf_counter() - t0}
    _write_json(json_out, record)
