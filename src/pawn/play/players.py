"""The two kinds of player in a match (spec ``eval-probe-generate-sweep-bench.md`` §4.2): a PAWN
model choosing from legal-restricted logits, and Stockfish driven over UCI.

:class:`PawnPlayer` moves a batch of games with one model forward; :class:`StockfishPool` keeps
one UCI process per concurrent game slot (python-chess :mod:`chess.engine`), reused across games
and started again after it dies.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from pawn.errors import EngineFailure, UsageError

STOCKFISH_INSTALL_HINT = ("install it with 'apt-get install stockfish' (Debian/Ubuntu; the binary lands in /usr/games), "
                          "'brew install stockfish' (macOS) or from https://stockfishchess.org/download/, "
                          "or pass --stockfish PATH")
"""How to get Stockfish, for the one-line error of a missing binary."""

_EXTRA_DIRS = ("/usr/games", "/usr/local/games")


class StockfishNotFound(EngineFailure):
    """No Stockfish binary at the given path, on PATH or in /usr/games."""


class EngineCrashed(EngineFailure):
    """The UCI engine of one game slot died or answered badly; that game ends as "engine error"."""


def find_stockfish(path: Optional[str | os.PathLike] = None) -> str:
    """Path of the Stockfish binary: ``path`` if given (a file or a command on PATH), else
    ``stockfish`` on PATH, else ``/usr/games/stockfish`` (where Debian installs it, off the
    default PATH of non-login shells), else ``/usr/local/games/stockfish``.

    Raises:
        StockfishNotFound: nothing found; the one-line message says how to install it.
    """
    if path is not None:
        p = str(path)
        found = shutil.which(p) if os.sep not in p else (p if os.path.isfile(p) and os.access(p, os.X_OK) else None)
        if found is None:
            raise StockfishNotFound(f"--stockfish {p}: no executable there; {STOCKFISH_INSTALL_HINT}")
        return found
    found = shutil.which("stockfish")
    if found:
        return found
    for d in _EXTRA_DIRS:
        cand = Path(d) / "stockfish"
        if cand.is_file() and os.access(cand, os.X_OK):
            return str(cand)
    raise StockfishNotFound(f"stockfish not found on PATH or in {', '.join(_EXTRA_DIRS)}; {STOCKFISH_INSTALL_HINT}")


class UciPool:
    """One UCI engine process per game slot (python-chess ``SimpleEngine.popen_uci``), any UCI
    engine: ``pawn uci CKPT``, Stockfish, another program. Each process gets those of ``options``
    it declares (the others are named in :attr:`note`) and plays each move with ``limit``; it is sent the game's start position and every move
    (``position startpos moves …``, as GUIs do), so it sees repetitions. A process that dies or
    misbehaves is closed and started afresh for the slot's next game.

    Args:
        command: the program and its arguments (list[str]). options: UCI options to set.
        limit: a :class:`chess.engine.Limit` per move. slots: concurrent games.
        name: the player's name in records and PGN (default: the engine's ``id name``).
        anchor: its rating when it serves as a ladder rung, else None.
    """

    def __init__(self, command: Sequence[str], options: dict, limit: Any, slots: int, name: Optional[str] = None,
                 anchor: Optional[float] = None):
        self.command, self.options, self.limit = list(command), dict(options), limit
        self.path = self.command[0]
        self._name = name
        self.effective_elo = anchor
        self.note: Optional[str] = None
        self._engines: list[Any] = [None] * slots
        self._started = [False] * slots
        self.restarts = 0
        """Processes started again after one died."""

    @property
    def name(self) -> str:
        """The given name, else the engine's ``id name`` once started, else the command."""
        return self._name or " ".join(self.command)

    def _popen(self):
        import chess.engine

        try:
            return chess.engine.SimpleEngine.popen_uci(self.command, timeout=120)
        except FileNotFoundError:
            raise EngineFailure(f"{self.path}: no such program") from None
        except (OSError, chess.engine.EngineError, chess.engine.EngineTerminatedError, TimeoutError) as e:
            raise EngineFailure(f"{' '.join(self.command)}: could not start as a UCI engine ({type(e).__name__}: {e})") from None

    def _start(self):
        import chess.engine

        eng = self._popen()
        if self._name is None:
            self._name = eng.id.get("name") or " ".join(self.command)
        have = {k: v for k, v in self.options.items() if k in eng.options}  # python-chess: case-insensitive names
        missing = sorted(set(self.options) - set(have))
        if missing:
            self.note = f"{self.name} has no option {', '.join(missing)}: not set there"
        try:
            eng.configure(have)
        except chess.engine.EngineError as e:
            eng.quit()
            raise EngineFailure(f"{' '.join(self.command)}: cannot set {have}: {e}") from None
        return eng

    def start(self) -> None:
        """Start slot 0's process now, so a bad binary fails before any game (and
        :attr:`effective_elo` is known)."""
        if self._engines and self._engines[0] is None:
            self._engines[0] = self._start()
            self._started[0] = True

    def move(self, slot: int, board) -> str:
        """The engine's move (UCI) in ``board`` (a :class:`chess.Board` with its move stack: the
        engine is sent its root and every move), from slot ``slot``'s process.

        Raises:
            EngineCrashed: the process died, timed out or sent no legal move; it is closed and
                replaced on the next call.
            EngineFailure: the binary cannot be started at all.
        """
        import chess.engine

        eng = self._engines[slot]
        if eng is None:
            self.restarts += self._started[slot]
            eng = self._engines[slot] = self._start()
            self._started[slot] = True
        try:
            res = eng.play(board, self.limit)
            if res.move is None or res.move not in board.legal_moves:
                raise chess.engine.EngineError(f"no legal bestmove ({res.move})")
            return res.move.uci()
        except (chess.engine.EngineError, chess.engine.EngineTerminatedError, TimeoutError, OSError) as e:
            self._kill(slot)
            raise EngineCrashed(f"slot {slot}: {type(e).__name__}: {e}") from None

    def _kill(self, slot: int) -> None:
        eng, self._engines[slot] = self._engines[slot], None
        if eng is not None:
            try:
                eng.close()
            except Exception:  # already dead: nothing left to close
                pass

    def pids(self) -> list[Optional[int]]:
        """Process id of each slot's engine (None where none runs); for tests and diagnostics."""
        return [None if e is None else e.transport.get_pid() for e in self._engines]

    def close(self) -> None:
        """Quit every process."""
        for i in range(len(self._engines)):
            eng, self._engines[i] = self._engines[i], None
            if eng is not None:
                try:
                    eng.quit()
                except Exception:
                    try:
                        eng.close()
                    except Exception:
                        pass


