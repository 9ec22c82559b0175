"""The trainer's side of ``--push-to-bucket`` (:mod:`pawn.hub.bucket`), next to ``--push-to-hub``
(:class:`pawn.train.run.HubHook`): :class:`BucketHook` and :func:`with_bucket`, which joins both
pushes into the one hook object the training commands start, attach and close.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from pawn.train.run import Hook, HubHook


class BucketHook(HubHook):
    """Sync each sealed checkpoint, ``metrics.jsonl`` and ``config.json`` to a storage bucket
    through a :class:`pawn.hub.bucket.BucketUploader` (held until the checkpoint's ``train``
    record, outcomes written as ``hub`` records, bounded wait at :meth:`close`: as
    :class:`~pawn.train.run.HubHook`)."""

    @classmethod
    def start(cls, bucket_id: Optional[str], run_dir: Path, *, private: bool, wait_s: float,  # type: ignore[override]
              is_main: bool, log: Callable[[str], None], run_id: Optional[str] = None) -> Optional["BucketHook"]:
        """Create the bucket and start the uploader (main process only; None when ``bucket_id``
        is None). Call before :meth:`Run.open`, then :meth:`attach`. ``run_id``: the run's
        (:attr:`pawn.train.run.Run.run_id`): a bucket folder holding another run's files is refused.

        Raises:
            pawn.hub.push.HubPushError, pawn.errors.UsageError: the Hub refused (one line).
        """
        if bucket_id is None or not is_main:
            return None
        from pawn.hub.bucket import open_bucket_push

        return cls(open_bucket_push(bucket_id, run_dir, private=private, wait_s=wait_s, log=log, run_id=run_id))


class PushHooks(Hook):
    """Several push hooks (``--push-to-hub``, ``--push-to-bucket``) as one: :meth:`attach`,
    :meth:`on_event` and :meth:`close` go to each in order (so the exit waits add up)."""

    def __init__(self, hooks: list[Any]):
        self.hooks = hooks

    def attach(self, run: Any) -> None:
        for h in self.hooks:
            h.attach(run)

    def on_event(self, event: Any) -> None:
        for h in self.hooks:
            h.on_event(event)

    def close(self, log: Callable[[str], None] = print) -> None:
        for h in self.hooks:
            h.close(log)


def with_bucket(hub: Optional[HubHook], bucket_id: Optional[str], run_dir: Path, *, private: bool, wait_s: float,
                is_main: bool, log: Callable[[str], None], run_id: Optional[str] = None) -> Optional[Hook]:
    """``hub`` (the ``--push-to-hub`` hook or None) joined with a started :class:`BucketHook` for
    ``bucket_id`` (``run_id``: see :meth:`BucketHook.start`): ``hub`` alone without a bucket, the bucket hook alone without ``hub``, else a
    :class:`PushHooks`. When the bucket cannot start, ``hub`` is closed before the error goes up.

    Raises:
        pawn.hub.push.HubPushError, pawn.errors.UsageError: the bucket cannot be created (one line).
    """
    try:
        bucket = BucketHook.start(bucket_id, run_dir, private=private, wait_s=wait_s, is_main=is_main, log=log, run_id=run_id)
    except BaseException:
        if hub is not None:
            hub.close(log)
        raise
    if bucket is None or hub is None:
        return bucket or hub
    return PushHooks([hub, bucket])
