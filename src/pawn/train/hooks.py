"""Run hooks: what else happens to each record a run writes to ``metrics.jsonl``.

:class:`~pawn.train.metrics.MetricsLogger` writes every record (``config``, ``train``, ``val``;
spec ``eval-probe-generate-sweep-bench.md`` §8.1) and then hands it, as written (timestamp,
elapsed, memory, NaN as ``None``), to its hooks, so a trainer calls hooks without knowing them:

- :class:`CurvesHook` — ``curves.png`` in the run directory at every validation and at the end
  (matplotlib, the ``plot`` extra; Agg backend, written atomically);
- the sinks a command passes (``sinks``): :class:`pawn.report.hook.ReportHook` writes
  ``report.html`` beside the curves at the same moments (``pawn pretrain``/``adapt``/``sweep``
  pass it when plotly, the ``report`` extra, is installed);
- :class:`TensorBoardHook` — scalars under ``RUN/tensorboard/`` (tensorboardX, the
  ``tensorboard`` extra);
- :class:`WandbHook` — Weights & Biases (the ``wandb`` extra; spec §8.3: project ``pawn`` unless
  ``--wandb-project`` or ``WANDB_PROJECT``, run name and group = run directory name, the run
  config as W&B config, modes online/offline/disabled).

A hook that fails while the run is going (a full disk under ``curves.png``, a W&B hiccup) is
reported in one line and switched off; the run goes on. Opening a hook (a missing package,
``wandb.init`` failing) is fatal, before the run starts (:class:`HookError`).
"""

from __future__ import annotations

from pawn.errors import PawnError
import importlib.util
import json
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Protocol, Sequence, runtime_checkable

CURVES_FILE = "curves.png"
TENSORBOARD_DIR = "tensorboard"

EXTRAS = {"matplotlib": "plot", "tensorboardX": "tensorboard", "wandb": "wandb"}
"""Import name → ``pawn[extra]`` that installs it."""


class HookError(PawnError, RuntimeError):
    """A hook that cannot be opened (missing package, W&B init failure); one-line message."""


@runtime_checkable
class RunHook(Protocol):
    """Receives every record a run writes.

    ``on_record(kind, record)``: ``kind`` is ``"config"``, ``"train"`` or ``"val"``; ``record``
    is the JSON-ready dict as written to ``metrics.jsonl`` (``step`` on train/val records).
    ``close()``: the run ended (normally or not); flush and release resources.
    """

    def on_record(self, kind: str, record: dict) -> None: ...

    def close(self) -> None: ...


class RunHooks:
    """Fan a record out to several hooks. A hook that raises is reported through ``log`` in one
    line and dropped, so a plotting or logging problem never stops a training run.

    Args:
        hooks: the hooks, called in order.
        log: receives the one-line warnings.
    """

    def __init__(self, hooks: Iterable[RunHook] = (), log: Callable[[str], None] = print):
        self.hooks: list[RunHook] = list(hooks)
        self._log = log

    def __len__(self) -> int:
        return len(self.hooks)

    def _drop(self, hook: RunHook, what: str, e: BaseException) -> None:
        self._log(f"WARNING: {type(hook).__name__} failed {what} ({type(e).__name__}: {' '.join(str(e).split())[:200]}); "
                  "it is switched off, the run goes on")

    def on_record(self, kind: str, record: dict) -> None:
        """Pass the record to every hook; drop hooks that raise (``Exception`` only)."""
        for h in list(self.hooks):
            try:
                h.on_record(kind, record)
            except Exception as e:
                self.hooks.remove(h)
                self._drop(h, f"on a {kind} record", e)

    def close(self) -> None:
        """Close every hook; a failure is a one-line warning, the others still close."""
        hooks, self.hooks = self.hooks, []
        for h in hooks:
            try:
                h.close()
            except Exception as e:
                self._drop(h, "when closing", e)


