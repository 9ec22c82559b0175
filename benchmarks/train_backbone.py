"""The files of ``benchmarks/train_backbone.sh``: a finished ``pawn pretrain`` run → a bf16 checkpoint
split into parts small enough to come back from an accelerator call, its validation curve as JSON
and a one-object summary; and the way back (parts → a v2 checkpoint every ``pawn`` command loads).

Usage: python benchmarks/train_backbone.py export RUN_DIR OUT_DIR [--part-bytes N] [--max-files 8]
       python benchmarks/train_backbone.py join PARTS_DIR CHECKPOINT_DIR

``export`` writes, under OUT_DIR:

* ``backbone/config.json`` — the checkpoint's ``config.json`` (model and run config);
* ``backbone/model.bf16.safetensors.part-NN`` — the weights of the run's best checkpoint (lowest val
  loss; the last step checkpoint when there is none) cast to bfloat16 (round to nearest even), one
  safetensors file cut into parts of at most ``--part-bytes`` bytes (16 MiB);
* ``backbone/manifest.json`` — the parts in order with their sizes and SHA-256, and the SHA-256 of
  the joined file (``cat model.bf16.safetensors.part-* > model.bf16.safetensors`` joins them too);
* ``curve.json`` — one row per validation (read through :mod:`pawn.runs`): step, tokens seen,
  elapsed seconds, loss, legal rate, the legal-masked loss, the uniform-over-legal reference
  E[ln N_legal], the excess in nats with its 95 % interval over games, top-1;
* ``summary.json`` — what was trained and how far it got; also printed on stdout as one JSON line.

``join`` checks every part against the manifest and writes a v2 checkpoint directory (float32 tensors
holding the bf16 values, ``config.json``, ``.complete``). Every output is written atomically.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Optional

PART_BYTES = 16 * 2 ** 20
"""Largest part: 16 MiB, the largest file an accelerator call brings back."""
MAX_FILES = 8
"""Most files an accelerator call brings back from $OUT."""
WEIGHTS = "model.bf16.safetensors"
PARTS_DIR = "backbone"
MANIFEST = "manifest.json"
CURVE_KEYS = ("loss", "legal_rate", "late_legal_rate", "legal_masked_loss_all_moves", "uniform_legal_loss", "excess_nats",
              "excess_nats_lo", "excess_nats_hi", "top1", "completion_rate")
"""The :mod:`pawn.metrics` keys of a curve row (a pretraining ``val`` record's values)."""


class ExportError(Exception):
    """A run or a parts folder this script cannot use; the message is one line."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write_bytes(path: Path, data: bytes) -> None:
    from pawn.fileio import atomic_output

    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def bf16_bytes(params: dict[str, Any]) -> bytes:
    """The safetensors bytes of ``params`` ({name: float array}) cast to bfloat16 (round to nearest even)."""
    import numpy as np
    from jax.numpy import bfloat16  # the NumPy bfloat16 type (ml_dtypes'), which safetensors writes as BF16
    from safetensors.numpy import save

    return save({k: np.ascontiguousarray(np.asarray(v, np.float32).astype(bfloat16)) for k, v in sorted(params.items())})


def split_parts(data: bytes, part_bytes: int) -> list[bytes]:
    """``data`` cut into consecutive parts of ``part_bytes`` bytes (the last may be shorter; one empty
    part for empty data).

    Raises:
        ValueError: ``part_bytes`` < 1.
    """
    if part_bytes < 1:
        raise ValueError(f"part size must be at least 1 byte, got {part_bytes}")
    return [data[i:i + part_bytes] for i in range(0, len(data), part_bytes)] or [b""]


def curve(run) -> list[dict[str, Any]]:
    """One row per validation of a :class:`pawn.runs.Run`: ``step``, ``tokens`` (step × batch × seq_len),
    ``elapsed_s`` and the :data:`CURVE_KEYS` of the run's model (None when absent)."""
    tokens_per_step = int(run.config.get("batch_size", 0)) * int(run.config.get("seq_len", 0))
    return [{"step": r.step, "tokens": (r.step or 0) * tokens_per_step, "elapsed_s": r.fields.get("elapsed"),
             **{k: r.values.get(k) for k in CURVE_KEYS}} for r in run.val]


def _checkpoint_of(run) -> Path:
    if run.best is not None:
        return run.best
    steps = run.checkpoints(verify=False)
    if not steps:
        raise ExportError(f"{run.path}: the run wrote no checkpoint (stopped before its first?)")
    return steps[-1].path


def export(run_dir: Path, out_dir: Path, *, part_bytes: int = PART_BYTES, max_files: int = MAX_FILES,
           extra: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """Write the bf16 parts, the manifest, ``curve.json`` and ``summary.json`` of a pretraining run
    under ``out_dir`` (module docstring); returns the summary.

    Raises:
        ExportError: not a run, no checkpoint, or more than ``max_files`` files would be written.
        pawn.checkpoint.CheckpointError: a damaged checkpoint.
    """
    from pawn.checkpoint import CONFIG_FILE, load_checkpoint
    from pawn.fileio import write_json
    from pawn.runs import RunError, open_run

    try:
        run = open_run(run_dir)
    except RunError as e:
        raise ExportError(str(e)) from None
    ckpt_dir = _checkpoint_of(run)
    ckpt = load_checkpoint(ckpt_dir)
    data = bf16_bytes(ckpt.params)
    parts = split_parts(data, part_bytes)
    n_files = len(parts) + 4 + sum(1 for p in out_dir.glob("*") if p.is_file() and p.name not in ("curve.json", "summary.json"))
    if n_files > max_files:
        raise ExportError(f"{len(parts)} parts of ≤ {part_bytes:,} bytes plus config, manifest, curve and summary "
                          f"(and the files already in {out_dir}) make {n_files} files, more than {max_files}")
    pdir = out_dir / PARTS_DIR
    pdir.mkdir(parents=True, exist_ok=True)
    for old in pdir.glob(f"{WEIGHTS}.part-*"):
        old.unlink()
    names = []
    for i, p in enumerate(parts):
        name = f"{WEIGHTS}.part-{i:02d}"
        _write_bytes(pdir / name, p)
        names.append({"file": name, "bytes": len(p), "sha256": _sha256(p)})
    _write_bytes(pdir / CONFIG_FILE, (ckpt_dir / CONFIG_FILE).read_bytes())
    write_json(pdir / MANIFEST, {"weights": WEIGHTS, "dtype": "bfloat16", "bytes": len(data), "sha256": _sha256(data),
                                 "parts": names, "from_checkpoint": str(ckpt_dir),
                                 "join": f"cat {WEIGHTS}.part-* > {WEIGHTS}; or: python benchmarks/train_backbone.py join DIR CKPT"})
    rows = curve(run)
    write_json(out_dir / "curve.json", {"run": str(run.path), "config": {k: run.config.get(k) for k in (
        "variant", "supernet", "batch_size", "seq_len", "lr", "total_steps", "val_games", "val_every", "seed")}, "val": rows})
    last = rows[-1] if rows else {}
    end = run.end
    train = [r for r in run.train if not r.fields.get("includes_compile")]
    tok_s = [r.values.get("tokens_per_s") for r in train if r.values.get("tokens_per_s")]
    summary = {"run": str(run.path), "checkpoint": str(ckpt_dir), "model": ckpt.config.name,
               "params": int(sum(int(v.size) for v in ckpt.params.values())), "steps": run.last_step,
               "total_steps": run.total_steps, "stop_reason": None if end is None else end.fields.get("reason"),
               "validations": len(rows), "last_val": last, "best_val_loss": run.best_val_loss,
               "tokens_per_s_median": sorted(tok_s)[len(tok_s) // 2] if tok_s else None,
               "bf16_bytes": len(data), "parts": len(parts), "out": str(out_dir), **(extra or {})}
    write_json(out_dir / "summary.json", summary)
    return summary


def join(parts_dir: Path, checkpoint_dir: Path) -> Path:
    """Rebuild a v2 checkpoint from ``export``'s parts (each checked against the manifest).

    Raises:
        ExportError: a missing or altered part, or a manifest that is not ``export``'s.
    """
    import tempfile

    import numpy as np
    from safetensors.numpy import load_file

    from pawn.checkpoint import CONFIG_FILE, read_model_config, save_checkpoint

    try:
        man = json.loads((parts_dir / MANIFEST).read_text("utf-8"))
        cfg_json = json.loads((parts_dir / CONFIG_FILE).read_text("utf-8"))
        chunks = []
        for p in man["parts"]:
            b = (parts_dir / p["file"]).read_bytes()
            if _sha256(b) != p["sha256"]:
                raise ExportError(f"{parts_dir / p['file']}: SHA-256 differs from {MANIFEST} (damaged or another export)")
            chunks.append(b)
    except FileNotFoundError as e:
        raise ExportError(f"{e.filename}: missing (a parts folder written by benchmarks/train_backbone.py export?)") from None
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ExportError(f"{parts_dir / MANIFEST}: not an export manifest ({e})") from None
    data = b"".join(chunks)
    if _sha256(data) != man.get("sha256"):
        raise ExportError(f"{parts_dir}: the joined weights' SHA-256 differs from {MANIFEST}")
    with tempfile.TemporaryDirectory() as td:  # safetensors reads bf16 (through ml_dtypes) from a file only
        (Path(td) / WEIGHTS).write_bytes(data)
        params = {k: np.asarray(v, np.float32) for k, v in load_file(str(Path(td) / WEIGHTS)).items()}
    config = read_model_config(cfg_json, parts_dir / CONFIG_FILE)
    return save_checkpoint(checkpoint_dir, params, config, run_config=cfg_json.get("run_config"))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export", help="a pretraining run → bf16 parts, curve.json, summary.json")
    e.add_argument("run_dir", type=Path)
    e.add_argument("out_dir", type=Path)
    e.add_argument("--part-bytes", type=int, default=PART_BYTES)
    e.add_argument("--max-files", type=int, default=MAX_FILES)
    e.add_argument("--extra", default="{}", help="JSON object of further summary fields")
    j = sub.add_parser("join", help="export's parts → a v2 checkpoint directory")
    j.add_argument("parts_dir", type=Path)
    j.add_argument("checkpoint_dir", type=Path)
    a = ap.parse_args(argv)
    from pawn.errors import PawnError

    try:
        if a.cmd == "export":
            s = export(a.run_dir, a.out_dir, part_bytes=a.part_bytes, max_files=a.max_files, extra=json.loads(a.extra))
            from pawn.fileio import json_safe

            print(json.dumps(json_safe(s)))
        else:
            print(f"wrote {join(a.parts_dir, a.checkpoint_dir)}")
    except (ExportError, PawnError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
