"""What the report shows of one run, as JSON-ready dicts: the runs-table row, the KPI row, the
plotly figures of the Run page, the per-metric series the Compare page overlays, the config and
the checkpoints. Every number comes from the run record (:mod:`pawn.runs`) under its
:mod:`pawn.metrics` key; nothing here parses ``metrics.jsonl``.

A figure is a plotly figure as a dict (``{"data": [trace, ...], "layout": {...}}``), drawn in the
page by ``Plotly.newPlot``; each trace carries ``meta = {"key": ..., "source": "train"|"val"}``
so tests and the page can tell which metric a line is.
"""

from __future__ import annotations

import math
import re
from typing import Any, Iterable, Optional

from pawn.metrics import METRICS, ViewKeys
from pawn.runs import POSITIONS, Record, Run

POSITIONS_MIXED = ("mixed: the validation records count different positions (an old run resumed by a newer PAWN; "
                   "the curve changes definition at the resume)")

INTEGRITY_KEYS = ViewKeys("integrity")
"""Game-integrity rates, the ``integrity`` view (spec ``eval-probe-generate-sweep-bench.md``
§1.2), drawn on one chart with the median forfeit ply on a second axis."""

COMPARE_KEYS = ViewKeys("compare")
"""Metrics offered in the Compare page's menu, the ``compare`` view (each as ``train/KEY`` and
``val/KEY`` where a run has it)."""

_WEIGHT_NAME = re.compile(r"^(?:(?P<group>[^/]+)/)?layer(?P<layer>\d+)\.(?P<proj>.+)$")


def _finite(v: Any) -> Optional[float]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    x = float(v)
    return x if math.isfinite(x) else None


def tokens_per_step(run: Run) -> Optional[int]:
    """Tokens one optimizer step trains on: the config record's ``summary.tokens_per_step``
    (pretraining), else ``batch_size × seq_len`` of the run config (an upper bound for adapter
    runs, whose games are padded). None when neither is known."""
    c = run.config_record
    summary = (c.fields.get("summary") if c else None) or {}
    t = summary.get("tokens_per_step") if isinstance(summary, dict) else None
    if isinstance(t, int) and t > 0:
        return t
    b, s = run.config.get("batch_size"), run.config.get("seq_len")
    if isinstance(b, int) and isinstance(s, int):
        return b * s
    return None


def _series(records: Iterable[Record], key: str, variant: Optional[str] = None, *,
            skip_compile: bool = False) -> dict[str, list]:
    """``{"step": [...], "y": [...], "elapsed": [...]}`` of metric ``key`` over ``records``
    (finite values only; ``elapsed`` in seconds since the run started, None when not written)."""
    out: dict[str, list] = {"step": [], "y": [], "elapsed": []}
    for r in records:
        if skip_compile and r.fields.get("includes_compile"):
            continue
        y = _finite(r.get(key, variant))
        if y is None or r.step is None:
            continue
        out["step"].append(r.step)
        out["y"].append(y)
        out["elapsed"].append(_finite(r.fields.get("elapsed")))
    return out


PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _line(name: str, s: dict[str, list], key: str, source: str, *, dash: Optional[str] = None, yaxis: str = "y",
          markers: bool = False, variant: Optional[str] = None, color: Optional[str] = None) -> dict[str, Any]:
    t: dict[str, Any] = {"type": "scatter", "mode": "lines+markers" if markers or len(s["step"]) < 20 else "lines", "name": name,
                         "x": s["step"], "y": s["y"], "yaxis": yaxis,
                         "meta": {"key": key, "source": source, "variant": variant}}
    if dash or color:
        t["line"] = {k: v for k, v in (("dash", dash), ("color", color)) if v}
    if color and markers:
        t["marker"] = {"color": color}
    return t


def _layout(title: str, ytitle: str = "", *, y2: Optional[str] = None, ylog: bool = False,
            yfraction: bool = False, y2fraction: bool = False, y2range: Optional[list[float]] = None,
            legend_rows: int = 1) -> dict[str, Any]:
    lay: dict[str, Any] = {"title": {"text": title, "x": 0.02, "font": {"size": 15}},
                           "xaxis": {"title": {"text": "step"}},
                           "yaxis": {"title": {"text": ytitle}},
                           "margin": {"l": 60, "r": 60 if y2 else 20, "t": 40, "b": 45}, "height": 320 + 22 * (legend_rows - 1),
                           # below the x-axis title, lower for each further legend row
                           "legend": {"orientation": "h", "y": -0.25 - 0.07 * (legend_rows - 1), "yanchor": "top"},
                           "hovermode": "x unified"}
    if ylog:
        lay["yaxis"]["type"] = "log"
    if yfraction:
        lay["yaxis"]["tickformat"] = ".1%"
    if y2:
        lay["yaxis2"] = {"title": {"text": y2}, "overlaying": "y", "side": "right", "showgrid": False}
        if y2fraction:
            lay["yaxis2"]["tickformat"] = ".1%"
        if y2range is not None:
            lay["yaxis2"]["range"] = y2range
    return lay


