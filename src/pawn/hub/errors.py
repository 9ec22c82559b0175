"""How a Hugging Face Hub call failed, and whether the Hub is in offline mode: what pushing
(:mod:`pawn.hub.push`) and fetching (:mod:`pawn.hub.fetch`) both need.

Layer: the bottom of :mod:`pawn.hub` (``huggingface_hub`` is imported inside the functions, so
importing this module stays cheap).
"""

from __future__ import annotations

import os
import re
from typing import Optional


def _env_true(name: str) -> bool:
    """True when the environment variable ``name`` is 1/ON/YES/TRUE (any case, spaces stripped)."""
    return os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE")


def is_offline() -> bool:
    """True when huggingface_hub is in offline mode (``HF_HUB_OFFLINE``, or the legacy
    ``TRANSFORMERS_OFFLINE``, set to 1/ON/YES/TRUE now or when huggingface_hub was imported)."""
    if _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE"):
        return True
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except ImportError:  # pragma: no cover - huggingface_hub is a core dependency
        return False


TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
STORAGE_WORDS = ("storage", "quota", "exceeded", "too large", "limit")


_XET_STATUS = re.compile(r"HTTP status (?:client|server) error \((\d{3})")


def _by_status(status: Optional[int], text: str) -> str:
    """:func:`classify_error` of an HTTP answer with ``status`` (None: no answer) and lower-cased ``text``."""
    if status in (401, 402, 403, 404, 413) or (status is not None and 400 <= status < 500 and any(w in text for w in STORAGE_WORDS)):
        return "permanent"
    if status is None or status in TRANSIENT_STATUS or status >= 500:
        return "transient"
    return "item"


def classify_error(e: BaseException) -> str:
    """``"transient"`` (retry: connection errors, timeouts, 408/409/429/5xx), ``"permanent"``
    (stop pushing: 401/403, 404, 402/413, storage/quota messages, offline mode) or ``"item"``
    (this checkpoint fails, later ones are tried: other HTTP 4xx, a local file error). The status
    of an ``hf_xet`` error is read from its message."""
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled

    if isinstance(e, OfflineModeIsEnabled):
        return "permanent"
    if isinstance(e, HfHubHTTPError):
        resp = getattr(e, "response", None)
        return _by_status(getattr(resp, "status_code", None), str(e).lower())
    try:
        import httpx2 as _httpx
    except ImportError:  # older huggingface_hub releases use requests / httpx
        _httpx = None
    if _httpx is not None and isinstance(e, _httpx.TransportError):
        return "transient"
    if isinstance(e, (ConnectionError, TimeoutError)):
        # hf_xet (Xet storage uploads: buckets) raises ConnectionError for every HTTP failure, the
        # status only in its message ("HTTP status client error (401 Unauthorized) ...")
        m = _XET_STATUS.search(str(e))
        return _by_status(int(m.group(1)), str(e).lower()) if m else "transient"
    if type(e).__module__.split(".")[0] in ("httpx", "requests", "urllib3") and "Error" in type(e).__name__:
        return "transient"
    return "item"


def one_line(e: BaseException, limit: int = 300) -> str:
    """``e`` as one line of at most ``limit`` characters: ``HTTP <status>: <server message>`` for an HTTP
    error, else ``<ExceptionType>: <message>`` (whitespace collapsed)."""
    resp = getattr(e, "response", None)
    status = getattr(resp, "status_code", None)
    server = getattr(e, "server_message", None)
    text = " ".join(str(server or e).split()) or type(e).__name__
    prefix = f"HTTP {status}: " if status else f"{type(e).__name__}: "
    return (prefix + text)[:limit]
