"""Fetch PAWN checkpoints from the Hugging Face Hub: ``owner/name[@revision]`` ids, pinned to the
resolved commit, never loading a partial download (spec ``model-and-checkpoints.md`` §4.1, §5.4,
§6.3, §6.4).

A Hub id is ``owner/name`` optionally followed by ``@revision`` (a branch, tag or commit id).
:func:`fetch_snapshot` downloads with ``huggingface_hub.snapshot_download`` (content-addressed
HF cache; ``HF_HUB_OFFLINE=1`` reads the cache only) and returns the *resolved commit* (the
snapshot folder's name, a 40-hex id), so callers key caches by content version, not by name.

Repo kinds, told apart by the root files:

* **v2** (a root ``.complete`` manifest, e.g. ``pawn convert --push-to-hub``): every file the
  manifest lists is downloaded; :func:`materialise_v2` links exactly those files into
  ``cached_assets_path("pawn", "hub", <owner--name>)/<commit>`` (so unrelated repo files never
  break the strict file-set rule of §5.4) where :func:`pawn.checkpoint.load_checkpoint` verifies
  every SHA-256 before use.
* **v1** (``config.json`` + ``model.safetensors``, no manifest; the published models): converted
  by :func:`pawn.convert.convert`.

Before anything is used, every expected file must be present and every ``*.safetensors`` file
must have a valid header whose tensors end exactly at the end of the file
(:func:`check_safetensors_file`): an interrupted or truncated download is refused with one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

from pawn.checkpoint import MANIFEST, CheckpointError, CheckpointIntegrityError

_REF = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(?:@(?P<rev>[\w./-]+))?$")
V1_FILES = ("config.json", "model.safetensors")


class HubDownloadError(CheckpointError):
    """A Hub checkpoint cannot be fetched or is incomplete; the message (one line) names the repo,
    revision and file."""


@dataclass(frozen=True)
class HubRef:
    """A parsed Hub id.

    Attributes:
        repo_id: ``owner/name``.
        revision: branch, tag or commit id after ``@``; None for the default branch.
    """

    repo_id: str
    revision: Optional[str] = None

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")

    @property
    def folder_name(self) -> str:
        """``owner--name``: a file-system-safe name for the repo."""
        return self.repo_id.replace("/", "--")


def parse_hub_ref(source: str) -> Optional[HubRef]:
    """``owner/name[@revision]`` → :class:`HubRef`; None when ``source`` is an existing local path
    or not shaped like a Hub id."""
    m = _REF.match(str(source))
    if m is None or Path(source).exists():
        return None
    return HubRef(m["repo"], m["rev"])


@dataclass
class HubSnapshot:
    """A downloaded, checked Hub checkpoint.

    Attributes:
        ref: what was asked for. commit: the resolved commit id (40 hex).
        kind: ``"v1"`` (published PyTorch layout) or ``"v2"`` (PAWN manifest at the root).
        path: the HF cache snapshot folder holding the files.
        files: names of the checkpoint's files in ``path`` (the manifest's list, or the two v1 files).
    """

    ref: HubRef
    commit: str
    kind: Literal["v1", "v2"]
    path: Path
    files: tuple[str, ...]


def check_safetensors_file(path: Path) -> None:
    """Refuse a truncated or malformed safetensors file without reading its tensors: the 8-byte
    little-endian header length, a JSON header, and tensor ``data_offsets`` whose largest end equals
    the file size minus the header (safetensors format).

    Raises:
        CheckpointIntegrityError: one line naming the file and what is wrong.
    """
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointIntegrityError(f"{path}: truncated safetensors file ({size} bytes, no header)")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise CheckpointIntegrityError(f"{path}: truncated safetensors file (header of {n} bytes, file of {size})")
            header = json.loads(f.read(n))
    except OSError as e:
        raise CheckpointIntegrityError(f"{path}: unreadable ({e.strerror or e})") from None
    except ValueError:
        raise CheckpointIntegrityError(f"{path}: safetensors header is not valid JSON (corrupt or partial download)") from None
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict) and "data_offsets" in v]
    if max(ends, default=0) != size - 8 - n:
        raise CheckpointIntegrityError(
            f"{path}: safetensors data is {size - 8 - n} bytes but its header describes {max(ends, default=0)} "
            "(truncated or partial download)"
        )


def hf_dirs() -> tuple[str, str]:
    """``(hub cache, assets cache)`` from the environment *now* (``HF_HUB_CACHE`` /
    ``HF_ASSETS_CACHE``, else ``$HF_HOME/hub`` / ``$HF_HOME/assets``, else huggingface_hub's
    defaults): huggingface_hub reads them once at import, and a long-lived process or a test may
    change them later."""
    from huggingface_hub import constants

    home = os.environ.get("HF_HOME")
    hub = os.environ.get("HF_HUB_CACHE") or (os.path.join(home, "hub") if home else constants.HF_HUB_CACHE)
    assets = os.environ.get("HF_ASSETS_CACHE") or (os.path.join(home, "assets") if home else constants.HF_ASSETS_CACHE)
    return hub, assets


def _snapshot(ref: HubRef, revision: Optional[str], patterns: list[str]) -> Path:
    """``snapshot_download`` restricted to ``patterns``; every failure becomes one line."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    from pawn.hub.push import is_offline

    try:
        return Path(snapshot_download(ref.repo_id, revision=revision, allow_patterns=patterns, cache_dir=hf_dirs()[0],
                                      endpoint=os.environ.get("HF_ENDPOINT") or None, local_files_only=is_offline()))
    except RevisionNotFoundError:
        raise HubDownloadError(f"{ref}: no revision {revision!r} in {ref.repo_id} on the Hugging Face Hub") from None
    except RepositoryNotFoundError:
        raise HubDownloadError(f"{ref}: no such model repository on the Hugging Face Hub (or it is private)") from None
    except GatedRepoError:
        raise HubDownloadError(f"{ref}: the repository is gated; log in with `hf auth login` and accept its terms") from None
    except (LocalEntryNotFoundError, OfflineModeIsEnabled):
        raise HubDownloadError(
            f"{ref}: not in the local Hugging Face cache and the Hub cannot be reached "
            "(offline or HF_HUB_OFFLINE=1); connect once to download it"
        ) from None
    except HfHubHTTPError as e:
        raise HubDownloadError(f"{ref}: Hub request failed ({str(e).splitlines()[0]})") from None
    except Exception as e:  # httpx transport errors (dropped connection mid-file), OSError, ...
        first = str(e).splitlines()[0] if str(e) else ""
        raise HubDownloadError(f"{ref}: download failed, nothing loaded ({e.__class__.__name__}: {first})") from None


