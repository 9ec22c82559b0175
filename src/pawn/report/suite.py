"""The Suite section of the report: what a ``pawn eval --suite`` JSON file
(:func:`pawn.evaluate.runs.suite_models`) holds, as the rows and figures the page draws — per
model the published / moves-only table (:data:`pawn.metrics.EVAL_TABLE`, labels from
:data:`pawn.metrics.METRICS`), the nine probes (best layer and best accuracy, or R² and MAE for the
regression probes, and every layer's value), and the outcome diagnostics (the five
outcome-conditioned tests or why they were skipped, the edge-case legality).

Nothing here imports JAX: the page of a run is written at each validation.
"""

from __future__ import annotations

import math
from typing import Any, Optional

from pawn.metrics import EDGE_LABELS, EVAL_TABLE, METRICS, PROBE_LABELS
from pawn.stats import interval_text

SUITE_KIND = "pawn-eval-suite"
"""The ``kind`` of a suite JSON file (the same string as :data:`pawn.evaluate.runs.SUITE_KIND`,
which a test pins; repeated here so the report does not import the evaluation package)."""

_FMT = {"fraction": "pct", "ratio": "ratio", "nats": "loss", "plies": "rate"}
"""Metric unit → the page's number format (its ``fmt`` kinds)."""


def is_suite(report: Any) -> bool:
    """True for the JSON of ``pawn eval --suite``."""
    return isinstance(report, dict) and report.get("kind") == SUITE_KIND and isinstance(report.get("models"), list)


