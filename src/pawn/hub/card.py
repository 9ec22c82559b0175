"""Model cards (``README.md``) for PAWN checkpoints pushed to or exported for the Hugging Face Hub.

The card is built with huggingface_hub's :class:`~huggingface_hub.ModelCard` /
:class:`~huggingface_hub.ModelCardData`: a YAML metadata block the Hub reads (``library_name``,
``tags``, ``license``, ``datasets`` when the training data is a Hub dataset) and a Markdown body
with the architecture (``model_config``, spec ``model-and-checkpoints.md`` §3), the parameter count
(§3.3), the training recipe (the run config stored in the checkpoint's ``config.json``), the
latest validation record of the run and the latest ``pawn eval --json`` report when one is given.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence
from urllib.parse import quote

from pawn.checkpoint import CONFIG_FILE, CheckpointError, read_model_config
from pawn.config import ModelConfig, param_count
from pawn.metrics import METRICS, ViewKeys, eval_values
from pawn.runs import POSITIONS, parse_record, positions_of
from pawn.stats import interval_text

CARD_FILE = "README.md"
LIBRARY_NAME = "pawn"
LICENSE = "gpl-3.0"
"""The Hub's id of PAWN's licence (GPL-3.0-or-later, pyproject.toml)."""
BASE_TAGS = ("pawn", "chess", "jax", "world-model", "transformer")

def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "—" if v is None else str(v)


def _table(rows: Sequence[tuple[str, Any]], head: tuple[str, str] = ("field", "value")) -> str:
    lines = [f"| {head[0]} | {head[1]} |", "|---|---|"]
    lines += [f"| `{k}` | {_fmt(v)} |" for k, v in rows]
    return "\n".join(lines)


def read_checkpoint_config(checkpoint: Path) -> tuple[ModelConfig, dict]:
    """The model config and run config (``{}`` if none) of a v2 checkpoint's ``config.json``.

    Raises:
        CheckpointError: ``config.json`` is missing, not JSON, or its model_config is not v2.
    """
    path = Path(checkpoint) / CONFIG_FILE
    try:
        raw = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: cannot read the checkpoint config ({e.__class__.__name__})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: the top level is not a JSON object")
    run = raw.get("run_config")
    return read_model_config(raw, path), run if isinstance(run, dict) else {}


def latest_eval_json(directory: Path) -> Optional[Path]:
    """The newest ``eval*.json`` file in ``directory`` (where ``pawn eval --json`` reports of a run
    are kept by convention), or None."""
    d = Path(directory)
    found = [p for p in d.glob("eval*.json") if p.is_file()] if d.is_dir() else []
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


CARD_EVAL_METRICS = ViewKeys("card")
"""The :mod:`pawn.metrics` keys of a card's evaluation table (read from ``pawn eval --json``): the rows
of the ``card`` view."""


def _eval_section(report: Mapping[str, Any], source: str) -> list[str]:
    """Markdown lines of a ``pawn eval --json`` report: one row per evaluated model, the
    metrics read through the registry (:func:`pawn.metrics.eval_values`)."""
    out = [f"## Evaluation (`pawn eval`, {source})", ""]
    models = report.get("models") if isinstance(report.get("models"), list) else []
    keys = CARD_EVAL_METRICS
    rows = []
    for m in models:
        rg = m.get("random_games") if isinstance(m, dict) else None
        if isinstance(rg, dict):
            vals = eval_values(rg)
            rows.append((m.get("name", "?"), [METRICS[k].format(vals.get(k)) for k in keys]))
    settings = report.get("settings") if isinstance(report.get("settings"), dict) else {}
    if settings:
        out.append(f"{settings.get('games', '?')} random games, seed {settings.get('seed', '?')}.")
        out.append("")
    if rows:
        out.append("| model | " + " | ".join(METRICS[k].label for k in keys) + " |")
        out.append("|---|" + "---|" * len(keys))
        out += [f"| {name} | " + " | ".join(vals) + " |" for name, vals in rows]
    held = [(m.get("name", "?"), m["held_out"]) for m in models if isinstance(m, dict) and isinstance(m.get("held_out"), dict)]
    held_lines = [line for name, h in held for line in _held_out_lines(name, h)]
    if not rows and not held_lines:
        out.append("(the report holds no random-game results)")
    for m in models:
        rg = m.get("random_games") if isinstance(m, dict) else None
        line = _excess_line(m.get("name", "?"), rg) if isinstance(rg, dict) else None
        if line:
            out += ["", line]
    if held_lines:
        out += ["" if rows else None, *held_lines]
    return [x for x in out if x is not None] + [""]


def _held_out_lines(name: str, h: Mapping[str, Any]) -> list[str]:
    """Markdown lines of a ``held_out`` block of ``pawn eval RUN --split val|test --json`` (an
    adapter's or a model's own held-out Lichess games): legal-masked loss (nats), the excess over a
    player uniform over the legal moves (loss − E[ln N_legal] on the same move decisions, nats) with
    its 95 % interval over games, and legal-masked top-1, for the model, its backbone alone when the
    block has one, and the uniform player; then the adapter − backbone paired differences with their
    intervals. Empty for a block written before these figures."""
    if not isinstance(h.get("excess_nats_all_moves"), (int, float)):
        return []

    def pct(x: Any) -> str:
        return f"{100 * x:.2f} %" if isinstance(x, (int, float)) and math.isfinite(x) else "—"

    def row(who: str, b: Mapping[str, Any]) -> str:
        loss = b.get("loss_legal_masked_all_moves")
        loss_text = f"{loss:.4f}" if isinstance(loss, (int, float)) else "—"
        excess = interval_text(b.get("excess_nats_all_moves"), b.get("excess_nats_lo"), b.get("excess_nats_hi")) or "—"
        return f"| {who} | {loss_text} | {excess} | {pct(b.get('top1_legal_masked_all_moves'))} |"

    split = h.get("split", "held-out")
    bb = h.get("backbone") if isinstance(h.get("backbone"), dict) else None
    lines = [f"Held-out {split} games ({h.get('n_games', '?')} games, {h.get('n_positions', '?')} move decisions; "
             "legal-masked, over every move decision; brackets: 95 % interval over games):", "",
             "| player | loss (nats) | excess over uniform (nats) | top-1 |", "|---|---|---|---|",
             row(f"{name} (adapter)" if bb else name, h)]
    if bb:
        lines.append(row("backbone alone", bb))
    uni = h.get("uniform_loss_all_moves")
    lines.append(f"| uniform over the legal moves | {uni:.4f} | +0 (the reference) | {pct(h.get('uniform_top1_all_moves'))} |"
                 if isinstance(uni, (int, float)) else "| uniform over the legal moves | — | +0 (the reference) | — |")
    vs = h.get("vs_backbone") if isinstance(h.get("vs_backbone"), dict) else {}
    lo, t1 = vs.get("loss_legal_masked_all_moves"), vs.get("top1_legal_masked_all_moves")
    if isinstance(lo, dict) and isinstance(t1, dict):
        lines += ["", f"Adapter − backbone on the same games: loss {interval_text(lo.get('estimate'), lo.get('lo'), lo.get('hi')) or '—'} nats, "
                      f"top-1 {interval_text(t1.get('estimate'), t1.get('lo'), t1.get('hi'), '+.2f', 100) or '—'} pp ({lo.get('method', 'bootstrap over games')})."]
    return lines


def _excess_line(name: str, rg: Mapping[str, Any]) -> Optional[str]:
    """The figure that ranks models on random games, as one sentence of the card: the legal-masked loss
    against the uniform-over-legal player's E[ln N_legal] over the same move decisions, and the excess
    with its 95 % interval over games (None when the report has no such figures)."""
    vals = eval_values(rg)
    ex, lo, hi, loss, uni = (vals.get(k) for k in ("excess_nats", "excess_nats_lo", "excess_nats_hi",
                                                   "legal_masked_loss_all_moves", "uniform_legal_loss"))
    if not all(isinstance(x, (int, float)) for x in (ex, lo, hi, loss, uni)):
        return None
    return (f"{name}: legal-masked loss {loss:.4f} nats against {uni:.4f} for a player uniform over the legal moves "
            f"(E[ln N_legal], the same move decisions): excess {ex:+.4f} nats, 95 % interval [{lo:+.4f}, {hi:+.4f}] over games "
            "(≤ 0 is better than a player that knows only the rules). On random games every legal move is equally likely, "
            "so top-1 / ceiling is about 100 % for any model and cannot rank models; this excess does.")


def _val_rows(last_val: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(label, value)`` rows of a ``val`` record (either schema, :func:`pawn.runs.parse_record`):
    the run's values, then each supernet variant's."""
    rec = parse_record(dict(last_val, type="val"))
    rows = [(METRICS[k].label, METRICS[k].format(v)) for k, v in rec.values.items() if k in METRICS]
    for name, vals in rec.variants.items():
        rows += [(f"{name}: {METRICS[k].label}", METRICS[k].format(v)) for k, v in vals.items() if k in METRICS]
    return rows


