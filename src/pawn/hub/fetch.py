"""Fetch PAWN checkpoints from the Hugging Face Hub: ``owner/name[@revision][/sub/folder]`` ids,
pinned to the resolved commit, never loading a partial download (spec ``model-and-checkpoints.md``
§4.1, §5.4, §6.3, §6.4; training pushes lay checkpoints out as in ``training-and-adapters.md`` §1.11).

A Hub id follows huggingface_hub's own path convention (``HfFileSystem`` / ``hf://`` URIs,
``huggingface_hub.utils.parse_hf_uri``): ``owner/name`` names the repo root, ``@revision`` a
branch, tag or commit id, and anything after that a folder in the repo holding one checkpoint:
``owner/name/checkpoints/step_00001000`` (default branch) or
``owner/name@run%2Fmy-run/checkpoints/best``. huggingface_hub needs a ``/`` inside a revision
written ``%2F``; PAWN pushes to branches like ``run/<run dir>``, so it also takes the revision
unencoded, ``owner/name@run/my-run/checkpoints/best``, and splits it at the longest branch or tag
name of the repo (:func:`resolve_ref`; the local cache's ``refs/`` when offline). A local path that
exists always wins over a Hub id.

:func:`fetch_snapshot` downloads with ``huggingface_hub.snapshot_download`` (content-addressed
HF cache; ``HF_HUB_OFFLINE=1`` reads the cache only), restricted by ``allow_patterns`` to the
checkpoint's folder, and returns the *resolved commit* (the snapshot folder's name, a 40-hex id),
so callers key caches by content version and folder, not by name.

Checkpoint kinds, told apart by the folder's files:

* **v2** (a ``.complete`` manifest, e.g. ``pawn convert --push-to-hub`` at the root, or a pushed
  run's ``checkpoints/step_XXXXXXXX/``; adapter checkpoints too): every file the manifest lists is
  downloaded; :func:`materialise_v2` links exactly those files into
  ``cached_assets_path("pawn", "hub", <owner--name>)/<commit>[--<folder, %-encoded>]`` (so
  unrelated repo files never break the strict file-set rule of §5.4) where
  :func:`pawn.checkpoint.load_checkpoint` verifies every SHA-256 before use.
* **v1** (``config.json`` + ``model.safetensors``, no manifest; the published models): converted
  by :func:`pawn.convert.convert`.

Before anything is used, every expected file must be present and every ``*.safetensors`` file
must have a valid header whose tensors end exactly at the end of the file
(:func:`check_safetensors_file`): an interrupted or truncated download is refused with one line.
A folder holding no checkpoint is refused with one line naming the repo, revision and folder and
the checkpoint folders the commit does have.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Literal, Optional

from pawn.checkpoint import MANIFEST, CheckpointError, CheckpointIntegrityError
from pawn.hub.errors import classify_error, is_offline, one_line
from pawn.hubref import _COMMIT, HubRef, is_hub_id, parse_hub_ref  # noqa: F401  (the Hub-id grammar, re-exported)

V1_FILES = ("config.json", "model.safetensors")
CHECKPOINT_MARKERS = (MANIFEST, "model.safetensors")
"""A repo folder holding one of these file names holds a checkpoint (listed in errors)."""


class HubDownloadError(CheckpointError):
    """A Hub checkpoint cannot be fetched or is incomplete; the message (one line) names the repo,
    revision and file."""


@dataclass
class HubSnapshot:
    """A downloaded, checked Hub checkpoint.

    Attributes:
        ref: what was asked for, resolved (:func:`resolve_ref`: revision and folder split).
        commit: the resolved commit id (40 hex).
        kind: ``"v1"`` (published PyTorch layout) or ``"v2"`` (PAWN manifest in the folder).
        path: the folder of the HF cache snapshot holding the files (``<snapshot>/<subfolder>``).
        files: names of the checkpoint's files in ``path`` (the manifest's list, or the two v1 files).
    """

    ref: HubRef
    commit: str
    kind: Literal["v1", "v2"]
    path: Path
    files: tuple[str, ...]
    from_cache: Optional[str] = None
    """Why the local cache's commit was used without asking the Hub (it could not be reached:
    the one-line reason), or None when the Hub resolved the revision (or it is a commit id, or
    ``HF_HUB_OFFLINE=1`` asked for the cache)."""

    @property
    def pinned(self) -> str:
        """``owner/name@<commit>[/subfolder]``: this exact checkpoint (see :meth:`HubRef.pinned`)."""
        return self.ref.pinned(self.commit)

    def record(self) -> dict:
        """What an output file records about this Hub checkpoint: ``{"id", "commit", "pinned",
        "from_cache"}`` (``from_cache``: the reason the Hub was not asked, else None)."""
        return {"id": str(self.ref), "commit": self.commit, "pinned": self.pinned, "from_cache": self.from_cache}


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


@contextlib.contextmanager
def _hub_errors(ref: HubRef, revision: Optional[str]) -> Iterator[None]:
    """Turn every huggingface_hub / transport failure inside the block into one line."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except HubDownloadError:
        raise
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


