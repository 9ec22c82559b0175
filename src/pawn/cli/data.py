"""``pawn data``: download Lichess months, inspect a game source and export PGN games to parquet. Errors
(:class:`pawn.errors.PawnError`) are reported by the one error map of :mod:`pawn.cli._errors`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

data_app = typer.Typer(help="Lichess game data: download months, inspect a source, export PGN games to parquet.",
                       no_args_is_help=True)

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
    typer.echo(f"wrote {out}: {stats.kept:,} games ({stats.explain()})")


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


@data_app.command("fetch", help="Download Lichess's rated standard games of one or more months "
                  "(https://database.lichess.org, CC0) into a folder that --data reads: a progress bar, a cut "
                  "connection resumed with HTTP range requests (a later run continues a NAME.pgn.zst.part file), and "
                  "each file checked against Lichess's published SHA-256 sums before it gets its name. With "
                  "--elo-min/--elo-max/--max-games the games are filtered while they stream in and only the kept "
                  "ones are written, as a smaller .pgn.zst.")
def fetch_cmd(months: Annotated[list[str], typer.Argument(
                  help="Months: YYYY-MM, or a range YYYY-MM..YYYY-MM (2013-01 is the smallest, 17.8 MB).")],
              out: Annotated[Path, typer.Option("--out", help="Folder to download into (created).")] = Path("lichess"),
              elo_min: EloMin = None, elo_max: EloMax = None,
              max_games: Annotated[Optional[int], typer.Option(
                  "--max-games", min=1, help="Keep at most this many games per month (stops the download there).")] = None,
              base_url: Annotated[Optional[str], typer.Option(
                  "--base-url", envvar="PAWN_LICHESS_URL", show_envvar=False,
                  help="Folder URL of the month files and sha256sums.txt (a mirror). "
                  "Env: PAWN_LICHESS_URL. Default: https://database.lichess.org/standard/")] = None,
              retries: Annotated[int, typer.Option("--retries", min=0, help="Reconnections in a row after a cut.")] = 5,
              timeout_s: Annotated[float, typer.Option("--timeout-s", min=1, help="Seconds a connection may stay silent.")] = 60.0,
              ) -> None:
    """Download Lichess months (see the command help)."""
    from pawn.data.lichess_fetch import fetch_months, parse_months

    filters = None
    if elo_min is not None or elo_max is not None or max_games is not None:
        filters = _filters(elo_min, elo_max, 0, max_games)
    for result in fetch_months(parse_months(months), out, filters=filters, url=base_url, retries=retries,
                               timeout_s=timeout_s):
        typer.echo(result.line())