def _val_positions(last_val: Mapping[str, Any], run: Mapping[str, Any]) -> str:
    """Which positions a ``val`` record's loss and top-1 count (:data:`pawn.runs.POSITIONS`): by
    its schema, and whether the run config is an adapter's (``strategy``) under the legal mask."""
    rec = parse_record(dict(last_val, type="val"))
    return POSITIONS[positions_of(rec.schema, adapter=bool(run.get("strategy")), legal_mask=not run.get("disable_legal_mask"))]


def model_card(
    config: ModelConfig,
    *,
    run_config: Optional[Mapping[str, Any]] = None,
    title: Optional[str] = None,
    step: Optional[int] = None,
    last_val: Optional[Mapping[str, Any]] = None,
    eval_report: Optional[Mapping[str, Any]] = None,
    eval_source: str = "eval.json",
    repo_id: Optional[str] = None,
    branch: Optional[str] = None,
    checkpoint_path: Optional[str] = None,
    datasets: Sequence[str] = (),
    extra_tags: Sequence[str] = (),
    notes: Sequence[str] = (),
    recipe_fields: Optional[Sequence[str]] = None,
) -> str:
    """The text of a ``README.md`` model card (YAML metadata + Markdown body).

    Args:
        config: the model's architecture (``d_model``, ``n_layers``, …); the parameter count is
            :func:`pawn.config.param_count` of it.
        run_config: the run config stored with the checkpoint (training recipe rows; a
            ``converted_from`` key says which v1 checkpoint it was converted from).
        title: the card's heading (default ``PAWN <config name>``).
        step: the optimizer step of the checkpoint, when it comes from a run.
        last_val: the run's latest ``val`` record at or before ``step`` (``metrics.jsonl``).
        eval_report: a ``pawn eval --json`` report; ``eval_source`` names it in the card.
        repo_id, branch, checkpoint_path: where the checkpoint lives on the Hub, for the
            loading snippet (``pawn.load_model`` of the Hub id ``repo_id@branch/checkpoint_path``,
            the branch ``%2F``-encoded as in huggingface_hub's ``hf://`` paths).
        datasets: Hub dataset ids the model was trained on (metadata ``datasets``); PAWN's
            pretraining data is generated on the fly (random legal games), so none by default.
        extra_tags: tags added to :data:`BASE_TAGS`. notes: extra Markdown paragraphs.
        recipe_fields: the run-config fields shown as the training recipe, in this order, when
            recorded and not None: the fields of the settings class that wrote ``run_config``
            tagged as recipe (``pawn.settings.fields_with(PretrainConfig, RECIPE)``), as the
            trainers' pushes, ``pawn convert`` and ``--merge`` pass them. None: every recorded
            field with a plain value (text, number, bool), for a run config already cut to its recipe.

    Returns:
        The card as a string (``str(ModelCard)``); the metadata passes
        ``ModelCard``'s own parsing (license, library_name, tags, datasets).
    """
    from huggingface_hub import ModelCard, ModelCardData

    run = dict(run_config or {})
    n_params = param_count(config)
    tags = list(dict.fromkeys([*BASE_TAGS, *extra_tags]))
    if run.get("supernet"):
        tags.append("supernet")
    if run.get("converted_from"):
        tags.append("converted-from-v1")
    data = ModelCardData(library_name=LIBRARY_NAME, license=LICENSE, tags=tags, datasets=list(datasets) or None,
                         pipeline_tag=None)
    name = title or f"PAWN {config.name}"
    body = [f"# {name}", ""]
    body.append(
        "A PAWN chess world model: a decoder-only transformer over PAWN's 1,980-token move vocabulary, "
        "trained to predict the next move of games. Checkpoint format: "
        "PAWN v2 (`model.safetensors` with the 16 canonical fp32 tensors, `config.json`, a SHA-256 `.complete` manifest)."
    )
    body.append("")
    if run.get("converted_from"):
        body += [f"Converted from the v1 checkpoint `{run['converted_from']}` with `pawn convert`.", ""]
    body += ["## Architecture", "", _table([*config.to_json_dict().items(), ("head_dim", config.head_dim),
                                             ("parameters", f"{n_params:,}")]), ""]
    shown = recipe_fields if recipe_fields is not None else [k for k, v in run.items() if isinstance(v, (str, int, float, bool))]
    recipe = [(k, run[k]) for k in shown if k in run and run[k] is not None]
    if recipe or step is not None:
        body += ["## Training recipe", ""]
        if step is not None:
            body += [f"This checkpoint is from optimizer step {step:,}" + (f" of {run['total_steps']:,}." if run.get("total_steps") else "."), ""]
        if recipe:
            body += [_table(recipe), ""]
        body += ["Data: random legal games generated on the fly by the PAWN engine (seeded; see `seed`)"
                 + (" read from an on-disk corpus." if run.get("corpus_dir") else "."), ""]
    if last_val:
        rows = _val_rows(last_val)
        if rows:
            body += [f"## Validation at step {last_val.get('step', '?')}", "", _table(rows, ("metric", "value")), "",
                     f"Loss and top-1 count {_val_positions(last_val, run)}.", ""]
    if eval_report:
        body += _eval_section(eval_report, eval_source)
    body += ["## Use", "", "```python", "import pawn"]
    if repo_id:  # a Hub id (pawn.hub.fetch): the folder alone is downloaded and verified
        rev = f"@{quote(branch, safe='')}" if branch and branch != "main" else ""
        body += [f"model, config = pawn.load_model({(repo_id + rev + ('/' + checkpoint_path if checkpoint_path else ''))!r})"]
    else:
        body += ["model, config = pawn.load_model('path/to/this/directory')"]
    body += ["```", ""]
    body += [*notes, ""] if notes else []
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body))
    return str(card)


def card_for_checkpoint(checkpoint: Path, **kwargs: Any) -> str:
    """:func:`model_card` of a v2 checkpoint directory (its ``config.json``: model and run config);
    ``kwargs`` are passed on.

    Raises:
        CheckpointError: unreadable ``config.json``.
    """
    config, run = read_checkpoint_config(Path(checkpoint))
    return model_card(config, run_config=run, **kwargs)


def read_eval_report(path: Path) -> dict:
    """A ``pawn eval --json`` report.

    Raises:
        CheckpointError: the file cannot be read or is not a JSON object (one line naming it).
    """
    try:
        raw = json.loads(Path(path).read_text("utf-8"))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable pawn eval JSON report ({e.__class__.__name__})") from None
    if not isinstance(raw, dict):
        raise CheckpointError(f"{path}: not a pawn eval JSON report (the top level is not an object)")
    return raw