class StockfishPool(UciPool):
    """One Stockfish process per game slot, at one strength.

    Each process gets ``UCI_LimitStrength = true``, ``UCI_Elo = elo`` (clamped to the range the
    engine advertises; :attr:`effective_elo` is the level actually played), ``Hash = 16`` MB and
    ``Threads = 1``, and searches ``go movetime movetime_ms`` per move (spec §4.2); it is sent the
    start position and the moves (:class:`UciPool`).

    Args:
        path: the binary (:func:`find_stockfish`). elo: requested UCI_Elo. movetime_ms: > 0.
        slots: number of concurrent games (processes started lazily).
    """

    def __init__(self, path: str, elo: int, movetime_ms: float, slots: int):
        import chess.engine

        super().__init__([path], {}, chess.engine.Limit(time=float(movetime_ms) / 1000.0), slots)
        self.requested_elo, self.movetime_ms = int(elo), float(movetime_ms)
        self.effective_elo: int = int(elo)

    @property
    def name(self) -> str:
        """``"stockfish-<elo>"`` (the level played)."""
        return f"stockfish-{self.effective_elo}"

    def _popen(self):
        import chess.engine

        try:
            return chess.engine.SimpleEngine.popen_uci(self.path, timeout=30)
        except FileNotFoundError:
            raise StockfishNotFound(f"{self.path}: not found; {STOCKFISH_INSTALL_HINT}") from None
        except (OSError, chess.engine.EngineError, chess.engine.EngineTerminatedError, TimeoutError) as e:
            raise EngineFailure(f"{self.path}: could not start as a UCI engine ({type(e).__name__}: {e})") from None

    def _start(self):
        import chess.engine

        eng = self._popen()
        opts = eng.options
        elo = self.requested_elo
        if "UCI_Elo" in opts:
            o = opts["UCI_Elo"]
            lo, hi = (o.min if o.min is not None else elo), (o.max if o.max is not None else elo)
            clamped = min(max(elo, lo), hi)
            if clamped != elo:
                self.note = f"{self.path} plays UCI_Elo {lo}..{hi}: level {elo} played as {clamped}"
            self.effective_elo = clamped
        config: dict[str, Any] = {}
        for name, value in (("UCI_LimitStrength", True), ("UCI_Elo", self.effective_elo), ("Hash", 16), ("Threads", 1)):
            if name in opts:
                config[name] = value
        if "UCI_Elo" not in opts:
            eng.quit()
            raise EngineFailure(f"{self.path}: this UCI engine has no UCI_Elo option (not Stockfish?)")
        try:
            eng.configure(config)
        except chess.engine.EngineError as e:
            eng.quit()
            raise EngineFailure(f"{self.path}: cannot set {config}: {e}") from None
        return eng

