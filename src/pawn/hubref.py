"""Hugging Face Hub ids (``owner/name[@revision][/sub/folder]``): the grammar alone, pure string
parsing with no Hub access, so that :mod:`pawn.checkpoint` (below :mod:`pawn.hub`, which imports
it) can tell a Hub id from a local path without importing the Hub layer. :mod:`pawn.hub.fetch`
documents the convention and re-exports these names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional
from urllib.parse import quote, unquote

_SEG = r"[\w.-]+"
_REF = re.compile(rf"^(?P<repo>[A-Za-z0-9][\w.-]*/{_SEG})(?:@(?P<rev>[\w.%-]+(?:/{_SEG})*)|(?P<path>(?:/{_SEG})+))?/?$")
_SPECIAL_REF = re.compile(r"^refs/(?:convert/[\w.-]+|pr/\d+)(?=/|$)")  # huggingface_hub's revisions with a '/'
_COMMIT = re.compile(r"^[0-9a-f]{40}$")

@dataclass(frozen=True)
class HubRef:
    """A parsed Hub id.

    Attributes:
        repo_id: ``owner/name``.
        revision: branch, tag or commit id after ``@``; None for the default branch.
        subfolder: the checkpoint's folder in the repo (``checkpoints/step_00001000``), ``""`` for
            the root.
        ambiguous: ``revision`` holds everything after ``@`` and has a ``/`` that may be part of
            a branch name (``run/my-run``) or start the folder; :func:`resolve_ref` splits it.
    """

    repo_id: str
    revision: Optional[str] = None
    subfolder: str = ""
    ambiguous: bool = False

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "") + (f"/{self.subfolder}" if self.subfolder else "")

    @property
    def folder_name(self) -> str:
        """``owner--name``: a file-system-safe name for the repo."""
        return self.repo_id.replace("/", "--")

    @property
    def where(self) -> str:
        """``repo_id[@revision]`` without the folder, for messages."""
        return self.repo_id + (f"@{self.revision}" if self.revision else "")

    def pinned(self, commit: str) -> str:
        """The id pinned to ``commit`` (40 hex): ``owner/name@<commit>[/subfolder]``; always parses
        back unambiguously."""
        return f"{self.repo_id}@{commit}" + (f"/{self.subfolder}" if self.subfolder else "")

    def cache_name(self, commit: str) -> str:
        """A flat, file-system-safe name for this checkpoint at ``commit``: ``<commit>`` for the
        root, ``<commit>--<subfolder with '/' as %2F>`` for a folder."""
        return commit + (f"--{quote(self.subfolder, safe='')}" if self.subfolder else "")


def parse_hub_ref(source: str) -> Optional[HubRef]:
    """``owner/name[@revision][/sub/folder]`` → :class:`HubRef` (huggingface_hub's ``hf://`` path
    grammar without the prefix; see the module docstring); None when ``source`` is an existing
    local path or not shaped like a Hub id (a ``.``/``..`` folder segment included).

    ``owner/name/a/b`` is folder ``a/b`` of the default branch. After ``@``, ``refs/pr/N`` /
    ``refs/convert/NAME`` (huggingface_hub's special refs), a 40-hex commit id or a first segment
    with ``%2F`` is the revision and the rest the folder; any other ``rev/more`` is kept whole in
    ``revision`` with ``ambiguous=True`` (the repo's branch names decide, :func:`resolve_ref`).
    """
    source = str(source)
    m = _REF.match(source)
    if m is None or Path(source).exists():
        return None
    if m["path"] is not None:
        sub = m["path"].strip("/")
        if any(seg in (".", "..") for seg in sub.split("/")):
            return None
        return HubRef(m["repo"], None, sub)
    rest = m["rev"]
    if rest is None:
        return HubRef(m["repo"])
    special = _SPECIAL_REF.match(rest)
    first, _, tail = rest.partition("/")
    if special is not None:
        rev, tail = special.group(), rest[special.end():].lstrip("/")
    elif "%" in first or _COMMIT.match(first) or not tail:
        rev = unquote(first)
    else:
        if any(seg in (".", "..") for seg in tail.split("/")):
            return None
        return HubRef(m["repo"], rest, "", ambiguous=True)
    if not rev or any(seg in (".", "..") for seg in tail.split("/") if tail):
        return None
    return HubRef(m["repo"], rev, tail)


def is_hub_id(source: str) -> bool:
    """True if ``source`` looks like a Hugging Face Hub id (``owner/name``, optionally
    ``@revision``: a branch, tag or commit id, and ``/sub/folder``: a checkpoint folder in the repo;
    grammar in :func:`parse_hub_ref`) and is not an existing local path."""
    return parse_hub_ref(str(source)) is not None
