"""PEFT LoRA folders: PAWN ``lora`` adapters written and read in the layout of Hugging Face PEFT
(``adapter_config.json`` + ``adapter_model.safetensors``), so they interchange with the tools
people already use (``peft.PeftModel.from_pretrained`` on :class:`pawn.torch.PAWNTorch`, the Hub).

The layout (PEFT ``LoraModel.save_pretrained``, checked against peft 0.21)::

    adapter_config.json        {"peft_type": "LORA", "r", "lora_alpha", "target_modules",
                                "base_model_name_or_path", "bias": "none", ...}
    adapter_model.safetensors  base_model.model.<module>.lora_A.weight  float32 [r, d_in]
                               base_model.model.<module>.lora_B.weight  float32 [d_out, r]
                               (metadata {"format": "pt"})
    pawn_adapter.json          PAWN's record: strategy settings, backbone {source, variant,
                               sha256}, backbone shape, the adapter run's config (PEFT ignores it)
    README.md                  model card (``library_name: peft``)
    .complete                  SHA-256 manifest, written last (PAWN's atomic write)

``<module>`` is the module path in :class:`pawn.torch.PAWNTorch` (the v1 names of
:data:`pawn.config.PARAMS` without ``.weight``): ``layers.{i}.attn.wq`` … ``layers.{i}.ffn.w_down``.
``target_modules`` lists the suffixes (``["wq", "wv"]``) when every layer is adapted, else the full
module paths (PEFT's ``layers_to_transform`` needs a dot before ``layers``, which a top-level
``layers`` list has not). PEFT computes ``y = x·Wᵀ + (lora_alpha / r) · B(A(x))`` — PAWN's
``x·W + (α/r)·(x·A)·B`` with ``lora_A.weight = Aᵀ`` and ``lora_B.weight = Bᵀ`` (spec
``training-and-adapters.md`` §4.1); ``lora_alpha`` is PAWN's α (``r`` when α is unset), so the
scaling ``lora_alpha / r`` is the same float64 as PAWN's ``α / r``.

Reading accepts any PEFT LoRA folder whose weights sit on PAWN's seven projections: the adapted
modules are those with weights, cross-checked against ``target_modules`` by PEFT's own matching
rule (:func:`peft_selects`). Options PAWN's LoRA does not have (DoRA, rsLoRA, per-module rank or
α, biases, ``fan_in_fan_out``, ``modules_to_save``) are refused in one line naming the field.

Importing this module does not import JAX (``pawn.torch`` uses it); :func:`export_peft` and
:func:`import_peft` load the adapter modules when called.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np

from pawn import checkpoint as ck
from pawn.adapters.configs import ATTN_TARGETS, FFN_TARGETS, AdapterConfigError, check_layers
from pawn.adapters.errors import AdapterError
from pawn.config import PARAMS, ModelConfig
from pawn.fileio import save_safetensors

if TYPE_CHECKING:  # the lora strategy module imports JAX; this module must not (pawn.torch reads it)
    from pawn.adapters.strategies.lora import LoRAConfig

PEFT_CONFIG_FILE = "adapter_config.json"
PEFT_WEIGHTS_FILE = "adapter_model.safetensors"
PAWN_RECORD_FILE = "pawn_adapter.json"
PEFT_KEY_PREFIX = "base_model.model."
"""Prefix of every tensor name in ``adapter_model.safetensors`` (PEFT's ``PeftModel.base_model.model``)."""
RECORD_FORMAT_VERSION = 1

LORA_TARGETS: tuple[str, ...] = tuple(ATTN_TARGETS.values()) + FFN_TARGETS
"""PAWN parameter names LoRA can adapt, in canonical order."""
MODULE_PATHS: dict[str, str] = {p.name: p.v1_name.removesuffix(".weight") for p in PARAMS if p.name in LORA_TARGETS}
"""PAWN parameter name -> :class:`pawn.torch.PAWNTorch` module path template (``layers.{i}.attn.wq``)."""
_OTHER_MODULES = ("lm_head", "embed.src_embed", "embed.dst_embed", "embed.promo_embed", "embed.outcome_embed")
"""Modules of PAWNTorch that PEFT could target but PAWN's LoRA does not adapt."""

_KEY = re.compile(r"base_model\.model\.layers\.(\d+)\.(attn|ffn)\.(\w+)\.lora_([AB])\.weight")

_REFUSED = {  # adapter_config.json field -> value PAWN's LoRA has (anything else is a different adapter)
    "use_dora": False, "use_rslora": False, "fan_in_fan_out": False, "lora_bias": False, "bias": "none",
    "modules_to_save": None, "rank_pattern": {}, "alpha_pattern": {}, "layer_replication": None,
    "target_parameters": None, "trainable_token_indices": None, "use_qalora": False, "alora_invocation_tokens": None,
}
_ABSENT_OK = {"modules_to_save": ([],), "rank_pattern": (None,), "alpha_pattern": (None,), "target_parameters": ([],)}


class PeftFormatError(ck.CheckpointIntegrityError):
    """A PEFT folder that cannot be read as a PAWN LoRA adapter (one line naming the file and field)."""


class PeftBackboneMismatchError(ck.CheckpointError):
    """The backbone given for a PEFT folder is not the one its ``pawn_adapter.json`` records."""


def module_path(target: str, layer: int) -> str:
    """The PAWNTorch module path of ``target`` (``wq`` … ``w_down``) in ``layer``: ``layers.1.attn.wq``."""
    return MODULE_PATHS[target].format(i=layer)


def peft_key(target: str, layer: int, which: str) -> str:
    """The ``adapter_model.safetensors`` name of LoRA factor ``which`` (``"A"``/``"B"``):
    ``base_model.model.layers.1.attn.wq.lora_A.weight``."""
    return f"{PEFT_KEY_PREFIX}{module_path(target, layer)}.lora_{which}.weight"


def _alpha_json(alpha: float) -> int | float:
    """α as PEFT writes it (an int when integral); ``x / r`` is the same float64 either way."""
    return int(alpha) if float(alpha).is_integer() and abs(alpha) < 2 ** 53 else float(alpha)


def lora_adapter_config(settings: LoRAConfig, n_layers: int, base_model: Optional[str], revision: Optional[str] = None) -> dict:
    """The ``adapter_config.json`` object of a PAWN LoRA adapter.

    Args:
        settings: the adapter's :class:`~pawn.adapters.strategies.lora.LoRAConfig`.
        n_layers: the backbone's layer count (all layers adapted → suffix ``target_modules``).
        base_model: ``base_model_name_or_path`` (the backbone's Hub id or directory), or None.
        revision: ``revision`` (a Hub branch/tag/commit), or None.

    Returns:
        A JSON-able dict with the fields of PEFT's ``LoraConfig`` that every peft ≥ 0.9 reads.
    """
    layers = check_layers(settings.layers, n_layers, "lora layers")
    names = settings.target_names()
    alpha = settings.rank if settings.alpha is None else settings.alpha
    targets = list(names) if layers == tuple(range(n_layers)) else [module_path(n, i) for i in layers for n in names]
    return {
        "peft_type": "LORA", "task_type": None, "auto_mapping": {"base_model_class": "PAWNTorch", "parent_library": "pawn.torch"},
        "base_model_name_or_path": base_model, "revision": revision, "inference_mode": True,
        "r": settings.rank, "lora_alpha": _alpha_json(alpha), "lora_dropout": 0.0, "target_modules": targets,
        "layers_to_transform": None, "layers_pattern": None, "bias": "none", "fan_in_fan_out": False,
        "modules_to_save": None, "init_lora_weights": True, "rank_pattern": {}, "alpha_pattern": {},
        "use_rslora": False, "use_dora": False,
    }


def peft_selects(config: dict, key: str) -> bool:
    """Whether PEFT would put a LoRA layer on module ``key`` (a PAWNTorch module path) under
    ``config`` — PEFT's ``check_target_module_exists`` (peft 0.21 ``tuners_utils.py``): a string
    ``target_modules`` is a regex that must match the whole key; a list matches a key equal to an
    entry or ending in ``.entry``, then ``layers_to_transform`` (with ``layers_pattern``) filters
    by the index after ``.<pattern>.``; ``exclude_modules`` (same forms) wins over both."""
    ex = config.get("exclude_modules")
    if isinstance(ex, str) and re.fullmatch(ex, key) or isinstance(ex, list) and (key in ex or any(key.endswith(f".{e}") for e in ex)):
        return False
    tm = config.get("target_modules")
    if isinstance(tm, str):
        return re.fullmatch(tm, key) is not None
    if not isinstance(tm, list):
        return False
    if key in tm:
        return True
    if not any(key.endswith(f".{t}") for t in tm):
        return False
    idx = config.get("layers_to_transform")
    if idx is None or (isinstance(idx, list) and not idx):
        return True
    patterns = config.get("layers_pattern") or [r"[^.]*"]
    patterns = [patterns] if isinstance(patterns, str) else patterns
    m = next((m for p in patterns if (m := re.match(rf".*?\.{p}\.(\d+)\.", key))), None)
    if m is None:
        return False
    return int(m.group(1)) == idx if isinstance(idx, int) else int(m.group(1)) in idx


@dataclass
class PeftLoRA:
    """A PEFT LoRA folder read back.

    Attributes:
        path: the folder.
        config: the ``adapter_config.json`` object.
        rank: ``r``. lora_alpha: ``lora_alpha`` (int or float as stored).
        weights: ``(target, layer) -> (A, B)`` with A ``[r, d_in]`` and B ``[d_out, r]`` in PEFT's
            orientation, numpy arrays or torch tensors (``framework``), dtype as stored.
        record: ``pawn_adapter.json`` when present (a PAWN export), else None.
    """

    path: Path
    config: dict
    rank: int
    lora_alpha: float
    weights: dict[tuple[str, int], tuple[Any, Any]]
    record: Optional[dict]

    @property
    def scaling(self) -> float:
        """PEFT's ``lora_alpha / r``, the factor on ``B(A(x))``."""
        return self.lora_alpha / self.rank

    @property
    def base_model(self) -> Optional[str]:
        """``base_model_name_or_path`` (None when unset)."""
        v = self.config.get("base_model_name_or_path")
        return str(v) if v else None

    def check_model(self, config: ModelConfig) -> None:
        """Check the weights fit a backbone of shape ``config`` and match ``target_modules``.

        Raises:
            PeftFormatError: a layer outside the backbone, a factor of the wrong shape, a module
                ``target_modules`` selects without weights (or weights on one it does not
                select), or ``target_modules`` selecting a module PAWN's LoRA does not adapt.
        """
        where = self.path / PEFT_WEIGHTS_FILE
        dims = {"wq": (config.d_model,) * 2, "wk": (config.d_model,) * 2, "wv": (config.d_model,) * 2, "wo": (config.d_model,) * 2,
                "w_gate": (config.d_model, config.d_ff), "w_up": (config.d_model, config.d_ff), "w_down": (config.d_ff, config.d_model)}
        for (t, i), (a, b) in sorted(self.weights.items(), key=lambda kv: (kv[0][1], LORA_TARGETS.index(kv[0][0]))):
            if i >= config.n_layers:
                raise PeftFormatError(f"{where}: weights for {module_path(t, i)}, but the backbone has {config.n_layers} layers")
            d_in, d_out = dims[t]
            for name, arr, want in (("A", a, (self.rank, d_in)), ("B", b, (d_out, self.rank))):
                if tuple(arr.shape) != want:
                    raise PeftFormatError(f"{where}: {peft_key(t, i, name)} has shape {list(arr.shape)}, "
                                          f"r={self.rank} on {config.name} needs {list(want)}")
        cfg_file = self.path / PEFT_CONFIG_FILE
        for other in _OTHER_MODULES:
            if peft_selects(self.config, other):
                raise PeftFormatError(f"{cfg_file}: target_modules selects {other}, which PAWN's LoRA does not adapt "
                                      f"(only {', '.join(LORA_TARGETS)})")
        for i in range(config.n_layers):
            for t in LORA_TARGETS:
                sel, has = peft_selects(self.config, module_path(t, i)), (t, i) in self.weights
                if sel and not has:
                    raise PeftFormatError(f"{cfg_file}: target_modules selects {module_path(t, i)}, "
                                          f"but {PEFT_WEIGHTS_FILE} has no lora_A/lora_B for it")
                if has and not sel:
                    raise PeftFormatError(f"{where}: weights for {module_path(t, i)}, which target_modules "
                                          f"{self.config.get('target_modules')!r} does not select")

    def pawn_settings(self, config: ModelConfig) -> LoRAConfig:
        """The PAWN ``lora`` settings these weights are (``pawn_adapter.json``'s when present,
        checked against the folder), after :meth:`check_model`.

        Raises:
            PeftFormatError: adapted modules that are not every chosen target in every chosen
                layer, FFN projections adapted only in part (PAWN adapts all three or none), or a
                record that disagrees with the folder.
        """
        from pawn.adapters.strategies.lora import LoRAConfig  # JAX: only where PAWN settings are made

        self.check_model(config)
        where = self.path / PEFT_WEIGHTS_FILE
        layers = sorted({i for _, i in self.weights})
        names = [t for t in LORA_TARGETS if any(k == t for k, _ in self.weights)]
        missing = [module_path(t, i) for i in layers for t in names if (t, i) not in self.weights]
        if missing:
            raise PeftFormatError(f"{where}: PAWN's LoRA adapts the same projections in every adapted layer; "
                                  f"{', '.join(missing[:3])}{' …' if len(missing) > 3 else ''} missing")
        ffn = [t for t in names if t in FFN_TARGETS]
        if ffn and len(ffn) != len(FFN_TARGETS):
            raise PeftFormatError(f"{where}: adapts {', '.join(ffn)} but not all of {', '.join(FFN_TARGETS)}; "
                                  "PAWN's LoRA adapts the three FFN projections together")
        short = {v: k for k, v in ATTN_TARGETS.items()}
        attn = tuple(short[t] for t in names if t in short)
        if not attn:
            raise PeftFormatError(f"{where}: adapts only FFN projections; PAWN's LoRA needs at least one of wq, wk, wv, wo")
        derived = LoRAConfig(rank=self.rank, alpha=None if self.lora_alpha == self.rank else float(self.lora_alpha),
                             targets=attn, ffn=bool(ffn), layers=None if len(layers) == config.n_layers else tuple(layers))
        if self.record is None:
            return derived
        try:
            rec = LoRAConfig(**(self.record.get("settings") or {}))
        except Exception as e:  # pydantic ValidationError: one line
            raise PeftFormatError(f"{self.path / PAWN_RECORD_FILE}: settings are not lora settings ({' '.join(str(e).split()[:12])})") from None
        same = (rec.rank == derived.rank and rec.scale == self.scaling and rec.target_names() == derived.target_names()
                and check_layers(rec.layers, config.n_layers, "lora") == tuple(layers))
        if not same:
            raise PeftFormatError(f"{self.path / PAWN_RECORD_FILE}: records r={rec.rank}, scale {rec.scale}, targets "
                                  f"{list(rec.target_names())}, layers {rec.layers}, but the PEFT files hold r={self.rank}, "
                                  f"scale {self.scaling}, {names}, layers {layers}: the folder was changed after "
                                  f"export; remove {PAWN_RECORD_FILE} to read it as a plain PEFT folder")
        return rec

    def pawn_arrays(self, settings: LoRAConfig, n_layers: int) -> dict[str, np.ndarray]:
        """PAWN adapter-checkpoint tensors ``adapter.A.<t>`` float32 ``[L_sel, d_in, r]`` and
        ``adapter.B.<t>`` float32 ``[L_sel, r, d_out]`` (PEFT's factors transposed and stacked;
        float16 values widen exactly, float32 ones are copied bit for bit)."""
        layers = check_layers(settings.layers, n_layers, "lora layers")
        out = {}
        for t in settings.target_names():
            out[f"adapter.A.{t}"] = np.stack([np.asarray(self.weights[t, i][0], np.float32).T for i in layers])
            out[f"adapter.B.{t}"] = np.stack([np.asarray(self.weights[t, i][1], np.float32).T for i in layers])
        return out


def is_peft_folder(path: str | os.PathLike) -> bool:
    """True if ``path`` is a directory holding ``adapter_config.json``."""
    return (Path(path) / PEFT_CONFIG_FILE).is_file()


def not_a_model(path: str | os.PathLike) -> str:
    """One line for a PEFT folder given where a PAWN checkpoint is expected (was: "model.safetensors
    is missing"): the backbone it names and the two ways to use it."""
    d = Path(path)
    try:
        base = json.loads((d / PEFT_CONFIG_FILE).read_text("utf-8")).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        base = None
    on = f" for the backbone {base}" if base else ""
    return (f"{d}: a PEFT adapter folder{on}, not a PAWN checkpoint; read it in with `pawn convert {d} --from-peft`, "
            f"or load it in PyTorch with pawn.torch.load(BACKBONE, adapter=\"{d}\")")


def read_peft_lora(path: str | os.PathLike, framework: str = "numpy") -> PeftLoRA:
    """Read a PEFT LoRA folder (the ``.complete`` manifest verified when present).

    Args:
        path: the folder with ``adapter_config.json`` and ``adapter_model.safetensors``.
        framework: ``"numpy"`` (float32/float16 only) or ``"pt"`` (torch tensors, any dtype).

    Returns:
        The :class:`PeftLoRA` (not yet checked against a backbone: :meth:`PeftLoRA.check_model`).

    Raises:
        FileNotFoundError: no such directory.
        PeftFormatError: a missing file, ``peft_type`` not ``LORA``, ``r``/``lora_alpha`` not
            positive numbers, a refused option (named), a tensor name outside PAWN's modules, a
            module with only one of lora_A/lora_B, or unreadable tensors.
        pawn.checkpoint.CheckpointIntegrityError: the manifest does not match.
    """
    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(ck.not_a_checkpoint_dir(d, "PEFT adapter"))
    if (d / ck.MANIFEST).exists():
        ck.verify_manifest(d)
    for f in (PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE):
        if not (d / f).is_file():
            hint = (f" (a PAWN adapter checkpoint: write it as a PEFT folder with `pawn convert {d} --peft OUT`)"
                    if (d / "adapter.safetensors").is_file() else "")
            raise PeftFormatError(f"{d}: {f} is missing; not a PEFT adapter folder{hint}")
    cfg_file = d / PEFT_CONFIG_FILE
    cfg = ck._read_json(cfg_file)
    if not isinstance(cfg, dict):
        raise PeftFormatError(f"{cfg_file}: the top level is not a JSON object")
    if cfg.get("peft_type") != "LORA":
        raise PeftFormatError(f"{cfg_file}: peft_type is {cfg.get('peft_type')!r}; PAWN reads LORA adapters only")
    r, alpha = cfg.get("r"), cfg.get("lora_alpha")
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise PeftFormatError(f"{cfg_file}: r must be a positive integer, not {r!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or alpha <= 0:
        raise PeftFormatError(f"{cfg_file}: lora_alpha must be a positive number, not {alpha!r}")
    for field, ok in _REFUSED.items():
        v = cfg.get(field, ok)
        if v != ok and v not in _ABSENT_OK.get(field, ()):
            raise PeftFormatError(f"{cfg_file}: {field} is {v!r}; PAWN's LoRA supports only {field} = {json.dumps(ok)}")
    if cfg.get("target_modules") == "all-linear":
        raise PeftFormatError(f"{cfg_file}: target_modules \"all-linear\" is not resolvable outside transformers; "
                              f"name the modules (e.g. [\"wq\", \"wv\"])")
    record = None
    if (d / PAWN_RECORD_FILE).is_file():
        record = ck._read_json(d / PAWN_RECORD_FILE)
        strategy = record.get("strategy") if isinstance(record, dict) else None
        if strategy != "lora":
            raise PeftFormatError(f"{d / PAWN_RECORD_FILE}: not a PAWN lora record (strategy {strategy!r})")
    from safetensors import safe_open

    where = d / PEFT_WEIGHTS_FILE
    parts: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        with safe_open(str(where), framework=framework) as f:
            for key in f.keys():
                m = _KEY.fullmatch(key)
                if m is None or m.group(3) not in MODULE_PATHS or MODULE_PATHS[m.group(3)].split(".")[2] != m.group(2):
                    raise PeftFormatError(f"{where}: tensor {key} is not a lora_A/lora_B weight of PAWN's projections "
                                          f"({PEFT_KEY_PREFIX}layers.<i>.attn.wq … ffn.w_down)")
                parts.setdefault((m.group(3), int(m.group(1))), {})[m.group(4)] = f.get_tensor(key)
    except PeftFormatError:
        raise
    except Exception as e:  # SafetensorError, OSError, a dtype numpy lacks (bfloat16): one line
        raise PeftFormatError(f"{where}: not readable as {framework} tensors ({' '.join(str(e).split())})") from None
    if not parts:
        raise PeftFormatError(f"{where}: holds no LoRA weights")
    weights = {}
    for (t, i), ab in parts.items():
        if set(ab) != {"A", "B"}:
            lack = ({"A", "B"} - set(ab)).pop()
            raise PeftFormatError(f"{where}: {peft_key(t, i, lack)} is missing (every adapted module has lora_A and lora_B)")
        weights[t, i] = (ab["A"], ab["B"])
    return PeftLoRA(d, cfg, r, alpha, weights, record)


# ----------------------------------------------------------------------------- PAWN checkpoint -> PEFT folder


def _check_peft_target(out: Path, src: Path) -> None:
    """``out`` may be missing, an empty directory, or an earlier export of ``src`` (replaced).

    Raises:
        CheckpointTargetError: anything else (one line naming ``out``), before any work.
    """
    ck._check_parent(out)
    ck._check_replaceable(out, "the output")
    if not out.exists() or not any(out.iterdir()):
        return
    try:
        rec = json.loads((out / PAWN_RECORD_FILE).read_text("utf-8"))
    except (OSError, ValueError):
        rec = None
    if not (out / ck.MANIFEST).is_file() or not isinstance(rec, dict) or rec.get("exported_from") != str(src):
        origin = rec.get("exported_from") if isinstance(rec, dict) else None
        raise ck.CheckpointTargetError(f"{out}: exists and is not an earlier PEFT export of {src}"
                                       f"{f' (it is an export of {origin})' if origin else ''}; refusing to overwrite it "
                                       "(choose another output)")


def _peft_card(settings: LoRAConfig, config: ModelConfig, backbone: Optional[dict], src: Path) -> str:
    """README.md of a PEFT export: Hub metadata (``library_name: peft``, ``base_model`` for a Hub
    backbone) and how to load it."""
    source = (backbone or {}).get("source")
    meta = ["---", "library_name: peft", "tags:", "- pawn", "- chess", "- lora"]
    if source and ck.is_hub_id(source):
        meta.append(f"base_model: {source.split('@')[0]}")
    meta.append("---")
    alpha = settings.rank if settings.alpha is None else settings.alpha
    body = [
        f"# PAWN {config.name} LoRA adapter (PEFT format)", "",
        f"A `pawn adapt --strategy lora` adapter exported by `pawn convert {src} --peft`: rank {settings.rank}, "
        f"lora_alpha {alpha} (scaling {settings.scale}), targets {', '.join(settings.target_names())}"
        f"{'' if settings.layers is None else f', layers {list(settings.layers)}'}.",
        f"Backbone: `{source}`" + (f" (variant {backbone['variant']})" if backbone and backbone.get("variant") else "")
        + (f", model.safetensors SHA-256 `{backbone['sha256']}`." if backbone else "."), "",
        "```python", "import pawn.torch", "model = pawn.torch.load(BACKBONE_DIR, adapter=THIS_DIR)  # or, with peft installed:",
        "from peft import PeftModel", "model = PeftModel.from_pretrained(pawn.torch.load(BACKBONE_DIR), THIS_DIR)", "```", "",
        f"`pawn convert THIS_DIR --from-peft` turns it back into a PAWN adapter checkpoint (bit-identical weights).", "",
    ]
    return "\n".join(meta + body)


def export_peft(adapter: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write the PAWN ``lora`` adapter checkpoint ``adapter`` as a PEFT LoRA folder ``out``
    (atomically; the backbone is not needed). Factors are transposed exactly: a later
    :func:`import_peft` gives bit-identical tensors.

    Args:
        adapter: a PAWN adapter checkpoint directory (e.g. ``RUN/checkpoints/best``).
        out: the folder to write; missing, empty, or an earlier export of the same adapter (replaced).

    Returns:
        ``out``.

    Raises:
        CheckpointTargetError: ``out`` is taken (checked first).
        AdapterError: not an adapter checkpoint, or a strategy other than ``lora`` (named).
        CheckpointError (and subclasses): a damaged checkpoint, tensors missing, extra or misshaped.
    """
    from pawn.adapters.io import ADAPTER_FILE, ADAPTER_FORMAT_VERSION, ADAPTER_MIGRATIONS
    from pawn.adapters.strategies.lora import LoRAConfig

    src, out = Path(adapter).resolve(), Path(out)
    _check_peft_target(out, src)
    if not src.is_dir():
        raise FileNotFoundError(ck.not_a_checkpoint_dir(src, "adapter checkpoint"))
    files = ck.verify_manifest(src)
    if ADAPTER_FILE not in files:
        raise AdapterError(f"{src}: not an adapter checkpoint (no {ADAPTER_FILE}); --peft writes LoRA adapter checkpoints")
    cfg = ck.migrate_config(ck._read_json(src / ck.CONFIG_FILE), src / ck.CONFIG_FILE)
    if not isinstance(cfg.get("adapter"), dict):
        raise ck.CheckpointIntegrityError(f"{src / ck.CONFIG_FILE}: no adapter section")
    meta = ck.migrate_config({"format_version": 1, **cfg["adapter"]}, src / ck.CONFIG_FILE / "adapter",
                             current=ADAPTER_FORMAT_VERSION, migrations=ADAPTER_MIGRATIONS)
    if meta.get("strategy") != "lora":
        raise AdapterError(f"{src}: a {meta.get('strategy')} adapter checkpoint; the PEFT format holds LoRA adapters only "
                           "(strategy lora)")
    config = ck.read_model_config(cfg, src / ck.CONFIG_FILE)
    try:
        settings = LoRAConfig(**(meta.get("settings") or {}))
    except Exception as e:
        raise AdapterConfigError(f"{src / ck.CONFIG_FILE}: adapter.settings: {' '.join(str(e).split()[:16])}") from None
    layers = check_layers(settings.layers, config.n_layers, f"{src / ck.CONFIG_FILE}: adapter.settings.layers")
    tensors = ck._read_tensors(src / ADAPTER_FILE)
    want = {f"adapter.{w}.{t}" for t in settings.target_names() for w in "AB"}
    if set(tensors) != want:
        raise ck.CheckpointIntegrityError(f"{src / ADAPTER_FILE}: tensors missing {sorted(want - set(tensors))}, "
                                          f"unexpected {sorted(set(tensors) - want)}")
    shapes = {p.name: p.shape(config)[1:] for p in PARAMS if p.name in LORA_TARGETS}
    peft_t = {}
    for t in settings.target_names():
        a, b = tensors[f"adapter.A.{t}"], tensors[f"adapter.B.{t}"]
        d_in, d_out = shapes[t]
        for name, arr, shape in ((f"adapter.A.{t}", a, (len(layers), d_in, settings.rank)), (f"adapter.B.{t}", b, (len(layers), settings.rank, d_out))):
            if tuple(arr.shape) != shape or arr.dtype != np.float32:
                raise ck.CheckpointIntegrityError(f"{src / ADAPTER_FILE}: tensor {name} is {arr.dtype}{list(arr.shape)}, expected float32{list(shape)}")
        for j, i in enumerate(layers):
            peft_t[peft_key(t, i, "A")] = np.ascontiguousarray(a[j].T)
            peft_t[peft_key(t, i, "B")] = np.ascontiguousarray(b[j].T)
    backbone = meta.get("backbone") if isinstance(meta.get("backbone"), dict) else None
    source = backbone.get("source") if backbone else None
    revision = None
    if source and ck.is_hub_id(source) and "@" in source:
        revision = source.split("@", 1)[1].split("/", 1)[0]
    record = {"format_version": RECORD_FORMAT_VERSION, "strategy": "lora", "settings": settings.model_dump(mode="json"),
              "backbone": backbone, "model_config": config.to_json_dict(), "exported_from": str(src),
              "trainable_params": meta.get("trainable_params"), "run_config": cfg.get("run_config")}
    adapter_cfg = lora_adapter_config(settings, config.n_layers, source.split("@")[0] if source and ck.is_hub_id(source) else source, revision)
    card = _peft_card(settings, config, backbone, src)

    def fill(staging: Path) -> None:
        save_safetensors(peft_t, staging / PEFT_WEIGHTS_FILE, metadata={"format": "pt"})
        ck.write_json(staging / PEFT_CONFIG_FILE, adapter_cfg)
        ck.write_json(staging / PAWN_RECORD_FILE, record)
        ck._write_bytes(staging / "README.md", card.encode("utf-8"))

    return ck.write_checkpoint_dir(out, fill)


# ----------------------------------------------------------------------------- PEFT folder -> PAWN checkpoint


def import_peft(
    folder: str | os.PathLike,
    out: Optional[str | os.PathLike] = None,
    *,
    backbone_dir: Optional[str | os.PathLike] = None,
    resolve: Optional[Callable[[str], str]] = None,
) -> Path:
    """Write a PEFT LoRA folder as a PAWN ``lora`` adapter checkpoint (loads with
    :func:`pawn.adapters.io.load_adapter`, ``pawn eval``, ``pawn convert --merge``).

    A PAWN export (``pawn_adapter.json``) keeps its settings, backbone reference and run config,
    and needs no backbone; any other folder needs its backbone (``backbone_dir``, else
    ``base_model_name_or_path`` through ``resolve``), whose SHA-256 is then recorded.

    Args:
        folder: the PEFT folder.
        out: destination; default the sibling ``<folder name>-pawn``. Missing, empty, or an
            earlier import of the same folder (replaced).
        backbone_dir: the backbone checkpoint directory (a foreign folder; checked against the
            record of a PAWN export).
        resolve: maps a Hub-id ``base_model_name_or_path`` to a local checkpoint directory.

    Returns:
        The adapter checkpoint directory.

    Raises:
        CheckpointTargetError: ``out`` is taken (checked first). PeftFormatError: see
            :func:`read_peft_lora`, :meth:`PeftLoRA.pawn_settings`. AdapterError: no backbone
            known for a foreign folder. PeftBackboneMismatchError: ``backbone_dir`` is not the
            recorded backbone.
    """
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from pawn.adapters.adapted import build_adapted
    from pawn.adapters.io import BackboneRef, _replace_named, load_backbone, save_adapter
    from pawn.model import PAWNModel

    src = Path(folder).resolve()
    dest = Path(out) if out is not None else src.with_name(src.name + "-pawn")
    ck.check_output_target(dest, {"imported_from": str(src)}, f"an import of {src}")
    peft = read_peft_lora(src)
    rec = peft.record
    if rec is not None:
        config = ck.read_model_config(rec, src / PAWN_RECORD_FILE)
        bb = rec.get("backbone")
        if not isinstance(bb, dict) or not {"source", "sha256"} <= set(bb):
            raise PeftFormatError(f"{src / PAWN_RECORD_FILE}: backbone must record source and sha256")
        ref = BackboneRef(str(bb["source"]), bb.get("variant"), str(bb["sha256"]))
        if backbone_dir is not None:
            _, given, _ = load_backbone(backbone_dir, ref.variant, source=ref.source)
            if given.sha256 != ref.sha256:
                raise PeftBackboneMismatchError(f"{src}: backbone {backbone_dir} has model.safetensors SHA-256 {given.sha256}, "
                                                f"but {PAWN_RECORD_FILE} records {ref.sha256}")
        run_config = dict(rec.get("run_config") or {})
    else:
        where = backbone_dir
        if where is None:
            base = peft.base_model
            if base is None:
                raise AdapterError(f"{src}: {PEFT_CONFIG_FILE} names no base_model_name_or_path; give the backbone (--backbone)")
            where = base if Path(base).is_dir() else (resolve(base) if resolve is not None and ck.is_hub_id(base) else None)
            if where is None:
                raise AdapterError(f"{src}: base_model_name_or_path {base} is not a local directory; give the backbone (--backbone)")
        model, ref, _ = load_backbone(where, source=peft.base_model)
        config = model.config
        run_config = {}
    settings = peft.pawn_settings(config)
    arrays = peft.pawn_arrays(settings, config.n_layers)
    shell = eqx.filter_eval_shape(PAWNModel, config, jax.random.PRNGKey(0))  # shapes only: LoRA saves no backbone arrays
    fresh = build_adapted("lora", settings, shell, jax.random.PRNGKey(0))
    adapted = _replace_named(fresh, {k: jnp.asarray(v) for k, v in arrays.items()})
    run_config["imported_from"] = str(src)
    return save_adapter(dest, adapted, ref, run_config=run_config)


__all__ = [
    "LORA_TARGETS", "MODULE_PATHS", "PAWN_RECORD_FILE", "PEFT_CONFIG_FILE", "PEFT_KEY_PREFIX", "PEFT_WEIGHTS_FILE",
    "PeftBackboneMismatchError", "PeftFormatError", "PeftLoRA", "export_peft", "import_peft", "is_peft_folder",
    "lora_adapter_config", "module_path", "not_a_model", "peft_key", "peft_selects", "read_peft_lora",
]