# --------------------------------------------------------------------------- PAWN
_BUCKET_MIN = 16


def _bucket(n: int, cap: int) -> int:
    """Smallest power of two ≥ n (at least 16), capped at ``cap``: few compiled shapes."""
    b = _BUCKET_MIN
    while b < n:
        b *= 2
    return min(b, cap)


class PawnPlayer:
    """A PAWN model as a player (spec §4.2): its move is taken from the logits at the last real
    position of the game so far, restricted to the legal moves; greedy at T = 0, else sampled from
    softmax(logits / T) over the legal moves (Gumbel-max with the game's NumPy generator).

    The history is truncated to the last ``context − offset`` moves, where ``context`` is the
    sequence length the checkpoint was trained at when it records one (``run_config["seq_len"]``,
    beyond which positions were never seen), else the model's ``max_seq_len``. With the
    outcome-prefix layout the sequence starts with the outcome token of the model's own side
    winning (``WHITE_CHECKMATES`` as white, ``BLACK_CHECKMATES`` as black).

    Any model with the PAWN forward (``model(tokens int32 [B, T], attn_mask bool [B, T]) ->
    logits float32 [B, T, V]``) plays: bare checkpoints, supernet variants, adapter checkpoints.

    Args:
        loaded: a :class:`pawn.evaluate.loading.LoadedModel`.
        layout: the :class:`~pawn.data.layout.Layout` to feed it.
        batch: rows per forward (the number of concurrent games; smaller batches are padded so
            one compiled shape per length bucket serves every call).
        dtype: compute dtype (None = the platform default).
    """

    def __init__(self, loaded, layout, batch: int, dtype: Optional[str] = None):
        import equinox as eqx
        import jax

        self.loaded, self.layout, self.batch, self.dtype = loaded, layout, int(batch), dtype
        self.name = loaded.name
        ctx = loaded.config.max_seq_len
        self.context = min(ctx, loaded.trained_seq_len) if loaded.trained_seq_len else ctx
        if self.context < 1 + layout.offset:
            raise UsageError(f"{loaded.source}: context {self.context} holds no move")

        @eqx.filter_jit
        def logits_at(model, tokens, mask, last, dtype):
            out = model(tokens, mask, dtype=dtype)
            return jax.numpy.take_along_axis(out, last[:, None, None], axis=1)[:, 0]

        self._logits_at = logits_at

    def legal_logits(self, histories: Sequence[Sequence[int]], legal: Sequence[Sequence[int]], white: Sequence[bool],
                     prefix_tokens: Optional[Sequence[Optional[int]]] = None) -> list[np.ndarray]:
        """The model's logits at each game's last move, restricted to its legal moves.

        Args:
            histories: move tokens played so far per game; only the last ``context − offset``
                are fed (a sliding window). In the pure-moves layout each needs ≥ 1 move.
            legal: legal move tokens per game (non-empty).
            white: whether this player has the white pieces in each game (the default outcome
                token of the outcome-prefix layout: its own side checkmating).
            prefix_tokens: per game, an outcome token to write at position 0 instead of that
                default (outcome-prefix layout only; None entries keep the default).

        Returns:
            list of float64 arrays, ``[len(legal[i])]`` logits each, in ``legal[i]``'s order.

        Raises:
            ValueError: an empty history in the pure-moves layout.
        """
        import jax.numpy as jnp

        from pawn.vocab import BLACK_CHECKMATES, PAD_TOKEN, WHITE_CHECKMATES

        out: list[np.ndarray] = []
        off = self.layout.offset
        keep = self.context - off
        for start in range(0, len(histories), self.batch):
            hs = [list(h[-keep:]) if keep > 0 else [] for h in histories[start:start + self.batch]]
            n = len(hs)
            T = _bucket(max(len(h) for h in hs) + off, self.context)
            tok = np.full((self.batch, T), PAD_TOKEN, np.int32)
            last = np.zeros(self.batch, np.int32)
            for i, h in enumerate(hs):
                if off:
                    pre = prefix_tokens[start + i] if prefix_tokens is not None else None
                    tok[i, 0] = pre if pre is not None else (WHITE_CHECKMATES if white[start + i] else BLACK_CHECKMATES)
                tok[i, off:off + len(h)] = h
                last[i] = off + len(h) - 1
                if last[i] < 0:
                    raise ValueError("pure-moves play needs at least one move of history (the opening book gives move 1)")
            mask = np.arange(T)[None, :] <= last[:, None]
            logits = np.asarray(self._logits_at(self.loaded.model, jnp.asarray(tok), jnp.asarray(mask), jnp.asarray(last), self.dtype))
            for i in range(n):
                out.append(logits[i, np.asarray(legal[start + i], np.int64)].astype(np.float64))
        return out

    def buckets(self) -> list[int]:
        """The padded sequence lengths a forward can have (powers of two ≥ 16, capped at the
        context): one compiled program each."""
        out, b = [], _BUCKET_MIN
        while True:
            out.append(min(b, self.context))
            if b >= self.context:
                return out
            b *= 2

    def warm(self, length: int) -> None:
        """Compile the forward for sequences padded to ``length`` (one of :meth:`buckets`) by
        running it once on a dummy game of that length."""
        from pawn.vocab import uci_to_token

        n = max(1, length - self.layout.offset)
        e4 = uci_to_token("e2e4")
        self.legal_logits([[e4] * n], [[e4]], [True])

    def choose(self, histories: Sequence[Sequence[int]], legal: Sequence[Sequence[int]], white: Sequence[bool],
               temperature: float, rngs: Sequence[np.random.Generator]) -> list[int]:
        """One move token per game.

        Args:
            histories: move tokens played so far per game (≥ 1 in the pure-moves layout).
            legal: legal move tokens per game (non-empty).
            white: whether this player has the white pieces in each game.
            temperature: 0 = greedy (argmax over legal logits), else > 0.
            rngs: one NumPy generator per game (used only when temperature > 0).

        Returns:
            list[int]: the chosen legal token per game.
        """
        out: list[int] = []
        for i, x in enumerate(self.legal_logits(histories, legal, white)):
            lg = np.asarray(legal[i], np.int64)
            if temperature > 0:
                x = x / temperature + rngs[i].gumbel(size=x.shape)
            out.append(int(lg[int(np.argmax(x))]))
        return out
