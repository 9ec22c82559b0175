"""PAWN on the Hugging Face Hub: background pushing of run checkpoints (:mod:`pawn.hub.push`),
model cards (:mod:`pawn.hub.card`), verified downloads (:mod:`pawn.hub.fetch`) and the Hub error
rules both directions share (:mod:`pawn.hub.errors`). Inside the package imports run one way
(push → card, errors; fetch → errors): the ``pawn.hub`` layers contract in ``pyproject.toml``.

Layer: imports :mod:`pawn.checkpoint`, :mod:`pawn.config`, :mod:`pawn.errors` and
:mod:`pawn.fileio` only (never the trainer or evaluation), so ``pawn pretrain``, ``pawn adapt``
and ``pawn convert`` can all use it. For the files of a finished run, ``hf upload`` (the
huggingface_hub CLI) already pushes a folder; PAWN does not re-implement it.
"""

from pawn.hub.card import CARD_FILE, card_for_checkpoint, model_card
from pawn.hub.push import (
    CheckpointUploader,
    HubPushError,
    HubPushHook,
    PushOutcome,
    check_can_push,
    open_run_push,
    push_checkpoint,
)

__all__ = [
    "CARD_FILE", "CheckpointUploader", "HubPushError", "HubPushHook", "PushOutcome", "card_for_checkpoint",
    "check_can_push", "model_card", "open_run_push", "push_checkpoint",
]
