"""``pawn generate``: parse :class:`pawn.evaluate.settings.GenerateSettings` → :mod:`pawn.evaluate.runs` → render."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from pawn.cli._options import settings_command
from pawn.cli._output import Output, check_outputs, heartbeat, write_json
from pawn.evaluate.settings import GenerateSettings

if TYPE_CHECKING:  # imported where the command runs: help and argument errors must not import JAX
    from pawn.evaluate import runs

DOC = """Generate games from a checkpoint (autoregressive, Gumbel-max sampling, KV cache) or --random
games from the engine; report the autoregressive completion (forfeit) rate and where forfeits
happen; write parquet (--out) and PGN (--pgn-out)."""


def render(out: Output, r: runs.ModelGames, s: GenerateSettings) -> None:
    """One model's summary lines (and the diagnostics, with --diagnostics)."""
    st = r.stats
    out.line(f"[bold]{r.name}[/bold]: {s.games} games, mean length {st['mean_game_length']:.1f}, "
             f"forfeit rate {100 * st['forfeit_rate']:.2f}% ({'masked' if s.mask_illegal else 'unmasked'}), "
             f"AR completion {100 * st['ar_completion_rate']:.2f}%")
    out.line(f"  outcomes: {st['outcome_distribution']}")
    out.line(f"  forfeit plies: {st['forfeit_plies']}")
    for f in r.written:
        typer.echo(f"wrote {f}")
    for t, res in (r.outcome_tests or {}).items():
        if "_skipped" in res:
            out.line(f"  {t}: skipped — {res['_skipped']}")
    for c, res in (r.edge_cases or {}).items():
        what = f"P(PAD) {100 * res['mean_pad_prob']:.1f}%" if res["terminal"] else f"legal {100 * res['mean_legal_rate']:.1f}%"
        out.line(f"  edge {c}: {what} over {res['n_positions']} positions")


def generate_cmd(s: GenerateSettings) -> None:
    from pawn.evaluate import runs

    runs.check_generate(s)
    check_outputs(json=s.json_out, out=s.out, pgn_out=s.pgn_out)
    heartbeat("pawn generate")
    out = Output()
    record: dict = {"settings": runs.generate_settings_record(s), "models": []}
    if s.random:
        g = runs.generate_random(s)
        record["random_games"] = g.record()
        out.line(f"{g.n_games} random games, mean length {g.mean_game_length:.1f} plies")
        for p in g.written:
            typer.echo(f"wrote {p}")
    else:
        from pawn.cli._paths import resolve_checkpoint_arg

        models = runs.load(resolve_checkpoint_arg(s.checkpoint, lambda m: typer.echo(m, err=True), "--checkpoint"), s.variant)
        for r in runs.generate_models(models, s):
            render(out, r, s)
            record["models"].append(r.record())
    write_json(s.json_out, record)


command = settings_command(GenerateSettings, generate_cmd, doc=DOC)