def _api():
    from huggingface_hub import HfApi

    return HfApi(endpoint=os.environ.get("HF_ENDPOINT") or None)


def clear_cache_hint(ref: HubRef) -> str:
    """How to drop a damaged cached copy of ``ref``'s repo (for the end of an error line)."""
    return (f"clear the cached copy with `hf cache rm model/{ref.repo_id}` (cache {hf_dirs()[0]}) "
            "and run again online")


def _unreachable(ref: HubRef, revision: Optional[str]) -> Optional[str]:
    """None when the Hub answers for ``revision`` of ``ref``'s repo (one ``repo_info`` call), else
    the one-line reason it cannot be reached (connection refused or timed out, HTTP 5xx/429).
    Other answers (no such repo or revision, gated) are left to the download to report."""
    try:
        _api().repo_info(ref.repo_id, revision=revision)
    except Exception as e:
        return one_line(e, 160) if classify_error(e) == "transient" else None
    return None


_WARNED: set[tuple[str, str]] = set()


def warn_cached_commit(ref: HubRef, commit: str, reason: str) -> None:
    """One ``warning:`` line on stderr (once per process for each id and commit): the Hub could
    not be reached, so ``commit`` from the local cache is used, which may be older than the Hub's."""
    if (str(ref), commit) in _WARNED:
        return
    _WARNED.add((str(ref), commit))
    print(f"warning: {ref}: the Hub cannot be reached ({reason}); using commit {commit[:12]} from the local cache, "
          f"which may be older than {ref.revision or 'the default branch'} on the Hub", file=sys.stderr)


def _snapshot(ref: HubRef, revision: Optional[str], patterns: list[str], *, force: bool = False) -> tuple[Path, Optional[str]]:
    """``snapshot_download`` restricted to ``patterns``; every failure becomes one line.
    huggingface_hub's "No files matched" warning is silenced (a missing folder is reported by
    :func:`fetch_snapshot` in one line).

    A branch or tag is first resolved on the Hub: when the Hub cannot be reached, the cache's commit
    for it is used (``local_files_only``) and the reason returned, so callers can say so
    (huggingface_hub falls back to the cache silently). ``force`` downloads every file again
    (``force_download``), replacing the cached copies.

    Returns:
        ``(snapshot folder, reason the cache was used instead of the Hub or None)``.
    """
    from huggingface_hub import snapshot_download

    offline = is_offline()
    fallback = None
    if not offline and not (revision and _COMMIT.match(revision)):
        fallback = _unreachable(ref, revision)
    quiet = logging.getLogger("huggingface_hub._snapshot_download")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with _hub_errors(ref, revision):
            path = Path(snapshot_download(ref.repo_id, revision=revision, allow_patterns=patterns, cache_dir=hf_dirs()[0],
                                          endpoint=os.environ.get("HF_ENDPOINT") or None,
                                          local_files_only=offline or fallback is not None,
                                          force_download=force and not offline and fallback is None))
    finally:
        quiet.setLevel(level)
    return path, fallback


