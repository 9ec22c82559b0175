"""``pawn uci``: a PAWN checkpoint as a UCI engine on stdin/stdout (:mod:`pawn.play.uci_engine`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from pawn.cli._options import DtypeOpt

VariantOpt = Annotated[Optional[str], typer.Option(
    "--variant", help="For a supernet checkpoint: play as this nested variant (small, base, large; default: the largest).")]


def uci_cmd(
    checkpoint: Annotated[str, typer.Argument(help="PAWN checkpoint directory (backbone, supernet, variant or adapter checkpoint) or Hub id.")],
    variant: VariantOpt = None,
    dtype: DtypeOpt = None,
    log: Annotated[Optional[Path], typer.Option("--log", help="Append every line read and written to this file (for debugging a GUI).")] = None,
) -> None:
    """Run CHECKPOINT as a UCI chess engine on stdin/stdout, for chess GUIs, cutechess-cli and
    lichess-bot. The move is always legal: the model's logits restricted to the legal moves, argmax
    at Temperature 0, else sampled (TopK, TopP, Seed). MultiPV reports the most likely moves with
    a centipawn score from each move's probability through Lichess's win-percentage curve (a
    confidence, not an evaluation). A supernet plays --variant (default: its largest). Options, the
    rules for FEN starts, long games and time budgets: docs/play-and-uci.md, "Playing in a GUI or
    on Lichess"."""

    from pawn import checkpoint as ckpt_mod
    from pawn.cli._errors import fail
    from pawn.play.uci_engine import UciEngine, uci_name

    if not ckpt_mod.is_hub_id(checkpoint) and not Path(checkpoint).is_dir():
        raise fail(f"{checkpoint}: no such checkpoint directory (nor a Hub id owner/name)", 2)
    log_file = open(log, "a", encoding="utf-8") if log is not None else None
    out = sys.stdout

    def write(line: str) -> None:
        out.write(line + "\n")
        out.flush()
        if log_file is not None:
            log_file.write(">> " + line + "\n")
            log_file.flush()

    def load():
        from pawn.play.runner import load_player

        return load_player(checkpoint, variant, batch=1, dtype=dtype)

    def fatal(message: str) -> None:
        sys.stderr.write(f"error: {' '.join(message.split())}\n")
        sys.stderr.flush()
        os._exit(1)

    engine = UciEngine(load, write, name=uci_name(checkpoint, variant), on_fatal=fatal)
    engine.start()

    def readline() -> str:
        line = sys.stdin.readline()
        if log_file is not None and line:
            log_file.write("<< " + line.rstrip("\n") + "\n")
            log_file.flush()
        return line

    try:
        engine.run(readline)
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    os._exit(0)  # the background compile thread may still run: leave without waiting for it
