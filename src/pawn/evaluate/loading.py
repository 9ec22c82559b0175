"""Load the model(s) a command evaluates: a v2 checkpoint, every nested variant of a supernet
checkpoint, a Hub id converted on the fly (spec ``model-and-checkpoints.md`` §3.5, §5, §6), or an
adapter checkpoint with its backbone (spec ``training-and-adapters.md`` §4–§5)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from pawn import checkpoint
from pawn.adapters.io import is_adapter_checkpoint
from pawn.adapters.peft import is_peft_folder, not_a_model
from pawn.config import SUPERNETS, ModelConfig, supernet_of
from pawn.convert import ConversionError, fetch_source, load_fetched, load_source, not_local_nor_hub, refuse_corrupt
from pawn.hub.fetch import HubDownloadError
from pawn.data.layout import Layout
from pawn.errors import UsageError


@dataclass
class LoadedModel:
    """One model to evaluate.

    Attributes:
        name: ``"<supernet>/<variant>"`` for a nested variant, else the config's shape name.
        model: the :class:`pawn.model.PAWNModel`.
        config: its :class:`ModelConfig`.
        layout: the :class:`~pawn.data.layout.Layout` it was trained with, when the checkpoint
            records it (``run_config["prepend_outcome"]``), else None (unknown; published models
            are pure-moves). :meth:`Layout.resolve` turns it and a command's flag into the
            layout to use.
        source: the path or Hub id given.
        trained_seq_len: the sequence length the checkpoint was trained at
            (``run_config["seq_len"]``, tokens incl. the outcome prefix), else None (unknown;
            published models were trained at their full 512-token context).
        hub: for a Hub id, the checkpoint actually used (:meth:`pawn.hub.fetch.HubSnapshot.record`:
            id, resolved commit, pinned id, and why the cache was used without the Hub), else None.
        adapter: an adapter checkpoint (with its backbone) rather than a plain model.
    """

    name: str
    model: Any
    config: ModelConfig
    layout: Optional[Layout]
    source: str
    trained_seq_len: Optional[int] = None
    hub: Optional[dict] = None
    adapter: bool = False

    @property
    def prepend_outcome(self) -> Optional[bool]:
        """``layout.prepend_outcome``, or None when the layout is unknown."""
        return None if self.layout is None else self.layout.prepend_outcome


def load_model(path_or_hub_id: str | os.PathLike):
    """Load a model for use: ``(PAWNModel, ModelConfig)``.

    ``path_or_hub_id`` is a v2 checkpoint directory (hashes verified before use), or a Hugging
    Face Hub id ``owner/name[@revision][/folder]`` (the folder: one checkpoint in the repo, e.g. a
    pushed run's ``checkpoints/step_00001000``): a v2 checkpoint is downloaded and verified against
    its ``.complete`` manifest, a published v1 model (``thomas-schweich/pawn-base``) is downloaded
    and converted once into the conversion cache (:func:`pawn.convert.load_source`); an adapter
    checkpoint loads with its backbone (:func:`load_adapter_checkpoint`).

    Raises:
        FileNotFoundError: no such directory and not a repo id.
        pawn.checkpoint.CheckpointError (and subclasses): see :func:`pawn.checkpoint.load_checkpoint`.
        pawn.convert.ConversionError: download or conversion failed (one-line message).
    """
    from pawn.model import PAWNModel

    src = str(path_or_hub_id)
    if checkpoint.is_hub_id(src):
        local, snap = fetch_source(src)
        if not is_adapter_checkpoint(local):
            ckpt = load_fetched(local, snap)
            return PAWNModel(ckpt.config, params=ckpt.params), ckpt.config
        m = _load_hub_adapter(local, snap).model
        return m, m.config
    if is_adapter_checkpoint(src):
        m = load_adapter_checkpoint(src).model
        return m, m.config
    _refuse_peft_folder(src)
    return checkpoint.load_model(src)


def _refuse_peft_folder(src: str) -> None:
    """A PEFT adapter folder (no ``model.safetensors``) given as a model: one line saying what it is.

    Raises:
        pawn.adapters.AdapterError: ``src`` is such a folder.
    """
    from pawn.adapters.errors import AdapterError

    if is_peft_folder(src) and not os.path.isfile(os.path.join(src, checkpoint.MODEL_FILE)):
        raise AdapterError(not_a_model(src))


def resolve_backbone(source: str) -> str:
    """A recorded backbone source that is not a local directory: a Hub id
    (``owner/name[@revision][/folder]``), downloaded and verified, or converted once (its local
    checkpoint directory).

    Raises:
        FileNotFoundError: ``source`` is not a Hub id. ConversionError, HubDownloadError: from the Hub.
    """
    if checkpoint.is_hub_id(source):
        return str(load_source(source)[0].path)  # v1 repos converted, v2 repos downloaded and verified
    raise FileNotFoundError(f"{source}: the adapter's backbone directory no longer exists")


def load_adapter_checkpoint(path: str | os.PathLike):
    """An adapter checkpoint and its backbone (a Hub-id backbone is converted first); see
    :func:`pawn.adapters.io.load_adapter`. The model is an :class:`pawn.adapters.AdaptedModel`,
    called like a PAWNModel.

    Raises:
        FileNotFoundError, pawn.checkpoint.CheckpointError (incl. BackboneMismatchError),
        pawn.convert.ConversionError, pawn.adapters.AdapterError.
    """
    from pawn.adapters.io import load_adapter

    return load_adapter(path, resolve=resolve_backbone)


def _load_hub_adapter(local, snap):
    """An adapter checkpoint fetched from the Hub (``local``: its materialised copy) with its
    backbone; a copy failing verification is removed and refused in one line."""
    try:
        return load_adapter_checkpoint(local)
    except checkpoint.CheckpointError as e:
        from pawn.adapters.io import BackboneMismatchError

        if isinstance(e, (BackboneMismatchError, HubDownloadError)):
            raise
        raise refuse_corrupt(local, snap, e) from None


def load_models(source: str | os.PathLike, variant: Optional[str] = None, *, variant_flag: str = "--variant") -> list[LoadedModel]:
    """Models to evaluate from ``source``.

    A supernet checkpoint (its run config names a supernet, or its config equals one of
    :data:`pawn.config.SUPERNETS`) yields every nested variant (``small``, ``base``, ``large``),
    or only ``variant``; an adapter checkpoint yields its adapted model, named
    ``<strategy>:<shape>`` (layout and trained length from the adapter run's config, else the
    backbone's); any other checkpoint yields itself.
    ``variant_flag`` names the option in the error messages (``--vs-variant`` for ``pawn play``'s
    opponent).

    Raises:
        FileNotFoundError, pawn.checkpoint.CheckpointError, pawn.convert.ConversionError: from
            loading (a string that names no local directory and fails as a Hub id gets a message
            naming both readings, :func:`not_local_nor_hub`); pawn.errors.UsageError (a ValueError;
            exit code 2 in the CLI): ``variant`` given for a checkpoint that is not a supernet, or
            not one of its variants.
    """
    from pawn.model import PAWNModel, sliced

    src = str(source)
    run_config: Optional[dict] = None
    hub_adapter = None
    hub: Optional[dict] = None
    if checkpoint.is_hub_id(src):  # the Hub checkpoint's run config (layout, context) is kept too
        try:
            local, snap = fetch_source(src)
            hub = snap.record()
            if is_adapter_checkpoint(local):
                hub_adapter = (local, snap)
            else:
                ckpt = load_fetched(local, snap)
        except (ConversionError, HubDownloadError) as e:
            raise ConversionError(not_local_nor_hub(src, str(e))) from None
    elif not is_adapter_checkpoint(src):
        _refuse_peft_folder(src)
        ckpt = checkpoint.load_checkpoint(src)
    if hub_adapter is not None or (not checkpoint.is_hub_id(src) and is_adapter_checkpoint(src)):
        if variant is not None:
            raise UsageError(f"{src} is an adapter checkpoint; {variant_flag} {variant} does not apply")
        la = _load_hub_adapter(*hub_adapter) if hub_adapter is not None else load_adapter_checkpoint(src)
        rcs = [rc for rc in (la.run_config, la.backbone_run_config) if rc]
        lay = next((Layout.recorded(rc) for rc in rcs if Layout.recorded(rc) is not None), None)
        lens = [rc.get("seq_len") for rc in rcs if isinstance(rc.get("seq_len"), int) and rc.get("seq_len") > 0]
        cfg = la.model.config
        return [LoadedModel(f"{la.model.strategy}:{cfg.name}", la.model, cfg, lay, src, lens[0] if lens else None, hub,
                            adapter=True)]
    model, config, run_config = PAWNModel(ckpt.config, params=ckpt.params), ckpt.config, ckpt.run_config
    layout = Layout.recorded(run_config)
    trained = run_config.get("seq_len") if run_config else None
    trained = int(trained) if isinstance(trained, int) and trained > 0 else None
    sup = supernet_of(config, run_config)
    if sup is None:
        if variant is not None:
            raise UsageError(f"{src} is not a supernet checkpoint; {variant_flag} {variant} does not apply")
        return [LoadedModel(config.name, model, config, layout, src, trained, hub)]
    variants = SUPERNETS[sup][1]
    if variant is not None and variant not in variants:
        raise UsageError(f"{variant_flag} {variant!r}: not one of supernet {sup!r}'s variants {sorted(variants)}")
    names = [variant] if variant is not None else list(variants)
    return [LoadedModel(f"{sup}/{v}", sliced(model, variants[v]), variants[v], layout, src, trained, hub) for v in names]