def _cached_ref_names(repo_id: str) -> set[str]:
    """Branch and tag names recorded in the local HF cache (``refs/<name>`` files of earlier downloads)."""
    refs = Path(hf_dirs()[0]) / f"models--{repo_id.replace('/', '--')}" / "refs"
    if not refs.is_dir():
        return set()
    return {p.relative_to(refs).as_posix() for p in refs.rglob("*") if p.is_file()}


def resolve_ref(ref: HubRef) -> HubRef:
    """Split an ambiguous ``rev/more/parts`` (see :func:`parse_hub_ref`) into a revision and a
    folder: the longest leading part that is a branch or tag of the repo (``HfApi.list_repo_refs``;
    offline or unreachable: the names in the local cache's ``refs/``) is the revision, the rest the
    folder. An unambiguous ``ref`` is returned as is.

    Raises:
        HubDownloadError: no leading part names a branch or tag (one line listing the branches),
            or the repo cannot be reached and nothing is cached.
    """
    if not ref.ambiguous:
        return ref
    parts = ref.revision.split("/")
    names: set[str] = set()
    listed: Optional[list[str]] = None
    failed: Optional[HubDownloadError] = None
    if not is_offline():
        try:
            with _hub_errors(ref, ref.revision):
                got = _api().list_repo_refs(ref.repo_id)
                listed = [r.name for r in got.branches] + [r.name for r in got.tags]
                names = set(listed)
        except HubDownloadError as e:
            if "no such model repository" in str(e) or "gated" in str(e):
                raise
            failed = e  # unreachable or refused: the cache may still know the names
    if listed is None:
        names = _cached_ref_names(ref.repo_id)
    for n in range(len(parts), 0, -1):
        rev = "/".join(parts[:n])
        if rev in names:
            return HubRef(ref.repo_id, rev, "/".join(parts[n:]))
    if listed is None and not names:
        raise failed or HubDownloadError(f"{ref}: not in the local Hugging Face cache and the Hub cannot be reached "
                                         "(offline or HF_HUB_OFFLINE=1); connect once to download it")
    tried = " or ".join(repr("/".join(parts[:n])) for n in range(len(parts) - 1, 0, -1))
    known = ", ".join(sorted(names)[:12]) + (", ..." if len(names) > 12 else "")
    raise HubDownloadError(f"{ref}: no branch or tag {tried} in {ref.repo_id} "
                           f"({'branches and tags' if listed is not None else 'cached revisions'}: {known or 'none'}); "
                           "write a revision with '/' as %2F to be exact, e.g. owner/name@run%2Fmy-run/checkpoints/best")


def checkpoint_folders(ref: HubRef, commit: str) -> Optional[list[str]]:
    """Folders of the repo at ``commit`` that hold a checkpoint (a ``.complete`` manifest or a
    ``model.safetensors``; ``"."`` for the root), from one ``list_repo_tree`` call; None when the
    Hub cannot be asked (offline, unreachable)."""
    if is_offline():
        return None
    try:
        files = [f.path for f in _api().list_repo_tree(ref.repo_id, recursive=True, revision=commit)]
    except Exception:  # only a hint for an error message: never mask the real error
        return None
    found = {(p.rpartition("/")[0] or ".") for p in files if p.rpartition("/")[2] in CHECKPOINT_MARKERS}
    return sorted(found)


def _missing_folder(ref: HubRef, commit: str) -> HubDownloadError:
    folders = checkpoint_folders(ref, commit)
    if folders is None:
        have = ""
    elif folders:
        shown = folders[:10] + (["..."] if len(folders) > 10 else [])
        have = f"; checkpoint folders there: {', '.join(shown)}"
    else:
        have = "; it holds no checkpoint folder"
    return HubDownloadError(f"{ref}: {ref.where} (commit {commit[:12]}) has no checkpoint in folder "
                            f"'{ref.subfolder}' (no {MANIFEST}, config.json or model.safetensors there){have}")