def _models(run: Run) -> list[Optional[str]]:
    """The models whose lines are drawn: each supernet variant, or the run's own model (None)."""
    return list(run.variants) if run.variants else [None]


def _label(variant: Optional[str]) -> str:
    return f" {variant}" if variant else ""


def planned_lr(run: Run, points: int = 200) -> Optional[dict[str, list]]:
    """The learning rate the run's config plans (``pawn.schedules.build_schedule``, spec
    ``training-and-adapters.md`` §2) at up to ``points`` steps in [1, total_steps], as the train
    records report it (the lr of the update that made step s: ``lr(s - 1)``, optax counting updates
    from 0): ``{"step": [...], "y": [...]}``, or None when the config does not name a schedule or the
    schedule cannot be built (an older config, a missing field)."""
    c = run.config
    total = run.total_steps
    if not total or not all(k in c for k in ("lr_schedule", "lr")):
        return None
    try:
        from pawn.schedules import build_schedule

        warm = c.get("warmup_steps")
        if warm is None:
            warm = int(float(c.get("warmup_frac") or 0.0) * total)
        sched = build_schedule(c["lr_schedule"], float(c["lr"]), int(total), int(warm),
                               min_ratio=float(c.get("min_lr_ratio", 0.1)), decay_frac=float(c.get("decay_frac", 0.1)),
                               cooldown_frac=float(c.get("cooldown_frac", 0.2)),
                               stable_ratio=float(c.get("stable_lr_ratio", 0.1)),
                               decay_shape=str(c.get("wsd_decay_shape", "linear")))
    except (ValueError, TypeError, KeyError, ImportError):
        return None
    n = min(points, int(total))
    steps = sorted({1 + round(i * (total - 1) / max(1, n - 1)) for i in range(n)})
    # a record at step s reports the lr of the update that made it, optax's count s - 1
    return {"step": steps, "y": [sched.value(s - 1) for s in steps]}


def weight_heatmap(run: Run) -> Optional[dict[str, Any]]:
    """The adapter weight report (``weights``: ``layerN.PROJ`` → Frobenius norm, written with
    each record) as a layer × projection heat map, with a slider over the steps that wrote one.
    None when no record has weights."""
    snaps: list[tuple[int, dict[str, float]]] = []
    seen: set[int] = set()
    for r in sorted([*run.val, *run.train], key=lambda r: (r.step or 0)):
        w = r.fields.get("weights")
        if r.step is None or not isinstance(w, dict) or not w or r.step in seen:
            continue
        seen.add(r.step)
        snaps.append((r.step, {k: float(v) for k, v in w.items() if _finite(v) is not None}))
    if not snaps:
        return None
    layers: set[int] = set()
    projs: list[str] = []
    groups = {m.group("group") for _, w in snaps for m in map(_WEIGHT_NAME.match, w) if m}
    cell: dict[tuple[int, str], str] = {}  # (layer, projection label) -> weight name
    for _, w in snaps:
        for name in w:
            m = _WEIGHT_NAME.match(name)
            if not m:  # not per layer (e.g. an output FiLM): left out of the layer × projection map
                continue
            proj = f"{m.group('group')}/{m.group('proj')}" if len(groups) > 1 and m.group("group") else m.group("proj")
            layers.add(int(m.group("layer")))
            cell[(int(m.group("layer")), proj)] = name
            if proj not in projs:
                projs.append(proj)
    if not layers:
        return None
    rows = sorted(layers)

    def z(w: dict[str, float]) -> list[list[Optional[float]]]:
        return [[w.get(cell.get((layer, p), "")) for p in projs] for layer in rows]

    last_step, last = snaps[-1]
    trace = {"type": "heatmap", "x": projs, "y": [f"layer {i}" for i in rows], "z": z(last), "colorscale": "Viridis",
             "colorbar": {"title": {"text": "‖W‖"}}, "name": "weight norm",
             "meta": {"key": "weights", "source": "weights", "steps": [s for s, _ in snaps]}}
    lay = _layout(f"Adapter weight norms (step {last_step})", "layer")
    lay["xaxis"] = {"title": {"text": "projection"}, "type": "category"}
    lay["yaxis"]["autorange"] = "reversed"
    lay["height"] = max(320, 60 + 28 * len(rows))
    lay["hovermode"] = "closest"
    if len(snaps) > 1:
        lay["sliders"] = [{"active": len(snaps) - 1, "currentvalue": {"prefix": "step "}, "pad": {"t": 50},
                           "steps": [{"label": str(s), "method": "update",
                                      "args": [{"z": [z(w)]}, {"title.text": f"Adapter weight norms (step {s})"}]}
                                     for s, w in snaps]}]
        lay["margin"]["b"] = 110
    return {"data": [trace], "layout": lay}