def scalars(kind: str, record: Mapping[str, Any]) -> dict[str, float]:
    """The numbers of a ``train`` or ``val`` record as ``{tag: value}`` for TensorBoard and W&B,
    read through the run record (:func:`pawn.runs.parse_record`, so both schemas give the same
    tags): ``<kind>/<metric key>`` for the run's values (``train/loss``, ``train/lr``,
    ``val/top1``: spec §8.3), ``<kind>/<variant>/<metric key>`` per supernet variant
    (``val/small/loss``), ``mem/<name>`` (GiB) and ``weights/<name>`` (an adapter's weight
    report, val records). ``None`` (NaN) is left out. Other kinds of record (``hub`` push
    outcomes, written later than the steps they name; ``end``) give no scalars."""
    from pawn.runs import parse_record

    out: dict[str, float] = {}
    if kind not in ("train", "val"):
        return out
    rec = parse_record(dict(record, type=kind))

    def put(tag: str, v: Any) -> None:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[tag] = float(v)

    for k, v in rec.values.items():
        put(f"{kind}/{k}", v)
    for name, vals in rec.variants.items():
        for k, v in vals.items():
            put(f"{kind}/{name}/{k}", v)
    for group in ("mem", "weights"):
        for k, v in (rec.fields.get(group) or {}).items():
            put(f"{group}/{k}", v)
    return out