def fetch_snapshot(source: str | HubRef, *, force: bool = False) -> HubSnapshot:
    """Download a Hub checkpoint (the repo root or one folder) at its resolved commit and check it
    is whole. Only that folder's checkpoint files are downloaded (``allow_patterns``).

    A copy failing the size/format check (a truncated or malformed cached file) is downloaded again
    once (``force_download``) before giving up; the final error says how to clear the cache. When
    the Hub cannot be reached, the cache's commit for the revision is used and one ``warning:`` line
    says so (:func:`warn_cached_commit`; :attr:`HubSnapshot.from_cache` records why).

    Args:
        source: ``owner/name[@revision][/sub/folder]`` or a :class:`HubRef`.
        force: download every file again even when cached (``pawn convert --force``).

    Returns:
        :class:`HubSnapshot` (v2: the manifest and every file it lists are present and every
        safetensors header is valid; hashes are checked by :func:`materialise_v2`'s loader; v1:
        ``config.json`` and a valid ``model.safetensors`` are present).

    Raises:
        HubDownloadError: unknown repo/revision, a folder holding no checkpoint (the message names
            the repo, revision, folder and the checkpoint folders that exist), offline with
            nothing cached, a failed or interrupted download, or a missing file.
            CheckpointIntegrityError: a truncated or malformed safetensors file (e.g. a partial
            download left in the cache).
    """
    ref = source if isinstance(source, HubRef) else parse_hub_ref(source)
    if ref is None:
        raise HubDownloadError(f"{source}: not a Hugging Face Hub id (owner/name[@revision][/folder])")
    ref = resolve_ref(ref)
    state: dict = {}
    try:
        got = _fetch_once(ref, force, state)
    except CheckpointIntegrityError as e:
        if is_offline() or state.get("fallback") is not None:
            raise CheckpointIntegrityError(f"{e}; it cannot be downloaded again now (offline); {clear_cache_hint(ref)}") from None
        try:
            got = _fetch_once(ref, True, state)  # once more, replacing the cached copies
        except CheckpointIntegrityError as e2:
            raise CheckpointIntegrityError(f"{e2} (also after downloading it again); {clear_cache_hint(ref)}") from None
    if got.from_cache is not None:
        warn_cached_commit(got.ref, got.commit, got.from_cache)
    return got


def _fetch_once(ref: HubRef, force: bool, state: dict) -> HubSnapshot:
    pre = f"{ref.subfolder}/" if ref.subfolder else ""
    snap, fallback = _snapshot(ref, ref.revision, [pre + MANIFEST, *(pre + f for f in V1_FILES)], force=force)
    state["fallback"] = fallback
    commit = snap.name
    root = snap / ref.subfolder if ref.subfolder else snap
    if (root / MANIFEST).is_file():
        try:
            listed = json.loads((root / MANIFEST).read_text("utf-8"))["files"]
            names = tuple(sorted(str(k) for k in listed))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            raise CheckpointIntegrityError(f"{ref}: {pre}{MANIFEST} at commit {commit[:12]} is not a readable manifest") from None
        if any("/" in n or n in ("", ".", "..") for n in names):
            raise CheckpointIntegrityError(f"{ref}: {pre}{MANIFEST} lists a file outside the checkpoint folder")
        rest = [n for n in names if n not in V1_FILES]  # the first call fetched (with force: again) the others
        if (force and rest) or not all((root / n).is_file() for n in names):
            pats = [pre + n for n in rest] if force else [pre + MANIFEST, *(pre + n for n in names)]
            snap, _ = _snapshot(ref, commit, pats, force=force)
            root = snap / ref.subfolder if ref.subfolder else snap
        kind: Literal["v1", "v2"] = "v2"
    elif ref.subfolder and not any((root / n).is_file() for n in V1_FILES):
        raise _missing_folder(ref, commit)
    else:
        names, kind = V1_FILES, "v1"
    missing = [n for n in names if not (root / n).is_file()]
    if missing:
        raise HubDownloadError(
            f"{ref}: commit {commit[:12]} lacks {', '.join(pre + n for n in missing)} after download "
            f"({'listed in its ' + MANIFEST if kind == 'v2' else 'a v1 checkpoint needs config.json and model.safetensors'}); nothing loaded"
        )
    for n in names:
        if n.endswith(".safetensors"):
            check_safetensors_file(root / n)
    return HubSnapshot(ref, commit, kind, root, names, fallback)


