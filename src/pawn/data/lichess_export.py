"""PGN games → parquet in the ``pawn-lichess-full`` schema (spec ``training-and-adapters.md`` §6),
so datasets can be built from any PGN and inspected with pyarrow/polars.

Columns filled from the engine's PGN parser: ``tokens`` (pure moves, ≤ 512), ``san``, ``uci``,
``clock`` (seconds left per ply, 0 = no ``[%clk]``), ``game_length``, ``outcome_token``, ``result``,
``white_elo``/``black_elo`` (null when the tag is missing), ``eco``, ``opening``, ``time_control``,
``termination``, ``date`` (UTCDate + UTCTime, else Date, as UTC milliseconds; null when unknown) and
``site``. Always null: ``white_player``/``black_player`` (the dataset's xxHash64 of the username;
PAWN has no xxHash dependency) and ``white_rating_diff``/``black_rating_diff`` (the parser does not
return those tags).
"""

from __future__ import annotations

import os

import numpy as np

from pawn.data.lichess import LichessFilters, ScanStats, Source, describe_filters, open_source, scan
from pawn.engine.pgn import CLOCK_MISSING
from pawn.errors import DataError
from pawn.fileio import atomic_output, check_output_file


def lichess_schema():
    """The ``pawn-lichess-full`` pyarrow schema (spec §6 column list and types)."""
    import pyarrow as pa

    return pa.schema([
        ("tokens", pa.list_(pa.int16())), ("san", pa.list_(pa.string())), ("uci", pa.list_(pa.string())),
        ("clock", pa.list_(pa.uint16())), ("game_length", pa.uint16()), ("outcome_token", pa.uint16()),
        ("result", pa.string()), ("white_player", pa.uint64()), ("black_player", pa.uint64()),
        ("white_elo", pa.uint16()), ("black_elo", pa.uint16()), ("white_rating_diff", pa.int16()),
        ("black_rating_diff", pa.int16()), ("eco", pa.string()), ("opening", pa.string()),
        ("time_control", pa.string()), ("termination", pa.string()), ("date", pa.timestamp("ms", tz="UTC")),
        ("site", pa.string()),
    ])


def _date_ms(date: str, time_: str):
    d = date.replace(".", "-")
    t = time_ if len(time_) == 8 and "?" not in time_ else "00:00:00"
    try:
        return int(np.datetime64(f"{d}T{t}", "ms").astype(np.int64))
    except ValueError:
        return None


def _table(chunk, schema):
    import pyarrow as pa

    g, rows = chunk.pgn, chunk.rows
    lens = chunk.lengths
    h = g.headers

    def col(name):
        return [h[name][r] for r in rows]

    offsets = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    clocks = g.clocks[rows]
    clocks = np.where(clocks == CLOCK_MISSING, 0, clocks)
    clock_flat = clocks[np.arange(clocks.shape[1])[None, :] < lens[:, None]].astype(np.uint16)
    dates = [_date_ms(h["utc_date"][r] or h["date"][r], h["utc_time"][r]) for r in rows]
    elo = lambda a: pa.array(a[rows], pa.uint16(), mask=a[rows] == 0)  # noqa: E731
    k = rows.size
    return pa.table({
        "tokens": pa.ListArray.from_arrays(offsets, pa.array(chunk.flat, pa.int16())),
        "san": pa.array([g.san[r] for r in rows], pa.list_(pa.string())),
        "uci": pa.array([g.uci[r] for r in rows], pa.list_(pa.string())),
        "clock": pa.ListArray.from_arrays(offsets, pa.array(clock_flat, pa.uint16())),
        "game_length": pa.array(lens, pa.uint16()),
        "outcome_token": pa.array(chunk.outcome, pa.uint16()),
        "result": pa.array(col("result"), pa.string()),
        "white_player": pa.nulls(k, pa.uint64()), "black_player": pa.nulls(k, pa.uint64()),
        "white_elo": elo(g.white_elo), "black_elo": elo(g.black_elo),
        "white_rating_diff": pa.nulls(k, pa.int16()), "black_rating_diff": pa.nulls(k, pa.int16()),
        "eco": pa.array(col("eco"), pa.string()), "opening": pa.array(col("opening"), pa.string()),
        "time_control": pa.array(col("time_control"), pa.string()),
        "termination": pa.array(col("termination"), pa.string()),
        "date": pa.array(dates, pa.timestamp("ms", tz="UTC")),
        "site": pa.array(col("site"), pa.string()),
    }, schema=schema)


def export_parquet(data: str | os.PathLike | Source, out: str | os.PathLike,
                   filters: LichessFilters = LichessFilters()) -> ScanStats:
    """Write the games of a PGN file or folder that pass ``filters`` to ``out`` (one parquet file,
    :func:`lichess_schema`, written atomically: a staging file renamed into place).

    Returns:
        The scan statistics (games read, kept, dropped per reason).

    Raises:
        DataError: ``data`` is not a PGN source, or no game passes the filters (nothing is written).
        pawn.fileio.OutputPathError: ``out`` cannot be written.
    """
    import pyarrow.parquet as pq

    source = data if isinstance(data, Source) else open_source(data)
    if source.kind != "pgn":
        raise DataError(f"{source.repo_or_path}: parquet export reads PGN sources only (this is {source.kind})")
    out = check_output_file(out, "parquet output")
    schema = lichess_schema()
    stats = ScanStats()
    with atomic_output(out) as tmp:
        with pq.ParquetWriter(tmp, schema) as writer:
            for chunk in scan(source, "train", filters, stats):
                writer.write_table(_table(chunk, schema))
        if stats.kept == 0:
            raise DataError(f"no games left in {source.repo_or_path} after the filters {describe_filters(filters)}: "
                            f"{stats.explain()}")
    return stats