# ----------------------------------------------------------------------------- curves
def curve_series(records: Sequence[Any]) -> dict[str, dict[str, tuple[list[int], list[float]]]]:
    """What :func:`plot_curves` draws: ``{panel: {line label: (steps, values)}}`` from a run's
    records (:class:`pawn.runs.Record`, or the dicts of ``metrics.jsonl`` lines in either schema;
    the last record per step wins, so a resumed run's re-done steps do not draw twice). The same
    panels for pretraining and adapter runs:

    - ``"loss"``: ``train`` (or ``train (joint)`` for a supernet) and ``train <variant>``,
      ``val`` or ``val <variant>``;
    - ``"top-1 accuracy"``: the same lines of ``top1``;
    - ``"val legal-move rate"``: ``legal_rate`` of the run or of each variant (pretraining);
    - ``"learning rate"``: ``lr``;
    - ``"tokens/s"``: ``tokens_per_s`` of chunks that did not include compilation.
    """
    from pawn.runs import Record, last_per_step, parse_records

    recs = list(records) if all(isinstance(r, Record) for r in records) else parse_records(records)
    train = last_per_step(r for r in recs if r.type == "train")
    val = last_per_step(r for r in recs if r.type == "val")
    panels: dict[str, dict[str, tuple[list[int], list[float]]]] = {}

    def add(panel: str, label: str, step: int, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return
        xs, ys = panels.setdefault(panel, {}).setdefault(label, ([], []))
        xs.append(step)
        ys.append(float(value))

    for r in train:
        add("loss", "train (joint)" if r.variants else "train", r.step, r.values.get("loss"))
        if r.variants:
            for name, vals in r.variants.items():
                add("loss", f"train {name}", r.step, vals.get("loss"))
                add("top-1 accuracy", f"train {name}", r.step, vals.get("top1"))
        else:
            add("top-1 accuracy", "train", r.step, r.values.get("top1"))
        add("learning rate", "lr", r.step, r.values.get("lr"))
        if not r.fields.get("includes_compile"):
            add("tokens/s", "tokens/s", r.step, r.values.get("tokens_per_s"))
    for r in val:
        models = r.variants or {"": r.values}
        for name, vals in models.items():
            add("loss", f"val {name}".rstrip(), r.step, vals.get("loss"))
            add("top-1 accuracy", f"val {name}".rstrip(), r.step, vals.get("top1"))
            add("val legal-move rate", name or "val", r.step, vals.get("legal_rate"))
    order = ("loss", "top-1 accuracy", "val legal-move rate", "learning rate", "tokens/s")
    return {p: panels[p] for p in order if p in panels}


def plot_curves(records: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> bool:
    """Draw :func:`curve_series` of ``records`` as one PNG, one panel per series group, and write
    it atomically (``path.tmp.png`` then rename). Uses matplotlib's Agg canvas directly (no
    pyplot state, safe in headless runs).

    Returns:
        True when a PNG was written, False when the records hold nothing to draw yet.

    Raises:
        ImportError: matplotlib is not installed. OSError: the file cannot be written.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    series = curve_series(records)
    if not series:
        return False
    n = len(series)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(6.0 * cols, 3.6 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (panel, lines) in zip(axes, series.items()):
        for label, (xs, ys) in lines.items():
            style = {"linestyle": "--", "marker": "o", "markersize": 3} if label.startswith("val ") or panel.startswith("val ") else {}
            ax.plot(xs, ys, label=label, **style)
        ax.set_title(panel)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        if panel == "learning rate":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
        if len(lines) > 1:
            ax.legend(fontsize="small")
    for ax in axes[n:]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    from pawn.fileio import atomic_output

    with atomic_output(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return True


class CurvesHook:
    """Write ``curves.png`` (:func:`plot_curves`) from the run's ``metrics.jsonl`` at every
    ``val`` record and when the run closes. It reads the whole file each time, so a resumed run's
    curves include the earlier segments.

    Args:
        metrics_path: the run's ``metrics.jsonl`` (written by the logger before hooks run).
        png_path: the image (default ``curves.png`` beside ``metrics_path``).
        title: figure title (the run directory name).
    """

    def __init__(self, metrics_path: Path, png_path: Optional[Path] = None, title: str = ""):
        self.metrics_path = Path(metrics_path)
        self.png_path = Path(png_path) if png_path is not None else self.metrics_path.with_name(CURVES_FILE)
        self.title = title
        self._dirty = False

    def _draw(self) -> None:
        from pawn.runs import read_records

        plot_curves(read_records(self.metrics_path)[0], self.png_path, self.title)
        self._dirty = False

    def on_record(self, kind: str, record: dict) -> None:
        if kind == "val":
            self._draw()
        elif kind == "train":
            self._dirty = True

    def close(self) -> None:
        if self._dirty:
            self._draw()


# ----------------------------------------------------------------------------- TensorBoard
class TensorBoardHook:
    """Scalars of every ``train``/``val`` record (:func:`scalars`) at the record's step, and the
    ``config`` record as JSON text (tag ``config``), through a tensorboardX ``SummaryWriter``.

    Args:
        logdir: the event-file directory (``RUN/tensorboard``).
        purge_step: on resume, the first step this segment writes: events an earlier segment
            wrote at or after it (steps redone after the checkpoint) are hidden by TensorBoard.
        writer_factory: builds the writer (``tensorboardX.SummaryWriter`` by default; tests pass
            a fake with ``add_scalar``, ``add_text``, ``flush``, ``close``).

    Raises:
        HookError: tensorboardX is not installed.
    """

    def __init__(self, logdir: Path, *, purge_step: Optional[int] = None, writer_factory: Optional[Callable[..., Any]] = None):
        if writer_factory is None:
            try:
                from tensorboardX import SummaryWriter
            except ImportError:
                raise HookError(missing_extra("tensorboardX", "--tensorboard")) from None
            writer_factory = SummaryWriter
        self.logdir = Path(logdir)
        kwargs = {"purge_step": purge_step} if purge_step else {}
        self.writer = writer_factory(str(self.logdir), **kwargs)

    def on_record(self, kind: str, record: dict) -> None:
        if kind == "config":
            self.writer.add_text("config", "```\n" + json.dumps(record, indent=2, default=str) + "\n```")
            return
        step = record.get("step")
        if not isinstance(step, int):
            return
        for tag, value in scalars(kind, record).items():
            self.writer.add_scalar(tag, value, step)
        if kind == "val":
            self.writer.flush()

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


# ----------------------------------------------------------------------------- Weights & Biases
def wandb_project(project: Optional[str]) -> str:
    """The W&B project (spec §8.3): ``project`` if given, else ``$WANDB_PROJECT``, else ``pawn``."""
    return project or os.environ.get("WANDB_PROJECT") or "pawn"


class WandbHook:
    """Log every ``train``/``val`` record to a W&B run at its step (:func:`scalars`: train fields
    as ``train/<key>``, val fields under their JSONL keys) and merge the ``config`` record
    (summary, run and model config) into the run's config. No artifacts (spec §8.3).

    Args:
        run_dir: the run directory: W&B writes ``run_dir/wandb/``; its name is the W&B run name
            and group (segments of a resumed run share the group).
        config: the run config (``PretrainConfig`` as JSON), the W&B config.
        project: see :func:`wandb_project`. mode: ``online``, ``offline`` (no network; sync later
            with ``wandb sync``) or ``disabled``.
        job_type: ``pretrain`` (``adapt`` later); also the ``run_type:`` tag.
        init: ``wandb.init`` by default; tests pass a fake returning an object with ``log``,
            ``config.update`` and ``finish``.

    Raises:
        HookError: wandb is not installed, or ``wandb.init`` failed (e.g. online without login).
    """

    def __init__(self, run_dir: Path, config: Mapping[str, Any], *, project: Optional[str] = None, mode: str = "online",
                 job_type: str = "pretrain", init: Optional[Callable[..., Any]] = None):
        if init is None:
            try:
                import wandb
            except ImportError:
                raise HookError(missing_extra("wandb", "--wandb")) from None
            init = wandb.init
        run_dir = Path(run_dir)
        self.project = wandb_project(project)
        try:
            self.run = init(project=self.project, name=run_dir.name, group=run_dir.name, dir=str(run_dir), mode=mode,
                            job_type=job_type, config={**config, "run_dir": str(run_dir), "run_type": job_type},
                            tags=[f"run_type:{job_type}"], reinit="create_new")
        except Exception as e:  # wandb raises its own error types (UsageError, CommError, ...)
            raise HookError(f"--wandb: wandb.init failed in {mode} mode ({type(e).__name__}: {' '.join(str(e).split())[:300]}); "
                            "use --wandb-mode offline to log without a network") from None

    def on_record(self, kind: str, record: dict) -> None:
        if kind == "config":
            self.run.config.update({k: v for k, v in record.items() if k not in ("type", "timestamp", "elapsed")},
                                   allow_val_change=True)
            return
        step = record.get("step")
        if isinstance(step, int) and kind in ("train", "val"):  # W&B steps only go forward
            self.run.log(scalars(kind, record), step=step)

    def close(self) -> None:
        self.run.finish()


# ----------------------------------------------------------------------------- building
def missing_extra(module: str, flag: str) -> str:
    """One-line message for a flag whose optional package is missing."""
    extra = EXTRAS[module]
    return f"{flag} needs {module}, which is not installed: pip install 'pawn[{extra}]' (or pip install {module})"


def has_module(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    return importlib.util.find_spec(module) is not None


def check_extras(*, tensorboard: bool = False, wandb: bool = False) -> None:
    """Before any work: the packages the asked-for hooks need are installed.

    Raises:
        HookError: one line naming the flag and the extra to install.
    """
    if tensorboard and not has_module("tensorboardX"):
        raise HookError(missing_extra("tensorboardX", "--tensorboard"))
    if wandb and not has_module("wandb"):
        raise HookError(missing_extra("wandb", "--wandb"))


_NOTED: dict[str, bool] = {"matplotlib": False}
"""Notes already given in this process (:func:`open_run_hooks` says a missing matplotlib once)."""


def open_run_hooks(run_dir: Path, *, config: Mapping[str, Any], tensorboard: bool = False, wandb: bool = False,
                   wandb_project: Optional[str] = None, wandb_mode: str = "online", start_step: int = 0,
                   job_type: str = "pretrain", curves: bool = True, sinks: Sequence[Callable[[Path], RunHook]] = (),
                   log: Callable[[str], None] = print) -> RunHooks:
    """The hooks of a run writing ``run_dir/metrics.jsonl``: curves (when matplotlib is
    installed; otherwise one note, the first time in the process), the ``sinks`` the caller passes (each ``factory(run_dir)``;
    e.g. :class:`pawn.report.hook.ReportHook`), TensorBoard and W&B when asked for.

    Call it when the run directory exists and nothing of the new run is written yet; a W&B init
    failure then leaves no run behind (``run_dir/wandb`` is not a run marker).

    Args:
        run_dir: the run directory. config: the run config (W&B config).
        tensorboard, wandb, wandb_project, wandb_mode: the run's settings.
        start_step: the step the run (re)starts at (TensorBoard purges later events on resume).
        job_type: the kind of run (``pretrain``). curves: write ``curves.png``.
        sinks: factories of further record sinks, opened in order after the curves.
        log: receives the note about a missing matplotlib and hook warnings.

    Raises:
        HookError: a missing package, or W&B init failed (hooks opened so far are closed).
    """
    run_dir = Path(run_dir)
    hooks = RunHooks(log=log)
    try:
        if curves:
            if has_module("matplotlib"):
                hooks.hooks.append(CurvesHook(run_dir / "metrics.jsonl", run_dir / CURVES_FILE, title=run_dir.name))
            elif not _NOTED["matplotlib"]:  # once per process: a sweep's trials would each repeat it
                _NOTED["matplotlib"] = True
                log(f"note: matplotlib is not installed, so no {CURVES_FILE} is drawn for this or later runs of this "
                    "process (pip install 'pawn[plot]')")
        for factory in sinks:  # sinks of higher layers (pawn.report's report.html), passed by the command
            hooks.hooks.append(factory(run_dir))
        if tensorboard:
            hooks.hooks.append(TensorBoardHook(run_dir / TENSORBOARD_DIR, purge_step=start_step + 1 if start_step else None))
        if wandb:
            hooks.hooks.append(WandbHook(run_dir, config, project=wandb_project, mode=wandb_mode, job_type=job_type))
    except BaseException:
        hooks.close()
        raise
    return hooks
