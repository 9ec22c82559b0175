"""``pawn eval``: parse :class:`pawn.evaluate.settings.EvalSettings` → :func:`pawn.evaluate.runs.eval_models` → render."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

import time

from pawn.cli._options import argument, settings_command
from pawn.cli._output import Column, Output, TableReport, check_outputs, heartbeat, interrupted, write_json
from pawn.metrics import METRICS
from pawn.evaluate.settings import EvalSettings

if TYPE_CHECKING:  # imported where the command runs: help and argument errors must not import JAX
    from pawn.evaluate import runs

DOC = """Move accuracy, legality, game completion and the accuracy ceiling on random games.

Reports both conventions: published (v1 val: terminal PAD slot included, argmax
over all 1,980 tokens, mean of per-batch means) and moves-only (terminal slot excluded, argmax
over the 1,968 actions, position-weighted). With --pgn, top-1/top-5/legal rate on human moves
by Elo band."""

# (metric key, published attribute, moves-only attribute or None, format) of the report table.
_ROWS = (("loss", "loss", "moves_only_loss", ".4f"), ("perplexity", "perplexity", None, ".2f"),
         ("top1", "top1", "moves_only_top1", "pct"), ("top5", "top5", "moves_only_top5", "pct"),
         ("top1_over_ceiling", "top1_over_ceiling", "moves_only_top1_over_ceiling", "pct"),
         ("ceiling", "ceiling", "ceiling_moves_only", "pct"), ("legal_rate", "legal_rate", "moves_only_legal_rate", "pct"),
         ("late_legal_rate", "late_legal_rate", None, "pct"), ("illegal_pred_rate", "illegal_pred_rate", None, "pct"),
         ("illegal_prob_mass", "illegal_prob_mass", None, "pct"), ("completion_rate", "completion_rate", None, "pct"),
         ("avg_plies_completed", "avg_plies_completed", None, ".1f"), ("avg_pct_completion", "avg_pct_completion", None, "pct"))


def _cell(value, fmt: str):
    return Column("", fmt, missing="—" if fmt == "pct" else "nan").show(value)


def accuracy_table(r: runs.ModelEval) -> TableReport:
    """The published / moves-only table of one model's :class:`pawn.metrics_core.AccuracyReport`."""
    rep = r.report
    t = TableReport(f"{r.name}: {r.games} random games, seed {r.seed}, max_ply {r.max_ply}, seq_len {r.seq_len}"
                    f"{' (outcome prefix)' if r.layout.prepend_outcome else ''}",
                    [Column("Metric", justify="left"), Column("Published (v1)"), Column("Moves-only")])
    for key, pub, mo, fmt in _ROWS:
        name = METRICS[key].label + (f" (pos ≥ {rep.late_ply})" if key == "late_legal_rate" else "")
        t.add(name, _cell(getattr(rep, pub), fmt), "" if mo is None else _cell(getattr(rep, mo), fmt))
    t.add(METRICS["forfeit_ply"].label, f"{rep.min_forfeit_ply} / {rep.median_forfeit_ply} / {rep.max_forfeit_ply}", "")
    return t.add(METRICS["positions"].label, f"{rep.n_positions}", f"{rep.n_move_positions}")


def lichess_table(r: runs.ModelEval, pgn) -> TableReport:
    """One model's Lichess accuracy by Elo band."""
    li = r.lichess
    t = TableReport(f"{r.name}: Lichess {pgn.name} (parsed {li['parser'].get('kept', 0)} of {li['parser'].get('read', 0)}, "
                    f"{li['n_out_of_band']} outside the bands)",
                    [Column(METRICS[k].label if k in METRICS else k, f) for k, f in
                     (("Elo band", ""), ("games", "d"), ("Positions", "d"), ("Loss", ".4f"), ("Top-1", "pct"), ("Top-5", "pct"), ("Legal rate", "pct"),
                      ("Top-1 legal-masked", "pct"))])
    for key, b in li["bands"].items():
        t.add(key, b["n_games"], b["n_positions"], b["loss"], b["top1"], b["top5"], b["legal_rate"], b["top1_legal_masked"])
    return t


def lichess_skipped_lines(li: dict) -> list[str]:
    """The games of ``--pgn`` the parser skipped (file, game number, ply, reason; the first few,
    then how many more), from :func:`pawn.evaluate.accuracy.evaluate_pgn`'s record."""
    from pawn.data.lichess import skipped_lines

    return skipped_lines([(d["file"], d["game"], d["ply"], d["reason"]) for d in li.get("skipped", [])],
                         int(li.get("n_skipped", 0)))


def eval_cmd(s: EvalSettings, checkpoint: str) -> None:
    from pawn.evaluate import runs

    runs.check_eval(s)
    check_outputs(json=s.json_out)
    heartbeat("pawn eval")
    from pawn.cli._paths import resolve_checkpoint_arg

    checkpoint = resolve_checkpoint_arg(checkpoint, lambda m: typer.echo(m, err=True))  # a run directory: its best checkpoint
    models = runs.load(checkpoint, s.variant)
    out, t0 = Output(), time.perf_counter()
    record: dict = {"checkpoint": checkpoint, "hub": models[0].hub, "settings": {}, "models": []}
    done: list[str] = []
    try:
        for r in runs.eval_models(models, s, log=out.line):
            record["models"].append(r.record())
            out.report(accuracy_table(r))
            if r.lichess is not None:
                out.report(lichess_table(r, s.pgn))
                if not done:  # the same games for every model: name the skipped ones once
                    for line in lichess_skipped_lines(r.lichess):
                        out.line(f"skipped {line}" if not line.startswith("…") else line)
            done.append(r.name)
    except KeyboardInterrupt:
        raise interrupted(done, [lm.name for lm in models], s.json_out, record)
    record["settings"] = runs.eval_settings_record(s, time.perf_counter() - t0)
    write_json(s.json_out, record)


command = settings_command(EvalSettings, eval_cmd, doc=DOC, before=[argument(
    "checkpoint", str, "v2 checkpoint directory (a supernet evaluates every nested variant) or a Hub id: owner/name, optionally @revision and /folder (v1 converted on the fly).")])
