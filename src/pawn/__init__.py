"""PAWN: chess world-model transformers trained on uniformly random legal games.

The Rust engine lives in :mod:`pawn.engine` (random games, legal masks, board states, PGN/UCI);
vocabulary constants live once in :mod:`pawn.vocab`.
"""

from importlib.metadata import PackageNotFoundError, version as _version

try:
    __version__ = _version("pawn")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"

__all__ = ["__version__", "load_model"]


def load_model(path_or_hub_id):
    """Load a PAWN model from a v2 checkpoint directory or a Hugging Face Hub id
    (``owner/name[@revision][/folder]``): ``(PAWNModel, ModelConfig)``; see
    :func:`pawn.evaluate.loading.load_model`."""
    from pawn.evaluate.loading import load_model as _load

    return _load(path_or_hub_id)
