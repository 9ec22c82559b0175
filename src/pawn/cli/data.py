"""``pawn data``: inspect a Lichess game source and export PGN games to parquet (spec §6). Errors
(:class:`pawn.errors.PawnError`) are reported by the one error map of :mod:`pawn.cli._errors`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

data_app = typer.Typer(help="Lichess game data: inspect a source, export PGN games to parquet.", no_args_is_help=True)

EloMin = Annotated[Optional[int], typer.Option("--elo-min", help="Both players' Elo ≥ this.")]
EloMax = Annotated[Optional[int], typer.Option("--elo-max", help="Both players' Elo < this (half-open band).")]
MinPly = Annotated[int, typer.Option("--min-ply", min=0, help="Drop games shorter than this (no filter when ≤ 1).")]
MaxGames = Annotated[Optional[int], typer.Option("--max-games", min=1, help="Keep at most this many games.")]


def _filters(elo_min, elo_max, min_ply, max_games):
    from pawn.data.lichess import LichessFilters

    return LichessFilters(elo_min, elo_max, min_ply, max_games)


@data_app.command("export")
def export_cmd(src: Annotated[str, typer.Argument(help="PGN file or folder of .pgn files.")],
               out: Annotated[Path, typer.Option("--out", help="Parquet file to write (pawn-lichess-full schema).")],
               elo_min: EloMin = None, elo_max: EloMax = None, min_ply: MinPly = 10, max_games: MaxGames = None) -> None:
    """Write the PGN games that pass the filters to one parquet file in the pawn-lichess-full schema."""
    from pawn.data.lichess_export import export_parquet

    stats = export_parquet(src, out, _filters(elo_min, elo_max, min_ply, max_games))
    typer.echo(f"wrote {out}: {stats.kept} games ({stats.explain()})")


@data_app.command("info", help="Games read, kept and dropped by reason, Elo and ply ranges, the train/val split "
                  "and the cache (built when absent, so a later run with the same filters parses nothing).")
def info_cmd(src: Annotated[str, typer.Argument(help="PGN (.pgn, .pgn.zst, .pgn.gz, .pgn.bz2) or parquet file or folder, or a Hub dataset id.")],
             split: Annotated[str, typer.Option("--split", help="Training split (Hub and split parquet folders).")] = "train",
             val_games: Annotated[int, typer.Option("--val-games", min=0, help="Validation games bound.")] = 50_000,
             elo_min: EloMin = None, elo_max: EloMax = None, min_ply: MinPly = 10, max_games: MaxGames = None,
             cache_dir: Annotated[Optional[Path], typer.Option(
                 "--cache-dir", help="Game cache folder (default: $PAWN_DATA_CACHE, else "
                 "$HF_HOME/pawn-lichess-cache, else ~/.cache/huggingface/pawn-lichess-cache).")] = None) -> None:
    """Print what a source holds after the filters (see the command help)."""
    from rich.console import Console
    from rich.table import Table

    from pawn.data.lichess import DROP_REASONS, load_corpus

    corpus = load_corpus(src, _filters(elo_min, elo_max, min_ply, max_games), split=split, val_games=val_games,
                         cache_dir=cache_dir)
    table = Table(title=f"{corpus.source.kind} source {corpus.source.repo_or_path}")
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for info in corpus.caches:
        s = info.stats
        table.add_row(f"{info.split} split: games read / kept", f"{s.read:,} / {s.kept:,}")
        for reason, n in sorted(s.dropped.items(), key=lambda kv: -kv[1]):
            table.add_row(f"  dropped: {reason}", f"{n:,} ({DROP_REASONS.get(reason, reason)})")
        for i, line in enumerate(s.skipped_lines()):
            table.add_row("  skipped games" if i == 0 else "", line)
        table.add_row("  Elo range (kept)", "-" if s.elo_range is None else f"{s.elo_range[0]}–{s.elo_range[1]}")
        table.add_row("  plies (kept)", "-" if s.ply_range is None else f"{s.ply_range[0]}–{s.ply_range[1]}")
        table.add_row("  cache", f"{info.state}: {info.path}")
    lengths = corpus.train.lengths
    table.add_row("train games / plies", f"{len(corpus.train):,} / {int(lengths.sum()):,} (mean {lengths.mean():.1f})")
    table.add_row("val games", f"{len(corpus.val):,} (from the {corpus.val_from})")
    Console().print(table)
