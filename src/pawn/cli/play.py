"""``pawn play``: parse the settings, run :func:`pawn.play.run_play`, render the table, write
JSON and PGN (also after Ctrl-C, with the games that finished)."""

from __future__ import annotations

import math

import typer

from pawn.cli._errors import fail
from pawn.cli._options import argument, settings_command
from pawn.cli._output import Progress, check_outputs, write_json
from pawn.play.config import PlayConfig


def _fmt(x, spec: str = "+.0f") -> str:

    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    if isinstance(x, float) and math.isinf(x):
        return "+∞" if x > 0 else "−∞"
    text = format(x, spec)
    # a value that rounds to zero prints unsigned ("0", "0.0%"), never "-0" or "+0"
    return text.lstrip("+-") if not any(c in "123456789" for c in text) else text


def render(report) -> None:
    """The summary table: one row per (opponent, temperature)."""
    from rich.table import Table

    from pawn.progress import output_console

    opponents = list(dict.fromkeys(s["opponent"] for s in report.summaries)) or ["?"]
    t = Table(title=f"{report.config['pawn']} vs {', '.join(opponents)}"
              + (" (interrupted)" if report.interrupted else ""))
    for c in ("opponent", "T", "games", "W/D/L", "score [95% CI]", "Elo Δ [95% CI]", "Elo est.", "as white", "as black",
              "errors", "plies", "wall s"):
        t.add_column(c, justify="left" if c == "opponent" else "right")
    for s in report.summaries:
        lo, hi = s["score_rate_ci95"]
        elo_lo, elo_hi = s["elo_diff_ci95"]
        est = "—" if "elo_estimate" not in s else _fmt(s["elo_estimate"], ".0f")
        wdl = lambda d: f"{d['w']}/{d['d']}/{d['l']}"  # noqa: E731
        t.add_row(s["opponent"], f"{s['temperature']:g}", str(s["games"]), f"{s['wins']}/{s['draws']}/{s['losses']}",
                  f"{_fmt(s['score_rate'], '.1%')} [{_fmt(lo, '.1%')}, {_fmt(hi, '.1%')}]",
                  f"{_fmt(s['elo_diff'])} [{_fmt(elo_lo)}, {_fmt(elo_hi)}]", est, wdl(s["as_white_wdl"]),
                  wdl(s["as_black_wdl"]), str(s["engine_errors"]), f"{s['mean_plies']:.0f}", f"{s['wall_seconds']:.1f}")
    output_console().print(t)
    for f in getattr(report, "fits", []):
        lo, hi = f["elo_ci95"]
        output_console().print(f"Elo fit T={f['temperature']:g} over {', '.join(f['opponents'])} ({f['games']} games): "
                               f"{_fmt(f['elo'], '.0f')} [95% CI {_fmt(lo, '.0f')}, {_fmt(hi, '.0f')}] "
                               "(maximum likelihood, logistic model; anchors: random 0 by convention, greedy 478 measured, "
                               "sf-N = UCI_Elo N)")


DOC = """Play CHECKPOINT against Stockfish (--vs stockfish, UCI_LimitStrength at each --stockfish-elo) or
another checkpoint (--vs CKPT_B): colours alternate, PAWN's first move as white comes from a rotating
book, its moves from legal-restricted logits (greedy at T = 0). Prints W/D/L, score rate and Elo
estimate with 95% intervals (Wilson score interval) per temperature and level; --vs ladder plays weak
rated rungs (random, greedy, sf-ELO) and fits one Elo over all of them; CHECKPOINT or --vs can be
uci:COMMAND, any UCI engine (e.g. 'uci:pawn uci CKPT'); --json and --pgn-out write every game (also
after Ctrl-C). Every option is also a PAWN_PLAY_<NAME> environment variable and a --config key."""


def play_cmd(cfg: PlayConfig, checkpoint: str) -> None:
    from pawn.play import run_play
    from pawn.play.pgn import write_pgn

    check_outputs(json=cfg.json_out, pgn_out=cfg.pgn_out)
    total = cfg.games * len(cfg.temperatures) * cfg.n_opponents()
    done = [0]
    with Progress() as prog:
        tick = prog.task("pawn play", total)

        def on_game(rec) -> None:
            done[0] += 1
            tick(done[0], total, f"{rec.opponent} T={rec.temperature:g}")

        report = run_play(checkpoint, cfg, log=lambda m: typer.echo(m, err=True), on_game=on_game)
    render(report)
    write_json(cfg.json_out, report.to_json())
    if cfg.pgn_out is not None:
        write_pgn(cfg.pgn_out, report.records, event=f"PAWN {report.config['pawn']} match")
        typer.echo(f"wrote {cfg.pgn_out}")
    if report.interrupted:
        raise fail(f"interrupted (Ctrl-C) after {len(report.records)} finished games; they are in the table and files above", 130)


command = settings_command(PlayConfig, play_cmd, doc=DOC, before=[argument(
    "checkpoint", str, "PAWN checkpoint directory (supernet, variant or adapter checkpoint) or Hub id.")])