def fetch_snapshot(source: str | HubRef) -> HubSnapshot:
    """Download a Hub checkpoint at its resolved commit and check it is whole.

    Args:
        source: ``owner/name[@revision]`` or a :class:`HubRef`.

    Returns:
        :class:`HubSnapshot` (v2: the manifest and every file it lists are present and every
        safetensors header is valid; hashes are checked by :func:`materialise_v2`'s loader; v1:
        ``config.json`` and a valid ``model.safetensors`` are present).

    Raises:
        HubDownloadError: unknown repo/revision, offline with nothing cached, a failed or
            interrupted download, or a missing file. CheckpointIntegrityError: a truncated or
            malformed safetensors file (e.g. a partial download left in the cache).
    """
    ref = source if isinstance(source, HubRef) else parse_hub_ref(source)
    if ref is None:
        raise HubDownloadError(f"{source}: not a Hugging Face Hub id (owner/name[@revision])")
    root = _snapshot(ref, ref.revision, [MANIFEST, *V1_FILES])
    commit = root.name
    if (root / MANIFEST).is_file():
        try:
            listed = json.loads((root / MANIFEST).read_text("utf-8"))["files"]
            names = tuple(sorted(str(k) for k in listed))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise CheckpointIntegrityError(f"{ref}: {MANIFEST} at commit {commit[:12]} is not a readable manifest") from None
        if any("/" in n or n in ("", ".", "..") for n in names):
            raise CheckpointIntegrityError(f"{ref}: {MANIFEST} lists a file outside the checkpoint folder")
        if not all((root / n).is_file() for n in names):
            root = _snapshot(ref, commit, [MANIFEST, *names])
        kind: Literal["v1", "v2"] = "v2"
    else:
        names, kind = V1_FILES, "v1"
    missing = [n for n in names if not (root / n).is_file()]
    if missing:
        raise HubDownloadError(
            f"{ref}: commit {commit[:12]} lacks {', '.join(missing)} after download "
            f"({'listed in its ' + MANIFEST if kind == 'v2' else 'a v1 checkpoint needs config.json and model.safetensors'}); nothing loaded"
        )
    for n in names:
        if n.endswith(".safetensors"):
            check_safetensors_file(root / n)
    return HubSnapshot(ref, commit, kind, root, names)


def materialise_v2(snap: HubSnapshot) -> Path:
    """Link (or copy) a v2 snapshot's manifest and listed files into
    ``cached_assets_path("pawn", "hub", <owner--name>)/<commit>``, atomically (staging folder,
    then rename), and return that directory, ready for :func:`pawn.checkpoint.load_checkpoint`
    (which verifies every hash). An existing folder for the commit is reused."""
    from huggingface_hub import cached_assets_path

    base = cached_assets_path(library_name="pawn", namespace="hub", subfolder=snap.ref.folder_name, assets_dir=hf_dirs()[1])
    target = base / snap.commit
    if (target / MANIFEST).is_file():
        return target
    staging = base / f"{snap.commit}.tmp{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    try:
        for n in (*snap.files, MANIFEST):
            src = (snap.path / n).resolve()
            try:
                os.link(src, staging / n)
            except OSError:
                shutil.copyfile(src, staging / n)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