def figures(run: Run) -> list[dict[str, Any]]:
    """The Run page's charts, in order (each present only when the run has its data): loss (train
    per variant, val per variant), top-1 (train, val, the ceiling as a dotted line), game
    integrity, learning rate (as run and as planned), gradient norm, throughput and data wait
    (chunks that included compilation left out), memory (GiB), adapter weight norms."""
    train, val = run.train, run.val
    models = _models(run)
    figs: list[dict[str, Any]] = []

    def add(title: str, traces: list[dict], **lay: Any) -> None:
        traces = [t for t in traces if t.get("x")]
        if traces:
            figs.append({"id": re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-"), "data": traces,
                         "layout": _layout(title, **lay)})

    # loss: the joint train loss of a supernet is the sum over variants, so it is drawn only for one model
    col = {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(models)}
    loss = []
    for v in models:
        s = _series(train, "loss", v)
        loss.append(_line(f"train{_label(v)}", s, "loss", "train", variant=v, color=col[v]))
    for v in models:
        loss.append(_line(f"val{_label(v)}", _series(val, "loss", v), "loss", "val", dash="dot", markers=True, variant=v,
                          color=col[v]))
    add("Loss", loss, ytitle="nats")

    top1 = [_line(f"train{_label(v)}", _series(train, "top1", v), "top1", "train", variant=v, color=col[v]) for v in models]
    top1 += [_line(f"val{_label(v)}", _series(val, "top1", v), "top1", "val", dash="dot", markers=True, variant=v,
                   color=col[v]) for v in models]
    for v in models:
        c = _series(val, "ceiling", v)
        if c["step"]:
            top1.append({**_line(f"ceiling{_label(v)}", c, "ceiling", "val", dash="dash", variant=v),
                         "line": {"dash": "dash", "color": "#888"}})
    add("Top-1 accuracy", top1, ytitle="top-1", yfraction=True)

    # a colour per measure and a dash per variant (the largest solid): 12 lines of a supernet stay
    # apart, where the 8-colour palette repeated colours across measures
    integ = []
    measure_col = {k: PALETTE[i] for i, k in enumerate((*INTEGRITY_KEYS, "median_forfeit_ply"))}
    dashes = ("dot", "dash", "dashdot")
    for i, v in enumerate(models):
        dash = None if i == len(models) - 1 else dashes[i % len(dashes)]
        for k in INTEGRITY_KEYS:
            integ.append(_line(f"{METRICS[k].short}{_label(v)}", _series(val, k, v), k, "val", markers=True, variant=v,
                               color=measure_col[k], dash=dash))
        integ.append(_line(f"{METRICS['median_forfeit_ply'].short}{_label(v)}",
                           _series(val, "median_forfeit_ply", v), "median_forfeit_ply", "val", yaxis="y2", markers=True,
                           variant=v, color=measure_col["median_forfeit_ply"], dash=dash))
    add("Game integrity (validation)", integ, ytitle="rate", yfraction=True, y2="median forfeit ply",
        legend_rows=len(models))

    lr = [_line("lr as run", _series(train, "lr"), "lr", "train")]
    plan = planned_lr(run)
    if plan and lr[0]["x"]:
        lr.append({**_line("lr as planned", {**plan, "elapsed": []}, "lr_planned", "config"),
                   "line": {"dash": "dash", "color": "#999"}})
    add("Learning rate", lr, ytitle="lr")

    add("Gradient norm", [_line("grad norm", _series(train, "grad_norm"), "grad_norm", "train"),
                          _line("grad norm, chunk mean", _series(train, "grad_norm_mean"), "grad_norm_mean", "train",
                                dash="dot")], ytitle="‖g‖")

    wait = _series(train, "data_wait_frac", skip_compile=True)
    add("Throughput (compile chunks left out)",
        [_line("tokens/s", _series(train, "tokens_per_s", skip_compile=True), "tokens_per_s", "train", markers=True),
         _line("data-wait fraction", wait, "data_wait_frac", "train", dash="dot", yaxis="y2", markers=True)],
        ytitle="tokens/s", y2="data wait (share of wall time)", y2fraction=True,
        # from 0, and at least to 5 %: a wait of 0.003 % reads as none, not as a swing across the axis
        y2range=[0, max(0.05, 1.1 * max(wait["y"], default=0.0))])

    mem_keys: list[str] = []
    for r in train:
        for k in (r.fields.get("mem") or {}):
            if k not in mem_keys and not k.startswith("system_total"):
                mem_keys.append(k)
    mem = []
    for k in mem_keys:
        s: dict[str, list] = {"step": [], "y": [], "elapsed": []}
        for r in train:
            y = _finite((r.fields.get("mem") or {}).get(k))
            if y is not None and r.step is not None:
                s["step"].append(r.step)
                s["y"].append(y)
        mem.append(_line(k.replace("_gb", "").replace("_", " "), s, f"mem/{k}", "train"))
    add("Memory", mem, ytitle="GiB")

    hm = weight_heatmap(run)
    if hm is not None:
        figs.append({"id": "adapter-weight-norms", **hm})
    return figs


