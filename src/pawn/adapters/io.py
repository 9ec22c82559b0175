"""Adapter checkpoints and merging (spec ``training-and-adapters.md`` §5 "Checkpoints", issue 13
"Using an adapted model"). Sits at the checkpoint layer (it writes with :mod:`pawn.checkpoint`'s
atomic scheme); Hub ids are resolved by the caller (``resolve=``), e.g.
:func:`pawn.evaluate.loading.load_models`.

An adapter checkpoint is a directory::

    adapter.safetensors      trainable adapter arrays and masks (names = pytree paths, e.g.
                             ``adapter.A.wq``, ``adapter.mask.wq``, RoSA ``adapter.sparse.mask.wq``;
                             ``specialized_clm``: ``backbone.<name>``)
    config.json              {"format_version": 1, "model_config": {...backbone shape...},
                              "adapter": {"strategy", "settings", "backbone": {"source", "variant",
                              "sha256"} | null, ["state": {...} e.g. RoSA {"phase": 3}]},
                              ["run_config": {...}]}
    optimizer.safetensors    optional, as in a model checkpoint
    training_state.json      optional
    .complete                SHA-256 manifest, written last
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from pawn.fileio import save_safetensors

from pawn import checkpoint as ck
from pawn.adapters.adapted import AdaptedModel, build_adapted
from pawn.adapters.errors import AdapterError
from pawn.adapters.registry import get_strategy
from pawn.adapters.strategies.specialized_clm import specialized_config
from pawn.config import SUPERNETS
from pawn.model import PAWNModel, sliced

ADAPTER_FILE = "adapter.safetensors"

ADAPTER_FORMAT_VERSION = 1
"""Version of the adapter part of an adapter checkpoint (``config.json`` ``adapter.format_version``;
absent in checkpoints written before it existed, which are version 1), separate from the model
format (:data:`pawn.checkpoint.FORMAT_VERSION`, the top-level ``format_version``)."""

ADAPTER_MIGRATIONS: dict[int, Callable[[dict], dict]] = {}
"""``adapter`` section migrations, as :data:`pawn.checkpoint.MIGRATIONS`: ``ADAPTER_MIGRATIONS[v]``
turns a version-``v`` ``adapter`` section into version ``v + 1``."""


class BackboneMismatchError(ck.CheckpointError):
    """The backbone found for an adapter checkpoint is not the one it was trained on: its
    ``model.safetensors`` SHA-256 differs from the recorded one (the message names both)."""


@dataclass(frozen=True)
class BackboneRef:
    """Which backbone an adapter belongs to.

    Attributes:
        source: Hub id, or the absolute path of the backbone checkpoint directory.
        variant: nested variant name when the backbone is a supernet checkpoint, else None.
        sha256: hex SHA-256 of the backbone checkpoint's ``model.safetensors``.
    """

    source: str
    variant: Optional[str]
    sha256: str

    def to_json(self) -> dict:
        return {"source": self.source, "variant": self.variant, "sha256": self.sha256}


def is_adapter_checkpoint(path: str | os.PathLike) -> bool:
    """True if ``path`` is a directory holding ``adapter.safetensors``."""
    return (Path(path) / ADAPTER_FILE).is_file()


def _model_digest(directory: Path) -> str:
    # Called after load_checkpoint verified every hash against the manifest.
    return json.loads((directory / ck.MANIFEST).read_text("utf-8"))["files"][ck.MODEL_FILE]


def not_a_backbone(directory: str | os.PathLike) -> str:
    """One line for an adapter checkpoint given where a backbone is expected: its strategy and
    the backbone it records (was: "model.safetensors is missing")."""
    d = Path(directory)
    try:
        meta = json.loads((d / ck.CONFIG_FILE).read_text("utf-8")).get("adapter") or {}
    except (OSError, ValueError, AttributeError):
        meta = {}
    strategy = meta.get("strategy") if isinstance(meta, dict) else None
    rec = meta.get("backbone") if isinstance(meta, dict) else None
    src = rec.get("source") if isinstance(rec, dict) else None
    variant = rec.get("variant") if isinstance(rec, dict) else None
    what = f"a {strategy} adapter checkpoint" if strategy else "an adapter checkpoint"
    on = (f" for the backbone {src}" + (f" (variant {variant})" if variant else "")) if src else ""
    hint = f"; give that backbone ({src})" if src else "; give its backbone"
    return (f"{d}: {what}{on}, not a backbone{hint}, or fold the adapter in first with "
            f"`pawn convert {d} --merge` (lora, sparse, unfreeze, specialized_clm)")


def load_backbone(directory: str | os.PathLike, variant: Optional[str] = None, source: Optional[str] = None):
    """Load a backbone checkpoint directory (hashes verified) and its reference.

    Args:
        directory: a local v2 checkpoint directory.
        variant: a nested variant of a supernet checkpoint (``small``/``base``/``large``), or None.
        source: what to record as its source (a Hub id the directory was converted from);
            default the directory's absolute path.

    Returns:
        ``(PAWNModel, BackboneRef, run_config or None)``.

    Raises:
        CheckpointError (and subclasses), FileNotFoundError: see :func:`pawn.checkpoint.load_checkpoint`;
        AdapterError: ``variant`` given for a checkpoint that is not a supernet, or unknown;
            ``directory`` is an adapter checkpoint (the line names the backbone it records).
    """
    if is_adapter_checkpoint(directory) and not (Path(directory) / ck.MODEL_FILE).is_file():
        raise AdapterError(not_a_backbone(directory))
    c = ck.load_checkpoint(directory)
    model = PAWNModel(c.config, params=c.params)
    if variant is not None:
        sup = next((vs for s, vs in SUPERNETS.values() if s == c.config), None)
        if sup is None or variant not in sup:
            raise AdapterError(f"{c.path}: variant {variant!r} is not a nested variant of this checkpoint's model")
        model = sliced(model, sup[variant])
    ref = BackboneRef(source or str(Path(directory).resolve()), variant, _model_digest(c.path))
    return model, ref, c.run_config


def _named_leaves(tree, prefix: str) -> list[tuple[str, Any]]:
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        parts = [prefix]
        for p in path:
            parts.append(str(getattr(p, "name", getattr(p, "key", getattr(p, "idx", p)))))
        out.append((".".join(parts), leaf))
    return out


def _replace_named(model: AdaptedModel, arrays: dict[str, Any]) -> AdaptedModel:
    """``model`` with the leaves named in ``arrays`` (names of :func:`_saved_leaves`) replaced."""
    adapter = _replace_in(model.adapter, "adapter", arrays)
    backbone = _replace_in(model.backbone, "backbone", arrays) if model.adapter.trains_backbone else model.backbone
    return AdaptedModel(backbone, adapter, model.strategy, model.settings)


def _replace_in(tree, prefix: str, arrays: dict[str, Any]):
    named = _named_leaves(tree, prefix)
    treedef = jax.tree_util.tree_structure(tree)
    return jax.tree_util.tree_unflatten(treedef, [arrays.get(n, x) for n, x in named])


def _saved_leaves(model: AdaptedModel) -> list[tuple[str, Any]]:
    leaves = [(n, x) for n, x in _named_leaves(model.adapter, "adapter") if eqx.is_array(x)]
    if model.adapter.trains_backbone:
        leaves += _named_leaves(model.backbone, "backbone")
    return leaves


def save_adapter(
    path: str | os.PathLike,
    model: AdaptedModel,
    backbone: Optional[BackboneRef],
    *,
    run_config: Optional[dict] = None,
    optimizer_state: Optional[dict[str, Any]] = None,
    training_state: Optional[dict] = None,
) -> Path:
    """Write an adapter checkpoint directory atomically (staging dir, manifest last, rename;
    :func:`pawn.checkpoint.write_checkpoint_dir`).

    Args:
        path: the directory to create or replace.
        model: the adapted model; its adapter arrays (and masks) are saved, the frozen backbone is not.
        backbone: the backbone reference (:func:`load_backbone`); None only for ``specialized_clm``.
        run_config, optimizer_state, training_state: as :func:`pawn.checkpoint.save_checkpoint`.

    Raises:
        AdapterError: no backbone reference for a strategy that has a backbone.
    """
    if backbone is None and get_strategy(model.strategy).uses_backbone:
        raise AdapterError(f"{path}: a {model.strategy} adapter checkpoint must record its backbone")
    tensors = {n: np.ascontiguousarray(np.asarray(x)) for n, x in _saved_leaves(model)}
    cfg: dict[str, Any] = {
        "format_version": ck.FORMAT_VERSION,
        "model_config": model.config.to_json_dict(),
        "adapter": {
            "format_version": ADAPTER_FORMAT_VERSION,
            "strategy": model.strategy,
            "settings": model.settings.model_dump(mode="json"),
            "backbone": None if backbone is None else backbone.to_json(),
            "trainable_params": model.num_trainable_params(),
        },
    }
    if model.adapter.checkpoint_state():
        cfg["adapter"]["state"] = model.adapter.checkpoint_state()
    if run_config is not None:
        cfg["run_config"] = run_config

    def fill(staging: Path) -> None:
        save_safetensors(tensors, staging / ADAPTER_FILE)
        ck.write_json(staging / ck.CONFIG_FILE, cfg)
        ck.write_training_files(staging, optimizer_state, training_state)

    return ck.write_checkpoint_dir(path, fill)


@dataclass
class LoadedAdapter:
    """An adapter checkpoint read back.

    Attributes:
        path: the adapter directory. model: the :class:`AdaptedModel`. backbone: its
        :class:`BackboneRef` (None for ``specialized_clm``). run_config: the adapter run's config.
        backbone_run_config: the backbone checkpoint's run config. optimizer_state,
        training_state: as stored, or None.
    """

    path: Path
    model: AdaptedModel
    backbone: Optional[BackboneRef]
    run_config: Optional[dict]
    backbone_run_config: Optional[dict]
    optimizer_state: Optional[dict[str, np.ndarray]]
    training_state: Optional[dict]


def load_adapter(
    path: str | os.PathLike,
    *,
    backbone_dir: Optional[str | os.PathLike] = None,
    resolve: Optional[Callable[[str], str]] = None,
) -> LoadedAdapter:
    """Verify and load an adapter checkpoint with its backbone.

    Args:
        path: the adapter checkpoint directory.
        backbone_dir: where the backbone checkpoint is now (default: the recorded source).
        resolve: maps a recorded source that is not a local directory (a Hub id) to a local
            checkpoint directory (e.g. ``pawn.convert.convert(src).path``).

    Raises:
        FileNotFoundError, CheckpointError (and subclasses): missing or damaged files (manifest
            rules of :func:`pawn.checkpoint.verify_manifest`), a tensor missing, extra or of the
            wrong shape (named);
        BackboneMismatchError: the backbone's ``model.safetensors`` hash is not the recorded one;
        AdapterError: a Hub-id backbone with no ``resolve``; AdapterConfigError: bad settings.
    """
    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(ck.not_a_checkpoint_dir(d, "adapter checkpoint"))
    files = ck.verify_manifest(d)
    if ADAPTER_FILE not in files and ck.MODEL_FILE in files:
        raise AdapterError(f"{d}: a backbone (model) checkpoint, not an adapter checkpoint (it has {ck.MODEL_FILE}, no {ADAPTER_FILE})")
    for required in (ADAPTER_FILE, ck.CONFIG_FILE):
        if required not in files:
            raise ck.CheckpointIntegrityError(f"{d}: {required} is missing")
    cfg = ck._read_json(d / ck.CONFIG_FILE)
    if not isinstance(cfg, dict) or not isinstance(cfg.get("adapter"), dict):
        raise ck.CheckpointIntegrityError(f"{d / ck.CONFIG_FILE}: no adapter section")
    cfg = ck.migrate_config(cfg, d / ck.CONFIG_FILE)
    config = ck.read_model_config(cfg, d / ck.CONFIG_FILE)
    meta = ck.migrate_config({"format_version": 1, **cfg["adapter"]}, d / ck.CONFIG_FILE / "adapter",
                             current=ADAPTER_FORMAT_VERSION, migrations=ADAPTER_MIGRATIONS)
    st = get_strategy(str(meta.get("strategy")))
    settings = st.parse(meta.get("settings") or {})
    ref, bb, bb_run = None, None, None
    if st.uses_backbone:
        rec = meta.get("backbone")
        if not isinstance(rec, dict) or not {"source", "sha256"} <= set(rec):
            raise ck.CheckpointIntegrityError(f"{d / ck.CONFIG_FILE}: adapter.backbone must record source and sha256")
        src = str(rec["source"])
        where = backbone_dir
        if where is None:
            if Path(src).is_dir():
                where = src
            elif resolve is not None:
                where = resolve(src)
            else:
                raise AdapterError(f"{d}: backbone {src} is not a local directory; give its location")
        bb, ref, bb_run = load_backbone(where, rec.get("variant"), source=src)
        if ref.sha256 != rec["sha256"]:
            raise BackboneMismatchError(
                f"{d}: backbone {where} has model.safetensors SHA-256 {ref.sha256}, "
                f"but the adapter was trained on {rec['sha256']}"
            )
        if bb.config != config:
            raise BackboneMismatchError(f"{d}: backbone {where} has shape {bb.config.name}, the adapter needs {config.name}")
    else:
        config = specialized_config(settings, config)
    if st.uses_backbone:
        fresh = build_adapted(st.name, settings, bb, jax.random.PRNGKey(0))
    else:  # the stored model's own config (vocabulary, context) is the one to rebuild
        fresh = AdaptedModel(PAWNModel(config, jax.random.PRNGKey(0)), st.build(settings, None, jax.random.PRNGKey(0)), st.name, settings)
    state = meta.get("state") or {}
    if not isinstance(state, dict):
        raise ck.CheckpointIntegrityError(f"{d / ck.CONFIG_FILE}: adapter.state must be an object")
    fresh = AdaptedModel(fresh.backbone, fresh.adapter.restore_state(state), fresh.strategy, fresh.settings)
    tensors = ck._read_tensors(d / ADAPTER_FILE)
    wanted = dict(_saved_leaves(fresh))
    missing, extra = sorted(set(wanted) - set(tensors)), sorted(set(tensors) - set(wanted))
    if missing or extra:
        raise ck.CheckpointIntegrityError(f"{d / ADAPTER_FILE}: tensors missing {missing}, unexpected {extra}")
    for n, x in wanted.items():
        if tuple(tensors[n].shape) != tuple(x.shape) or tensors[n].dtype != np.dtype(x.dtype):
            raise ck.CheckpointIntegrityError(
                f"{d / ADAPTER_FILE}: tensor {n} is {tensors[n].dtype}{list(tensors[n].shape)}, expected {np.dtype(x.dtype)}{list(x.shape)}"
            )
    model = _replace_named(fresh, {n: jnp.asarray(tensors[n]) for n in wanted})
    opt = ck._read_tensors(d / ck.OPTIMIZER_FILE) if ck.OPTIMIZER_FILE in files else None
    ts = ck._read_json(d / ck.TRAINING_STATE_FILE) if ck.TRAINING_STATE_FILE in files else None
    return LoadedAdapter(d, model, ref, cfg.get("run_config"), bb_run, opt, ts)


def save_merged(path: str | os.PathLike, model: AdaptedModel, *, run_config: Optional[dict] = None,
                backbone: Optional[BackboneRef] = None, recipe_fields: Optional[Sequence[str]] = None) -> Path:
    """Fold a ``lora``/``sparse``/``unfreeze``/``specialized_clm`` adapter into a standalone v2
    checkpoint (loads with :func:`pawn.checkpoint.load_model`; same logits up to float rounding),
    with a ``README.md`` model card (:func:`pawn.hub.card.model_card`; its training recipe the
    run config's ``recipe_fields``) as every converted checkpoint has. The run config gains
    ``merged_adapter`` (strategy, settings, backbone).

    Raises:
        AdapterError: a strategy that cannot be merged (film, bottleneck, hybrid).
    """
    from pawn.hub.card import CARD_FILE, model_card

    params = model.merged_params()
    rc = dict(run_config or {})
    rc["merged_adapter"] = {"strategy": model.strategy, "settings": model.settings.model_dump(mode="json"),
                            "backbone": None if backbone is None else backbone.to_json()}
    origin = rc.get("merged_from")
    notes = [f"Merged by `pawn convert --merge`: the {model.strategy} adapter"
             + (f" `{origin}`" if origin else "") + " folded into its backbone"
             + (f" `{backbone.source}` (model.safetensors SHA-256 {backbone.sha256[:12]}…)" if backbone is not None else "")
             + "; same logits as the adapter up to float rounding."]
    card = model_card(model.config, run_config=rc, title=f"PAWN {model.config.name} + merged {model.strategy} adapter", notes=notes,
                      recipe_fields=recipe_fields)
    return ck.save_checkpoint(path, params, model.config, run_config=rc, extra_files={CARD_FILE: card.encode("utf-8")})


def merge_adapter_checkpoint(path: str | os.PathLike, output: Optional[str | os.PathLike] = None, *,
                             resolve: Optional[Callable[[str], str]] = None, recipe_fields: Optional[Sequence[str]] = None) -> Path:
    """Load the adapter checkpoint at ``path`` (backbone verified by its SHA-256) and write it,
    folded into its backbone, as a standalone v2 checkpoint (:func:`save_merged`). The backbone's
    run config (sequence layout, trained context) is kept, so ``pawn eval`` scores the merged
    model as it scores the adapter.

    Args:
        path: the adapter checkpoint directory (e.g. ``RUN/best``).
        output: destination; default the sibling ``<path name>-merged``. It must be missing, an
            empty directory, or an earlier merge of the same adapter (its run config's
            ``merged_from``), which is replaced; anything else is refused, nothing changed.
        resolve: maps a Hub-id backbone to a local checkpoint directory (see :func:`load_adapter`).
        recipe_fields: the backbone run config's fields the card shows as the training recipe
            (the pretraining settings' fields tagged as recipe, ``pawn.settings.fields_with``).

    Returns:
        The merged checkpoint directory.

    Raises:
        CheckpointTargetError: ``output`` is not a valid target (see
            :func:`pawn.checkpoint.check_output_target`); checked before loading anything.
        AdapterError: a strategy that cannot be merged (film, bottleneck, hybrid, ...); plus the
            errors of :func:`load_adapter`.
    """
    src = Path(path).resolve()
    out = Path(output) if output is not None else src.with_name(src.name + "-merged")
    ck.check_output_target(out, {"merged_from": str(src)}, f"a merge of {src}")  # before any work
    la = load_adapter(src, resolve=resolve)
    return save_merged(out, la.model, run_config={**(la.backbone_run_config or {}), "merged_from": str(src)}, backbone=la.backbone,
                       recipe_fields=recipe_fields)