def _num(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(float(v)) else None


def excess_text(random_games: dict[str, Any]) -> Optional[str]:
    """``"+0.4392 [+0.4303, +0.4480]"``: the excess over the uniform-over-legal player (nats) with its
    95 % interval over games from a ``random_games`` block, or None when the block has none (older files)."""
    return interval_text(*(random_games.get(f"legal_masked/{k}") for k in ("excess_nats_all_moves", "excess_nats_lo", "excess_nats_hi")))


_UNIFORM = "uniform over the legal moves"


def _figures_rows(games: str, f: dict[str, Any], player: str, *, uniform: bool = True) -> list[dict[str, Any]]:
    """The rows of one block of :func:`pawn.evaluate.accuracy.held_out_figures` (a held-out split or
    a Lichess Elo band): ``player``, its ``backbone`` alone when the block has one, and the uniform
    player on the same move decisions."""
    def row(who: str, g: dict[str, Any]) -> dict[str, Any]:
        return {"games": games, "player": who, "n_games": f.get("n_games"), "n_positions": f.get("n_positions"),
                "loss": _num(g.get("loss_legal_masked_all_moves")),
                "excess": interval_text(g.get("excess_nats_all_moves"), g.get("excess_nats_lo"), g.get("excess_nats_hi")),
                "top1": _num(g.get("top1_legal_masked_all_moves"))}

    rows = [row(player, f)]
    if isinstance(f.get("backbone"), dict):
        rows.append(row("backbone alone", f["backbone"]))
    if uniform:
        rows.append({**row(_UNIFORM, {}), "loss": _num(f.get("uniform_loss_all_moves")), "excess": "+0 (the reference)",
                     "top1": _num(f.get("uniform_top1_all_moves"))})
    return rows


def legal_masked_rows(model: dict[str, Any]) -> list[dict[str, Any]]:
    """The legal-masked block of one model of a ``pawn eval --json`` report, as its card leads with
    it: ``[{games, player, n_games, n_positions, loss, excess, top1}]`` over every move decision —
    the legal-masked loss (nats), the excess over a player uniform over the legal moves (model −
    E[ln N_legal] on the same positions, nats; ≤ 0 beats a player that knows only the rules) with its
    95 % interval over games as text, and the legal-masked top-1. Rows: the random games (the model
    and the uniform player), the run's held-out split (an adapter, its backbone alone, the uniform
    player, then ``adapter − backbone``: the paired differences of loss and top-1 with their 95 %
    intervals over games, as text), and each Lichess Elo band (likewise). Empty for a report written
    before these figures (no excess)."""
    rows: list[dict[str, Any]] = []
    rg = model.get("random_games")
    if isinstance(rg, dict) and excess_text(rg) is not None:
        n = {"n_games": rg.get("counts/n_games"), "n_positions": rg.get("counts/n_move_positions")}
        rows.append({"games": "random games", "player": str(model.get("name", "model")), **n,
                     "loss": _num(rg.get("legal_masked/loss_all_moves")), "excess": excess_text(rg),
                     "top1": _num(rg.get("legal_masked/top1_all_moves"))})
        rows.append({"games": "random games", "player": _UNIFORM, **n, "loss": _num(rg.get("legal_masked/uniform_loss_all_moves")),
                     "excess": "+0 (the reference)", "top1": _num(rg.get("ceiling/moves_only"))})
    h = model.get("held_out")
    if isinstance(h, dict) and h.get("excess_nats_all_moves") is not None:
        games = f"{h.get('split', 'held-out')} games"
        rows += _figures_rows(games, h, "adapter" if isinstance(h.get("backbone"), dict) else str(model.get("name", "model")))
        v = h.get("vs_backbone") or {}
        lo, t1 = v.get("loss_legal_masked_all_moves"), v.get("top1_legal_masked_all_moves")
        if isinstance(lo, dict) and isinstance(t1, dict):
            top1 = interval_text(t1.get("estimate"), t1.get("lo"), t1.get("hi"), "+.2f", 100)
            rows.append({"games": games, "player": "adapter − backbone", "n_games": h.get("n_games"), "n_positions": h.get("n_positions"),
                         "loss": interval_text(lo.get("estimate"), lo.get("lo"), lo.get("hi")), "excess": None,
                         "top1": None if top1 is None else f"{top1} pp"})
    li = model.get("lichess")
    for band, b in ((li or {}).get("bands") or {}).items() if isinstance(li, dict) else ():
        if isinstance(b, dict) and b.get("excess_nats_all_moves") is not None:
            rows += _figures_rows(f"Lichess {band}", b, str(model.get("name", "model")))
    return rows


def accuracy_rows(random_games: dict[str, Any]) -> list[dict[str, Any]]:
    """The published / moves-only table of one model: ``[{key, label, published, moves_only, fmt}]``.
    It leads with the figure that ranks models on random games (in the moves-only column: every move
    decision): the legal-masked loss, the uniform-over-legal player's E[ln N_legal] over the same
    positions and the excess (model − uniform, nats) with its 95 % interval over games; then
    :data:`pawn.metrics.EVAL_TABLE`'s rows in order, the forfeit plies and the position counts."""
    rows = []
    excess = excess_text(random_games)
    if excess is not None:
        for key, value, fmt in (("legal_masked_loss_all_moves", _num(random_games.get("legal_masked/loss_all_moves")), "loss"),
                                ("uniform_legal_loss", _num(random_games.get("legal_masked/uniform_loss_all_moves")), "loss"),
                                ("excess_nats", excess, "")):
            rows.append({"key": key, "label": METRICS[key].label, "published": None, "moves_only": value, "fmt": fmt})
    late = random_games.get("published/late_ply")
    for key, pub, mo in EVAL_TABLE:
        label = METRICS[key].label + (f" (pos ≥ {late})" if key == "late_legal_rate" and late is not None else "")
        rows.append({"key": key, "label": label, "published": _num(random_games.get(pub)),
                     "moves_only": None if mo is None else _num(random_games.get(mo)), "fmt": _FMT.get(METRICS[key].unit, "")})
    ff = [random_games.get(f"published/{k}_forfeit_ply") for k in ("min", "median", "max")]
    rows.append({"key": "forfeit_ply", "label": METRICS["forfeit_ply"].label, "published": " / ".join(str(x) for x in ff),
                 "moves_only": None, "fmt": ""})
    rows.append({"key": "positions", "label": METRICS["positions"].label, "published": random_games.get("counts/n_positions"),
                 "moves_only": random_games.get("counts/n_move_positions"), "fmt": "int"})
    return rows


def probe_rows(probes: dict[str, Any]) -> dict[str, Any]:
    """``{"layers": [embed, layer_0, …], "rows": [{probe, label, regression, best_layer, best,
    mae, by_layer: [best_accuracy per layer]}]}`` of a suite model's ``probes`` block (a regression
    probe is one whose records carry ``mae``: its accuracy is R², spec eval §2.3)."""
    per = probes.get("probes") or {}
    best = probes.get("best") or {}
    layers: list[str] = []
    for recs in per.values():
        for name in recs:
            if name not in layers:
                layers.append(name)
    rows = []
    for name, recs in per.items():
        b = best.get(name) or {}
        rows.append({"probe": name, "label": PROBE_LABELS.get(name, name),
                     "regression": any("mae" in r for r in recs.values()),
                     "best_layer": b.get("layer"), "best": _num(b.get("best_accuracy")), "mae": _num(b.get("mae")),
                     "by_layer": [_num((recs.get(layer) or {}).get("best_accuracy")) for layer in layers]})
    return {"layers": layers, "rows": rows}


def probe_figures(table: dict[str, Any], model: str) -> list[dict[str, Any]]:
    """Best accuracy by layer of the classification probes, and R² by layer of the regression
    probes on a figure of their own (R² can be far below 0), as plotly figure dicts."""
    figs = []
    for reg, title, ytitle in ((False, "Probe accuracy by layer", "best accuracy"), (True, "Probe R² by layer", "best R²")):
        traces = [{"type": "scatter", "mode": "lines+markers", "name": r["label"], "x": table["layers"], "y": r["by_layer"],
                   "meta": {"probe": r["probe"]}} for r in table["rows"] if r["regression"] == reg]
        if traces:
            lay: dict[str, Any] = {"title": {"text": f"{title} · {model}", "x": 0.02, "font": {"size": 15}},
                                   "xaxis": {"title": {"text": "layer"}}, "yaxis": {"title": {"text": ytitle}},
                                   "margin": {"l": 60, "r": 20, "t": 40, "b": 45}, "height": 320,
                                   "legend": {"orientation": "h", "y": -0.25}}
            if not reg:
                lay["yaxis"].update(range=[0, 1.02], tickformat=".0%")
            figs.append({"id": f"suite-probes-{'r2' if reg else 'accuracy'}", "data": traces, "layout": lay})
    return figs


def _match_rates(d: Any, out: list[float]) -> None:
    if isinstance(d, dict):
        if "outcome_match_rate" in d and _num(d["outcome_match_rate"]) is not None:
            out.append(float(d["outcome_match_rate"]))
        else:
            for v in d.values():
                _match_rates(v, out)


def diagnostics_view(diag: dict[str, Any]) -> dict[str, Any]:
    """``{"outcome_prefix_trained", "tests": [{test, skipped, runs, mean_match}], "signal": [{outcome,
    unmasked, masked, forfeit_unmasked}] (outcome_signal's match rates), "edge": [{category, label,
    terminal, n_positions, value (legal rate, or P(PAD) when terminal), entropy}], "settings"}``."""
    tests = []
    signal = []
    for name, res in (diag.get("outcome_tests") or {}).items():
        if isinstance(res, dict) and "_skipped" in res:
            tests.append({"test": name, "skipped": res["_skipped"], "runs": 0, "mean_match": None})
            continue
        rates: list[float] = []
        _match_rates(res, rates)
        tests.append({"test": name, "skipped": None, "runs": len(rates), "mean_match": sum(rates) / len(rates) if rates else None})
        if name == "outcome_signal" and isinstance(res, dict):
            for outcome, cell in res.items():
                signal.append({"outcome": outcome, "unmasked": _num((cell.get("unmasked") or {}).get("outcome_match_rate")),
                               "masked": _num((cell.get("masked") or {}).get("outcome_match_rate")),
                               "forfeit_unmasked": _num((cell.get("unmasked") or {}).get("forfeit_rate"))})
    edge = [{"category": c, "label": EDGE_LABELS.get(c, c), "terminal": bool(r.get("terminal")), "n_positions": r.get("n_positions"),
             "value": _num(r.get("mean_pad_prob") if r.get("terminal") else r.get("mean_legal_rate")),
             "entropy": _num(r.get("mean_entropy"))}
            for c, r in (diag.get("edge_cases") or {}).items() if isinstance(r, dict)]
    return {"outcome_prefix_trained": diag.get("outcome_prefix_trained"), "tests": tests, "signal": signal, "edge": edge,
            "settings": diag.get("settings") or {}}


def suite_view(report: dict[str, Any]) -> dict[str, Any]:
    """What the page draws of one suite JSON: ``{"checkpoint", "settings", "models": [{name,
    accuracy (:func:`accuracy_rows`), caption, probes (:func:`probe_rows`), probe_figures,
    probe_caption, diagnostics (:func:`diagnostics_view`), wall_s}]}``."""
    models = []
    for m in report.get("models") or []:
        if not isinstance(m, dict):
            continue
        rg = m.get("random_games") or {}
        st = rg.get("settings") or {}
        pr = m.get("probes") or {}
        pst = pr.get("settings") or {}
        table = probe_rows(pr)
        models.append({
            "name": m.get("name", "?"),
            "accuracy": accuracy_rows(rg) if rg else [],
            "caption": (f"{st.get('games', '?')} random games, seed {st.get('seed', '?')}, max_ply {st.get('max_ply', '?')}, "
                        f"seq_len {st.get('seq_len', '?')}" + (" (outcome prefix)" if st.get("prepend_outcome") else "")),
            "probes": table, "probe_figures": probe_figures(table, m.get("name", "?")),
            "probe_caption": (f"{pst.get('n_games', '?')}/{pst.get('n_val_games', '?')} games, {pst.get('n_epochs', '?')} epochs, "
                              f"max_ply {pst.get('max_ply', '?')}, weight decay {pst.get('weight_decay', '?')}"),
            "diagnostics": diagnostics_view(m.get("diagnostics") or {}),
            "wall_s": m.get("wall_s") or {},
        })
    return {"checkpoint": report.get("checkpoint"), "settings": report.get("settings") or {}, "models": models}


def annotate(entry: dict[str, Any]) -> dict[str, Any]:
    """An eval-report entry of the page (``{"path", "kind", "report", …}``) with ``suite`` (its
    :func:`suite_view`) when the report is a suite file, and for a ``pawn eval --json`` report
    ``legal_masked``: ``[{name, rows}]``, each model's :func:`legal_masked_rows` (models without
    them left out), which its card leads with."""
    if is_suite(entry.get("report")):
        entry["kind"] = "suite"
        entry["suite"] = suite_view(entry["report"])
    elif entry.get("kind") == "eval":
        models = [m for m in entry["report"].get("models") or [] if isinstance(m, dict)]
        blocks = [{"name": m.get("name", "?"), "rows": legal_masked_rows(m)} for m in models]
        entry["legal_masked"] = [b for b in blocks if b["rows"]]
    return entry


__all__ = ["SUITE_KIND", "is_suite", "accuracy_rows", "probe_rows", "probe_figures", "diagnostics_view", "suite_view", "annotate",
           "interval_text", "excess_text", "legal_masked_rows"]