def compare_series(run: Run) -> dict[str, dict[str, list]]:
    """``{"train/KEY" | "val/KEY": {"step", "y", "elapsed", "tokens"}}`` of the run's model for
    every :data:`COMPARE_KEYS` metric it has (``tokens`` = step × :func:`tokens_per_step`;
    chunks that included compilation are left out of ``tokens_per_s``)."""
    tps = tokens_per_step(run)
    out: dict[str, dict[str, list]] = {}
    for source, recs in (("train", run.train), ("val", run.val)):
        for k in COMPARE_KEYS:
            s = _series(recs, k, skip_compile=(k == "tokens_per_s"))
            if s["step"]:
                s["tokens"] = [st * tps if tps else None for st in s["step"]]
                out[f"{source}/{k}"] = s
    return out


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a.b.c": value}`` (lists kept as values)."""
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out


def _last(records: list[Record], key: str) -> Optional[float]:
    for r in reversed(records):
        v = _finite(r.values.get(key))
        if v is not None:
            return v
    return None


def _shown_model(run: Run) -> Optional[str]:
    """For a supernet run, the model name (``d192_L4_F768``) of the variant whose values its
    records carry as the run's (the monitored one: the variant of the last val record whose loss
    is the record's), which names its model in a ``pawn eval`` report; None for one model or an
    adapter, or when it cannot be told."""
    if not run.variants or not run.val:
        return None
    r = run.val[-1]
    loss = r.values.get("loss")
    name = next((n for n, v in r.variants.items() if loss is not None and v.get("loss") == loss), None)
    c = run.config_record
    info = (((c.fields.get("summary") or {}).get("variants") or {}) if c else {}).get(name) if name else None
    cfg = info.get("config") if isinstance(info, dict) else None
    return cfg if isinstance(cfg, str) else None


