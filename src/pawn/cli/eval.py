"""``pawn eval``: parse :class:`pawn.evaluate.settings.EvalSettings` → :func:`pawn.evaluate.runs.eval_models` → render."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

import time

from pawn.cli._options import argument, settings_command
from pawn.cli._output import Column, Output, Progress, TableReport, check_outputs, heartbeat, interrupted, write_json
from pawn.errors import UsageError
from pawn.metrics import EVAL_TABLE, METRICS
from pawn.evaluate.settings import EvalSettings

if TYPE_CHECKING:  # imported where the command runs: help and argument errors must not import JAX
    from pawn.evaluate import runs

DOC = """Move accuracy, legality, game completion and the accuracy ceiling on random games.

The legal-masked table leads with the figure that ranks models on random games: the legal-masked
loss against E[ln N_legal], the loss of a player uniform over the legal moves on the same positions,
and the excess in nats (model − uniform; ≤ 0 beats a player that knows only the rules) with a 95 %
interval from a bootstrap over games. Top-1 / ceiling is a sanity check only: on random games any
model's expected top-1 equals the ceiling.

Reports both conventions: published (v1 val: terminal PAD slot included, argmax
over all 1,980 tokens, mean of per-batch means) and moves-only (terminal slot excluded, argmax
over the 1,968 actions, position-weighted). With --pgn, top-1/top-5/legal rate on human moves
by Elo band (each Lichess game once). For an adapter of a pawn adapt run, --split val|test
evaluates the run's held-out games (re-derived from its split.json), and --pgn warns when the
file holds games the adapter trained on; --pgn-only skips the random-game pass. An adapter
trained under the legal mask (pawn adapt's default) must be read under it: its column is
"Top-1 legal-masked"; the plain top-1 and legal rate are of the unmasked argmax.

--suite adds the nine linear probes and the outcome diagnostics (the v2 run_evals_backbone) and
writes everything to one JSON (default: eval_suite_<checkpoint>.json in the checkpoint's run
directory) that pawn report shows in its Suite section; its sizes (--games 256, --probe-games,
--probe-epochs, --diagnostic-games, --edge-positions) are for a CPU."""

_FORMATS = {"loss": ".4f", "perplexity": ".2f", "avg_plies_completed": ".1f"}
"""Cell formats of the report table's rows (:data:`pawn.metrics.EVAL_TABLE`); the others are percentages."""


def _cell(value, fmt: str):
    return Column("", fmt, missing="—" if fmt == "pct" else "nan").show(value)


def accuracy_table(r: runs.ModelEval) -> TableReport:
    """The published / moves-only table of one model's :class:`pawn.metrics_core.AccuracyReport`.
    Published figures count every supervised position (end-of-game slot included) and their
    top-1 / ceiling divides figures over different positions (the model cards' ratio); moves-only
    figures count the move decisions and divide by the ceiling over the same plies."""
    rep = r.report
    t = TableReport(f"{r.name}: {r.games} random games, seed {r.seed}, max_ply {r.max_ply}, seq_len {r.seq_len}"
                    f"{' (outcome prefix)' if r.layout.prepend_outcome else ''}",
                    [Column("Metric", justify="left"), Column("Published (v1)"), Column("Moves-only")])
    d = rep.to_dict()
    for key, pub, mo in EVAL_TABLE:
        fmt = _FORMATS.get(key, "pct")
        name = METRICS[key].label + (f" (pos ≥ {rep.late_ply})" if key == "late_legal_rate" else "")
        t.add(name, _cell(d[pub], fmt), "" if mo is None else _cell(d[mo], fmt))
    t.add(METRICS["forfeit_ply"].label, f"{rep.min_forfeit_ply} / {rep.median_forfeit_ply} / {rep.max_forfeit_ply}", "")
    return t.add(METRICS["positions"].label, f"{rep.n_positions} (with end-of-game slots; ceiling: not these)",
                 f"{rep.n_move_positions} (move decisions; ceiling: these)")


def legal_masked_table(r: runs.ModelEval) -> TableReport:
    """The legal-masked figures of one model's :class:`pawn.metrics_core.AccuracyReport` (the logits
    restricted to the legal moves: how an adapter trained under ``pawn adapt``'s legal mask is read).

    It leads with the figure that ranks models on random games: the legal-masked loss against the
    uniform-over-legal player's E[ln N_legal] over the same positions (every move decision) and the
    excess in nats (model − uniform; ≤ 0 is better than a player that knows only the rules) with its
    95 % interval from a bootstrap over games. The top-1 follows, beside the accuracy ceiling over
    the same positions, as a sanity check only: on uniformly random games every legal move is
    equally likely, so any model's expected top-1 equals the ceiling and the ratio cannot rank models."""
    from pawn.metrics import SCOPE_ALL, SCOPE_FROM

    rep = r.report
    t = TableReport(f"{r.name}: legal-masked (the logits over the legal moves only; move decisions, no end-of-game slot)",
                    [Column("Metric", justify="left"), Column(SCOPE_ALL), Column(SCOPE_FROM)])
    t.add("Loss (nats)", _cell(rep.legal_masked_loss_all_moves, ".4f"), "")
    t.add("Uniform over legal: E[ln N_legal] (nats), same positions", _cell(rep.uniform_loss_all_moves, ".4f"), "")
    t.add("Excess (nats; ≤ 0 beats a rules-only player), 95% interval over games", excess_cell(rep), "")
    t.add("Top-1 (sanity check: = ceiling in expectation on random games)", _cell(rep.legal_masked_top1_all_moves, "pct"),
          _cell(rep.legal_masked_top1, "pct"))
    t.add("Top-5", "", _cell(rep.legal_masked_top5, "pct"))
    t.add("Ceiling E[1/N_legal], same positions", _cell(rep.ceiling_moves_only, "pct"), _cell(rep.ceiling_legal_masked, "pct"))
    over_all = rep.legal_masked_top1_all_moves / rep.ceiling_moves_only if rep.ceiling_moves_only > 0 else float("nan")
    t.add("Top-1 / ceiling", _cell(over_all, "pct"), _cell(rep.legal_masked_top1_over_ceiling, "pct"))
    return t.add(METRICS["positions"].label, f"{rep.n_move_positions}", f"{rep.n_legal_masked_positions}")


def excess_cell(rep) -> str:
    """``"+0.4395 [+0.4102, +0.4690]"``: the excess over the uniform-over-legal player with its 95 %
    interval over games, from an :class:`pawn.metrics_core.AccuracyReport` (or ``—``)."""
    from pawn.stats import Interval, format_interval

    iv = Interval(rep.excess_nats_all_moves, rep.excess_nats_lo, rep.excess_nats_hi, float("nan"), 0.95, "", rep.n_games)
    return format_interval(iv, "+.4f")


def _human_columns(first: str, all_positions: bool = False) -> list[Column]:
    """Columns of the human-move tables: which positions each top-1 counts is in its label
    (:data:`pawn.metrics.SCOPE_ALL`, the legal-masked one from :data:`pawn.metrics.MIN_EVAL_PLY`)."""
    from pawn.metrics import SCOPE_ALL

    cols = [Column(first, ""), Column("games", "d"), Column(METRICS["positions"].label, "d"), Column("Loss (unmasked)", ".4f"),
            Column(f"Top-1 ({SCOPE_ALL})", "pct"), Column("Top-5", "pct"), Column(METRICS["legal_rate"].label, "pct"),
            Column(METRICS["legal_masked_top1"].label, "pct")]
    if all_positions:
        cols.append(Column(METRICS["legal_masked_top1_all_moves"].label, "pct"))
        cols.append(Column(METRICS["legal_masked_loss_all_moves"].label, ".4f"))
    return cols


def lichess_table(r: runs.ModelEval, pgn) -> TableReport:
    """One model's Lichess accuracy by Elo band."""
    li = r.lichess
    adapter = any("backbone" in b for b in li["bands"].values())  # an adapter: its backbone alone beside it
    dup = li.get("n_duplicates", 0)
    t = TableReport(f"{r.name}: Lichess {pgn.name} (parsed {li['parser'].get('kept', 0)} of {li['parser'].get('read', 0)}"
                    f"{f', {dup} repeated' if dup else ''}, {li['n_out_of_band']} outside the bands)",
                    _human_columns("Elo band") + [Column("Excess over uniform (nats, every move), 95% over games")]
                    + ([Column("Backbone alone: excess over uniform")] if adapter else []))
    for key, b in li["bands"].items():
        t.add(key, b["n_games"], b["n_positions"], b["loss"], b["top1"], b["top5"], b["legal_rate"], b["top1_legal_masked"],
              _excess_of(b), *([_excess_of(b["backbone"]) if "backbone" in b else "—"] if adapter else []))
    return t


def _excess_of(f: dict) -> str:
    """The excess cell of a Lichess band or held-out block (:func:`pawn.evaluate.accuracy.held_out_figures`)."""
    from pawn.stats import Interval, format_interval

    if f.get("excess_nats_all_moves") is None:
        return "—"
    return format_interval(Interval(f["excess_nats_all_moves"], f["excess_nats_lo"], f["excess_nats_hi"], float("nan"), 0.95, "",
                                    int(f.get("n_games") or 0)), "+.4f")


def held_out_table(r: runs.ModelEval) -> TableReport:
    """One model's accuracy on its run's held-out (validation or test) games."""
    h = r.held_out
    band = h["filters"]
    lo, hi = band.get("elo_min"), band.get("elo_max")
    elo = "" if lo is None and hi is None else f", Elo [{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}) both players"
    t = TableReport(f"{r.name}: the {h['split']} games of {h['run']} ({h['source']}{elo}), seq_len {r.seq_len}",
                    _human_columns("split", all_positions=True))
    t.add(h["split"], h["n_games"], h["n_positions"], h["loss"], h["top1"], h["top5"], h["legal_rate"], h["top1_legal_masked"],
          h["top1_legal_masked_all_moves"], h.get("loss_legal_masked_all_moves"))
    return t


def held_out_reference_table(r: runs.ModelEval) -> TableReport:
    """The adapter on its held-out games beside the backbone alone and a player uniform over the legal
    moves (same games, same positions: every move decision): legal-masked loss, the excess over the
    uniform player in nats with its 95 % bootstrap interval over games, legal-masked top-1; then the
    adapter − backbone differences with their paired intervals over the same games."""
    from pawn.metrics import SCOPE_ALL
    from pawn.stats import Interval, format_interval

    h = r.held_out
    excess = _excess_of

    t = TableReport(f"{r.name}: the {h['split']} games, legal-masked ({SCOPE_ALL}), against the backbone alone and a player "
                    "uniform over the legal moves", [Column("", justify="left"), Column("Loss (nats)", ".4f"),
                                                     Column("Excess over uniform (nats), 95% over games"), Column("Top-1", "pct")])
    t.add("adapter", h["loss_legal_masked_all_moves"], excess(h), h["top1_legal_masked_all_moves"])
    if h.get("backbone"):
        b = h["backbone"]
        t.add("backbone alone", b["loss_legal_masked_all_moves"], excess(b), b["top1_legal_masked_all_moves"])
    t.add("uniform over legal moves", h["uniform_loss_all_moves"], "+0 (the reference)", h.get("uniform_top1_all_moves"))
    if h.get("vs_backbone"):
        v = h["vs_backbone"]
        lo = Interval(**v["loss_legal_masked_all_moves"])
        hi = Interval(**v["top1_legal_masked_all_moves"])
        t.add("adapter − backbone", format_interval(lo, "+.4f"), "", format_interval(hi, "+.2f", scale=100) + " pp")
    return t


def pgn_lines(r: runs.ModelEval) -> list[str]:
    """The one-line notes of ``--pgn``: repeated games dropped, and an adapter's training games among the scored ones."""
    li, out = r.lichess, []
    if li.get("n_duplicates"):
        out.append(f"dropped {li['n_duplicates']:,} repeated games of --pgn (a Lichess game id seen earlier in it); "
                   "each game is counted once")
    ov = li.get("overlap")
    if ov is None and r.split_hint and r.split_hint.startswith("note:"):
        out.append(r.split_hint)
    if ov is not None:
        n = li.get("n_evaluated", 0)
        if ov.get("train"):
            also = f" (and {ov['val']:,} were its validation games)" if ov.get("val") else ""
            out.append(f"warning: {ov['train']:,} of the {n:,} evaluated games were training games of this adapter{also}; "
                       f"these numbers are not held-out: evaluate with {r.split_hint} ({r.split_run})")
        elif ov.get("val") or ov.get("test"):
            out.append(f"note: of the {n:,} evaluated games, {ov.get('val', 0):,} are this adapter's validation and "
                       f"{ov.get('test', 0):,} its test games; none were training games")
    return out


def lichess_skipped_lines(li: dict) -> list[str]:
    """The games of ``--pgn`` the parser skipped (file, game number, ply, reason; the first few,
    then how many more), from :func:`pawn.evaluate.accuracy.evaluate_pgn`'s record."""
    from pawn.data.lichess import skipped_lines

    return skipped_lines([(d["file"], d["game"], d["ply"], d["reason"]) for d in li.get("skipped", [])],
                         int(li.get("n_skipped", 0)))


def edge_table(m: runs.ModelSuite) -> TableReport:
    """The edge-case legality of one model (spec eval §3.5): legal fraction of sampled moves, or
    P(PAD) at checkmate and stalemate."""
    from pawn.metrics import EDGE_LABELS

    t = TableReport(f"{m.name}: edge cases ({m.diagnostics_settings['edge_positions']:,} positions per category)",
                    [Column("Category", justify="left"), Column("Positions", "d"), Column("Legal rate / P(PAD)", "pct"),
                     Column("Entropy (nats)", ".2f")])
    for c, r in m.edge_cases.items():
        t.add(EDGE_LABELS.get(c, c), r["n_positions"], r["mean_pad_prob"] if r["terminal"] else r["mean_legal_rate"], r["mean_entropy"])
    return t


def outcome_lines(m: runs.ModelSuite) -> list[str]:
    """One line per outcome-conditioned test: skipped (and why), or the mean outcome match rate over its cells."""
    out = []
    for test, res in m.outcome_tests.items():
        if "_skipped" in res:
            out.append(f"  {test}: skipped — {res['_skipped']}")
            continue
        rates = []

        def walk(d):
            if isinstance(d, dict):
                if "outcome_match_rate" in d:
                    rates.append(d["outcome_match_rate"])
                else:
                    for v in d.values():
                        walk(v)

        walk(res)
        mean = f"{100 * sum(rates) / len(rates):.1f}%" if rates else "—"
        out.append(f"  {test}: {len(rates)} runs, mean outcome match {mean}")
    return out


def suite_cmd(s: EvalSettings, checkpoint: str) -> None:
    """``pawn eval --suite``: eval + probes + diagnostics of each model, one JSON written at the end
    (and, on Ctrl-C, the finished models)."""
    from pawn.cli._paths import resolve_checkpoint_arg
    from pawn.cli.probe import best_table
    from pawn.evaluate import runs

    if s.pgn_only:
        raise UsageError("--suite runs the random-game eval; drop --pgn-only")
    runs.check_eval(s)
    checkpoint = resolve_checkpoint_arg(checkpoint, lambda m: typer.echo(m, err=True))
    path = runs.suite_path(checkpoint, s.json_out)
    check_outputs(json=path)
    heartbeat("pawn eval --suite")
    models = runs.load(checkpoint, s.variant)
    out, t0 = Output(), time.perf_counter()
    record: dict = {"kind": runs.SUITE_KIND, "suite_version": runs.SUITE_VERSION, "checkpoint": checkpoint,
                    "hub": models[0].hub, "settings": {}, "models": []}
    done: list[str] = []
    ps = runs.suite_probe_settings(s)
    try:
        with Progress() as prog:
            for m in runs.suite_models(models, s, log=lambda x: out.line(x, highlight=False), progress=prog.task):
                record["models"].append(m.record())
                out.report(accuracy_table(m.eval))
                out.report(legal_masked_table(m.eval))
                out.report(best_table(m.probes, ps))
                for line in outcome_lines(m):
                    out.line(line, highlight=False)
                out.report(edge_table(m))
                w = m.wall_s
                out.line(f"{m.name}: eval {w['eval']:.1f} s, probes {w['probes']:.1f} s, diagnostics {w['diagnostics']:.1f} s",
                         highlight=False)
                done.append(m.name)
    except KeyboardInterrupt:
        raise interrupted(done, [lm.name for lm in models], path, record)
    record["settings"] = runs.suite_settings_record(s, time.perf_counter() - t0)
    write_json(path, record)


def eval_cmd(s: EvalSettings, checkpoint: str) -> None:
    from pawn.evaluate import runs

    if s.suite:
        return suite_cmd(s, checkpoint)
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
            if r.report is not None:
                out.report(accuracy_table(r))
                out.report(legal_masked_table(r))
            if r.held_out is not None:
                out.report(held_out_table(r))
                out.report(held_out_reference_table(r))
            if r.lichess is not None:
                out.report(lichess_table(r, s.pgn))
                if not done:  # the same games for every model: name the skipped ones once
                    for line in lichess_skipped_lines(r.lichess):
                        out.line(f"skipped {line}" if not line.startswith("…") else line)
                for line in pgn_lines(r):
                    out.line(line)
            done.append(r.name)
    except KeyboardInterrupt:
        raise interrupted(done, [lm.name for lm in models], s.json_out, record)
    record["settings"] = runs.eval_settings_record(s, time.perf_counter() - t0)
    write_json(s.json_out, record)


command = settings_command(EvalSettings, eval_cmd, doc=DOC, before=[argument(
    "checkpoint", str, "v2 checkpoint directory (a supernet evaluates every nested variant) or a Hub id: owner/name, optionally @revision and /folder (v1 converted on the fly).")])