def blob_mismatch(path: Path) -> bool:
    """True when the HF-cache file ``path`` (a snapshot link to ``blobs/<etag>``) does not hash to
    its blob name: SHA-256 for a 64-hex name (LFS files, e.g. every published ``model.safetensors``),
    git's blob SHA-1 or plain SHA-1 for a 40-hex name. False when the name is neither (nothing to
    compare with)."""
    name = Path(os.path.realpath(path)).name
    if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", name):
        return False
    size = os.path.getsize(path)
    h256, h1, git = hashlib.sha256(), hashlib.sha1(), hashlib.sha1(f"blob {size}\0".encode())
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            for h in ((h256,) if len(name) == 64 else (h1, git)):
                h.update(chunk)
    return name not in ((h256.hexdigest(),) if len(name) == 64 else (h1.hexdigest(), git.hexdigest()))


def verify_v1_download(snap: HubSnapshot) -> HubSnapshot:
    """Check a v1 snapshot's files against their HF-cache blob names (:func:`blob_mismatch`; a v1
    checkpoint has no manifest, so a same-size corrupted cached file would otherwise be converted
    without a word); a mismatch is downloaded again once.

    Returns:
        ``snap``, or the re-downloaded snapshot.

    Raises:
        CheckpointIntegrityError: still mismatching, or it cannot be downloaded again (offline or
            unreachable); the line says how to clear the cache.
    """
    bad = [n for n in snap.files if blob_mismatch(snap.path / n)]
    if not bad:
        return snap
    what = f"{snap.ref}: cached {', '.join(bad)} at commit {snap.commit[:12]} does not match its Hub hash (corrupt copy in the cache)"
    if is_offline() or snap.from_cache is not None:
        raise CheckpointIntegrityError(f"{what}; it cannot be downloaded again now (offline); {clear_cache_hint(snap.ref)}")
    again = fetch_snapshot(snap.ref.pinned(snap.commit), force=True)
    again = HubSnapshot(snap.ref, again.commit, again.kind, again.path, again.files, snap.from_cache)
    still = [n for n in again.files if blob_mismatch(again.path / n)]
    if still:
        raise CheckpointIntegrityError(f"{what}, also after downloading it again; {clear_cache_hint(snap.ref)}")
    return again


def materialise_v2(snap: HubSnapshot) -> Path:
    """Link (or copy) a v2 snapshot's manifest and listed files into
    ``cached_assets_path("pawn", "hub", <owner--name>)/<commit>[--<folder>]``
    (:meth:`HubRef.cache_name`: one directory per commit and folder), atomically (staging folder,
    then rename), and return that directory, ready for :func:`pawn.checkpoint.load_checkpoint`
    (which verifies every hash). An existing directory for the commit and folder is reused."""
    from huggingface_hub import cached_assets_path

    base = cached_assets_path(library_name="pawn", namespace="hub", subfolder=snap.ref.folder_name, assets_dir=hf_dirs()[1])
    name = snap.ref.cache_name(snap.commit)
    target = base / name
    if (target / MANIFEST).is_file():
        return target
    staging = base / f"{name}.tmp{os.getpid()}"
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