def summary(run: Run) -> dict[str, Any]:
    """The runs-table row and KPI values of ``run``: kind, model (variant or strategy), status
    (state and reason), step/total, best val loss, last val top-1 and top-1 ÷ ceiling, legal
    rate, completion rate (top-1 ÷ ceiling from the latest ``pawn eval --json`` report in the run
    directory when the validation records carry no ceiling; ``top1_over_ceiling_from`` says which),
    median tokens/s and data-wait fraction (compile chunks left out),
    wall time (s, the last record's ``elapsed``), start (the first record's timestamp), ETA (s:
    remaining steps × seconds per step of the last segment, while running), trainable params, and
    which positions its loss and top-1 count (``positions``: a :data:`pawn.runs.POSITIONS` key or
    ``mixed``; ``positions_label`` says it), so the page never compares figures of different
    position sets without saying so; ``movable_params`` and ``compute`` (:attr:`pawn.runs.Run.compute`:
    the optimizer steps and gradient batches a run really spent)."""
    train, val = run.train, run.val
    st = run.status
    steady = [r for r in train if not r.fields.get("includes_compile")]

    def median(key: str) -> Optional[float]:
        xs = sorted(x for x in (_finite(r.values.get(key)) for r in steady) if x is not None)
        return xs[len(xs) // 2] if xs else None

    recs = run.all_records()
    elapsed = None
    for r in reversed(recs):
        elapsed = _finite(r.fields.get("elapsed"))
        if elapsed is not None:
            break
    start = next((r.fields.get("timestamp") for r in recs if r.fields.get("timestamp")), None)
    top1 = _last(val, "top1")
    ceiling = _last(val, "ceiling")
    over = _last(val, "top1_over_ceiling")
    if over is None and top1 is not None and ceiling:
        over = top1 / ceiling
    over_source = "val" if over is not None else None
    if over is None:  # the validation records carry no ceiling: the run's latest pawn eval --json report
        from pawn.metrics import eval_values
        from pawn.report import inside

        shown = _shown_model(run)
        home = run.path.resolve()
        for _, rep in reversed([(p, d) for p, d in run.eval_reports() if inside(p, home)]):
            models = [m for m in (rep.get("models") if isinstance(rep.get("models"), list) else []) if isinstance(m, dict)]
            if shown is not None:  # a supernet: the report's model of the variant the row shows, if it has one
                models = [m for m in models if m.get("name") == shown]
            vals = eval_values((models[-1].get("random_games") or {})) if models else {}
            over = _finite(vals.get("top1_over_ceiling"))
            if over is not None:
                over_source = "eval"
                break
    eta = None
    if st.state == "running" and st.step and st.total_steps and len(train) >= 2:
        a, b = train[-2], train[-1]
        ea, eb = _finite(a.fields.get("elapsed")), _finite(b.fields.get("elapsed"))
        if ea is not None and eb is not None and b.step and a.step is not None and b.step > a.step:
            eta = (eb - ea) / (b.step - a.step) * max(0, st.total_steps - st.step)
    c = run.config_record
    model = (run.strategy or "") if run.kind == "adapt" else (
        (c.fields.get("summary") or {}).get("model") if c else None) or run.config.get("supernet") or run.config.get("variant")
    if run.kind == "adapt" and run.config.get("backbone"):
        model = f"{run.strategy} on {str(run.config['backbone']).rstrip('/').split('/')[-1]}"
    return {"name": run.name, "path": str(run.path), "kind": run.kind, "model": model, "strategy": run.strategy,
            "variants": list(run.variants), "state": st.state, "reason": st.reason, "step": st.step,
            "total_steps": st.total_steps, "best_val_loss": run.best_val_loss, "top1": top1,
            "top1_over_ceiling": over, "top1_over_ceiling_from": over_source,
            "legal_rate": _last(val, "legal_rate"), "completion_rate": _last(val, "completion_rate"),
            "tokens_per_s": median("tokens_per_s"), "data_wait_frac": median("data_wait_frac"), "wall_s": elapsed,
            "start": start, "eta_s": eta, "trainable_params": run.trainable_params,
            "positions": run.positions, "positions_label": POSITIONS.get(run.positions, POSITIONS_MIXED),
            "movable_params": run.movable_params, "compute": run.compute}


def checkpoints(run: Run, verify: bool = True) -> list[dict[str, Any]]:
    """The checkpoints table: step, manifest verified (None: not checked, ``verify`` False), best,
    pushed to the Hub (None: never)."""
    return [{"step": c.step, "path": str(c.path), "verified": c.verified, "best": c.is_best, "pushed": c.pushed}
            for c in run.checkpoints(verify=verify)]


def run_evals(run: Run) -> list[dict[str, Any]]:
    """The run's own eval, suite and bench reports (its ``eval*.json`` files,
    :meth:`pawn.runs.Run.eval_reports`) as page entries (:func:`pawn.report.report_entry`: only
    the fields their cards show); a file that is no such report is left out, and one that cannot be
    read (:meth:`pawn.runs.Run.unreadable_reports`: a dangling link, a link loop or a link out of
    the run, a FIFO or device, an oversized file, not JSON) is an entry of kind ``unreadable`` whose
    report is the one line saying why, so the card shows it and the rest of the page stands."""
    from pawn.report import inside, report_entry

    home = run.path.resolve()
    out = []
    for p, d in run.eval_reports():
        entry = report_entry(p, d) if inside(p, home) else None
        if entry is not None:
            out.append(entry)
    out += [unreadable_entry(p, why) for p, why in run.unreadable_reports()]
    return out


def unreadable_entry(path: Path, why: str) -> dict[str, Any]:
    """The page's entry for a report file that cannot be read: ``{"path", "kind": "unreadable",
    "report": {"cannot read": why}}`` (``why``: one line)."""
    return {"path": str(path), "kind": "unreadable", "report": {"cannot read": why}}


def run_data(run: Run, rid: str, verify_checkpoints: bool = True) -> dict[str, Any]:
    """Everything the report embeds for one run under id ``rid`` (``verify_checkpoints``: see
    :func:`checkpoints`)."""
    return {"id": rid, "summary": summary(run), "figures": figures(run), "series": compare_series(run),
            "config": flatten(run.config), "checkpoints": checkpoints(run, verify_checkpoints), "evals": run_evals(run)}
