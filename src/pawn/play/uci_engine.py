"""A PAWN player model as a UCI engine (``pawn uci``): the protocol as GUIs, cutechess-cli and
lichess-bot use it (Stefan Meyer-Kahlen's UCI specification, April 2006 edition).

Commands: ``uci``, ``debug``, ``isready``, ``setoption``, ``ucinewgame``,
``position startpos|fen … [moves …]``, ``go`` (``searchmoves``, ``ponder``, ``wtime``, ``btime``,
``winc``, ``binc``, ``movestogo``, ``depth``, ``nodes``, ``mate``, ``movetime``, ``infinite``),
``stop``, ``ponderhit``, ``quit``. As the specification asks, unknown leading tokens are skipped
(``joho debug on`` is ``debug on``); a line with no command, a bad ``position`` or a bad option
value is answered with one ``info string`` line and otherwise ignored.

**The move.** ``bestmove`` is always legal: the model's logits are read only at the legal moves
of the position (python-chess's move generator) and the choice is made among those. The model
sees the moves played since the root of the ``position`` command, as tokens, exactly as in
training (``[m1 … mt]``, or ``[outcome, m1 … mt]`` for an outcome-prefix model):

* **FEN start** (``position fen F moves …``): the model sees only the moves after ``F``; it was
  never shown a board, so from a FEN it plays as if those moves had been played from the
  position its training games start in. This is the rule; it is documented, not hidden.
* **Beyond the context** (more than ``context − offset`` moves): the last ``context − offset``
  moves are fed (a sliding window), still restricted to the legal moves.
* **No history** in the pure-moves layout (no position predicts move 1): from the start position
  the move is taken from the ``Book`` option (its first entry at Temperature 0, else one drawn
  uniformly with the engine's generator); from a FEN with no moves after it, a legal move drawn
  uniformly with the engine's generator. An ``info string`` names the rule used.
* **No answer in time** (a compile of a longer length bucket, a loaded machine): when the move's
  time budget (below) runs out before the model answers, the engine plays a legal move drawn
  uniformly with its generator and says so in an ``info string``; the model's answer is dropped.

**Sampling.** ``Temperature`` 0 takes the legal argmax. Above 0 the legal logits are divided by
the temperature, cut to the ``TopK`` most likely moves (0 = all), then to the smallest set whose
probability reaches ``TopP`` (nucleus sampling, Holtzman et al. 2020; 1 = all), and one move is
drawn with a NumPy ``default_rng(Seed)`` generator that restarts at every ``ucinewgame`` and
``setoption name Seed`` (the same games from the same seed).

**MultiPV.** Each ``go`` prints ``info depth 1 seldepth 1 multipv k score cp X nodes 1 nps N
time MS pv MOVE`` for the ``MultiPV`` most likely legal moves, where ``p`` is the model's
probability of the move (softmax of the legal logits at temperature 1, whatever the sampling
settings) and ``X`` is ``p`` on the centipawn scale through Lichess's win-percentage curve read
backwards (:func:`prob_to_cp`: 50 % → 0, 75 % → +298, 90 % → +597), so a GUI shows a move the
model is sure of as a clear plus and one it doubts as a minus. It is the model's confidence in
the move, not an evaluation of the position.

**Time.** ``go`` values are clamped to ±(2^31 − 1) (:data:`GO_INT_MAX`; said in an ``info string``),
so a GUI's 10^400 for "no limit" still gets an answer. ``go movetime M`` gives a budget of ``M`` ms; with ``wtime``/``btime`` the budget is
``left / movestogo + 0.75 · increment`` (``movestogo`` 30 when not given), at most half the time
left; minus ``Move Overhead`` ms in both cases (at least 1 ms). Without either (``depth``,
``nodes``, ``mate`` or nothing) there is no budget. The engine answers as soon as the model has
its move; after ``go infinite`` or ``go ponder`` it waits for ``stop`` (or ``ponderhit``)
before sending ``bestmove``, as the protocol requires. ``depth``, ``nodes`` and ``mate`` do not
change the move (one forward is one node).

**Outcome conditioning.** For an outcome-prefix model, ``Outcome`` picks the token written at
position 0: ``auto`` = the side to move checkmating (``WHITE_CHECKMATES`` when white is to move),
or any outcome name of the vocabulary (spec ``engine.md`` §1.6). The vocabulary has no Elo-band
tokens, so there is no Elo conditioning. A pure-moves model ignores ``Outcome`` (said once).

The model loads once. Inputs of up to :data:`KV_MIN_LEN` tokens are scored by one full forward;
longer ones within the context with a KV cache (:class:`IncrementalLogits`): each move decodes
only the tokens added since the last one (the opponent's move and the engine's own); a new game
or a different history is prefilled, compiled
once per padded length (powers of two from 16 up to the context, :meth:`PawnPlayer.buckets`).
What the first moves of a game run compiles at load, before ``readyok`` (which GUIs wait for, so
no early move falls back for want of a compiled program): the full forward of every length up to
:data:`KV_MIN_LEN`, the first KV-cache prefill past it and the decode step; the other prefill
lengths and the sliding-window forward in a background thread afterwards.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from pawn.vocab import OUTCOME_NAMES, OUTCOME_TOKEN_BASE

ENGINE_AUTHOR = "the PAWN developers"
DEFAULT_BOOK = ("e2e4", "d2d4", "g1f3")
MULTIPV_MAX = 256
"""More than the most legal moves any chess position has (218)."""
KV_MIN_LEN = 64
"""Inputs up to this many tokens are scored by one full forward, longer ones with the KV cache.
Measured with ``benchmarks/uci.py`` on the 2-core CPU: one decode step of a batch-1 game costs
about a full forward of 16–64 tokens (a matrix-vector product reads every weight as a 64-row
product does), so two decode steps per move lose to a forward below ~64 tokens and win above
(TOY shape: 148 ms prefill vs 21 ms for the next move at 250 moves; 4.8 vs 4.3 ms at 8)."""
GO_KEYS_INT = ("wtime", "btime", "winc", "binc", "movestogo", "depth", "nodes", "mate", "movetime")
GO_INT_MAX = 2 ** 31 - 1
"""The largest ``go`` value taken as given (ms for the clocks: about 24.8 days); a larger one (a
GUI's "no limit" as 10^400) is clamped to it, a time below ``-GO_INT_MAX`` to ``-GO_INT_MAX``."""
COMMANDS = ("uci", "debug", "isready", "setoption", "register", "ucinewgame", "position", "go", "stop",
            "ponderhit", "quit")


def _float(text: str, lo: float, hi: float, name: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not a number") from None
    if not (lo <= v <= hi):
        raise ValueError(f"{name}: {v} is outside [{lo}, {hi}]")
    return v


def _int(text: str, lo: int, hi: int, name: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ValueError(f"{name}: {text!r} is not an integer") from None
    if not (lo <= v <= hi):
        raise ValueError(f"{name}: {v} is outside [{lo}, {hi}]")
    return v


@dataclass
class EngineOptions:
    """The UCI options (module docstring for their meaning).

    Attributes:
        temperature: ≥ 0 (0 = argmax). top_k: ≥ 0 (0 = off). top_p: in (0, 1].
        seed: ≥ 0. multipv: 1..256. outcome: ``"auto"`` or an outcome name.
        book: UCI moves for move 1 of a pure-moves model from the start position.
        move_overhead_ms: subtracted from each time budget. ponder: the GUI may send ``go ponder``.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    multipv: int = 1
    outcome: str = "auto"
    book: tuple[str, ...] = DEFAULT_BOOK
    move_overhead_ms: int = 30
    ponder: bool = False

    def declarations(self) -> list[str]:
        """The ``option name …`` lines answered to ``uci``."""
        outcomes = " ".join(f"var {n}" for n in ("auto", *OUTCOME_NAMES))
        return [
            "option name Temperature type string default 0",
            "option name TopK type spin default 0 min 0 max 4096",
            "option name TopP type string default 1",
            "option name Seed type spin default 0 min 0 max 2147483647",
            f"option name MultiPV type spin default 1 min 1 max {MULTIPV_MAX}",
            f"option name Outcome type combo default auto {outcomes}",
            f"option name Book type string default {' '.join(DEFAULT_BOOK)}",
            "option name Move Overhead type spin default 30 min 0 max 5000",
            "option name Ponder type check default false",
        ]

    def set(self, name: str, value: str) -> str:
        """Set option ``name`` (case-insensitive) from its UCI text; returns the canonical name.

        Raises:
            KeyError: no such option. ValueError: a value the option does not take.
        """
        import chess

        key = " ".join(name.lower().split())
        if key == "temperature":
            self.temperature = _float(value, 0.0, 100.0, "Temperature")
        elif key == "topk":
            self.top_k = _int(value, 0, 4096, "TopK")
        elif key == "topp":
            v = _float(value, 0.0, 1.0, "TopP")
            if v == 0.0:
                raise ValueError("TopP: must be > 0")
            self.top_p = v
        elif key == "seed":
            self.seed = _int(value, 0, 2 ** 31 - 1, "Seed")
        elif key == "multipv":
            self.multipv = _int(value, 1, MULTIPV_MAX, "MultiPV")
        elif key == "outcome":
            v = value.strip()
            match = [n for n in ("auto", *OUTCOME_NAMES) if n.lower() == v.lower()]
            if not match:
                raise ValueError(f"Outcome: {v!r} is not auto or one of {', '.join(OUTCOME_NAMES)}")
            self.outcome = match[0]
        elif key == "book":
            moves = tuple(value.replace(",", " ").split())
            legal = {m.uci() for m in chess.Board().legal_moves}
            bad = [m for m in moves if m not in legal]
            if not moves or bad:
                raise ValueError(f"Book: {bad[0] if bad else value!r} is not a legal first move in UCI (e.g. e2e4)")
            self.book = moves
        elif key == "move overhead":
            self.move_overhead_ms = _int(value, 0, 5000, "Move Overhead")
        elif key == "ponder":
            if value.strip().lower() not in ("true", "false"):
                raise ValueError(f"Ponder: {value!r} is not true or false")
            self.ponder = value.strip().lower() == "true"
        else:
            raise KeyError(name)
        return key


def time_budget_ms(params: dict, white_to_move: bool, overhead_ms: float) -> Optional[float]:
    """The move's time budget in ms from the ``go`` parameters (module docstring), or None.

    Args:
        params: parsed ``go`` integers (``movetime``, ``wtime``, ``btime``, ``winc``, ``binc``,
            ``movestogo``; ms). white_to_move: whose clock counts. overhead_ms: ``Move Overhead``.
    """
    if "movetime" in params:
        return max(1.0, params["movetime"] - overhead_ms)
    left = params.get("wtime" if white_to_move else "btime")
    if left is None:
        return None
    inc = params.get("winc" if white_to_move else "binc", 0)
    mtg = params.get("movestogo") or 30
    budget = min(left / max(1, mtg) + 0.75 * inc, 0.5 * left)
    return max(1.0, budget - overhead_ms)


def sample_move(logits: np.ndarray, options: EngineOptions, rng: np.random.Generator) -> int:
    """Index of the chosen move among ``logits`` (float [n] legal logits; module docstring).

    Temperature 0: argmax (first on ties). Else softmax(logits / T) cut to the top k, then to
    the nucleus of mass ``top_p`` (the most likely moves whose cumulative probability first
    reaches it), renormalised, one draw with ``rng``.
    """
    x = np.asarray(logits, np.float64)
    if options.temperature == 0.0:
        return int(np.argmax(x))
    z = x / options.temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep = len(order)
    if options.top_k:
        keep = min(keep, options.top_k)
    if options.top_p < 1.0:
        csum = np.cumsum(p[order])
        keep = min(keep, int(np.searchsorted(csum, options.top_p - 1e-12)) + 1)
    chosen = order[:keep]
    q = p[chosen] / p[chosen].sum()
    return int(chosen[rng.choice(keep, p=q)])


def probabilities(logits: np.ndarray) -> np.ndarray:
    """softmax of the legal logits at temperature 1: float64 [n], sums to 1."""
    x = np.asarray(logits, np.float64)
    p = np.exp(x - x.max())
    return p / p.sum()


LICHESS_WIN_K = 0.00368208
"""The slope of Lichess's win-percentage curve, ``Win% = 50 + 50 · (2 / (1 + exp(−k · cp)) − 1)``
(https://lichess.org/page/accuracy; fitted by Lichess on its players' games)."""
CP_PROB_MIN = 0.001
"""Probabilities are clipped to [this, 1 − this] before the mapping: ±1,876 cp at the ends."""


def prob_to_cp(p: float) -> int:
    """The MultiPV ``score cp`` of a move of probability ``p``: Lichess's win-percentage curve
    (:data:`LICHESS_WIN_K`) read backwards at ``p``, ``cp = ln(p / (1 − p)) / k``, rounded, with
    ``p`` clipped to [:data:`CP_PROB_MIN`, 1 − :data:`CP_PROB_MIN`]: 50 % → 0, 75 % → +298,
    90 % → +597, 10 % → −597, 1 → +1876. The model's confidence in the move on the scale a GUI
    shows, not an evaluation of the position."""
    q = min(max(float(p), CP_PROB_MIN), 1.0 - CP_PROB_MIN)
    return int(round(math.log(q / (1.0 - q)) / LICHESS_WIN_K))


class IncrementalLogits:
    """KV-cached next-move logits for one game (spec ``model-and-checkpoints.md`` §2.10 cache):
    when the model's input grows by the moves of the last turn, only those tokens are decoded
    (:meth:`pawn.model.PAWNModel.decode`, one compiled step at a traced position); any other
    input is prefilled afresh (one compiled prefill per padded length, the cache sized to the
    context). Equal to the full forward within 1e-5 in float32 (the decode's contract).

    Args:
        player: a :class:`pawn.play.players.PawnPlayer` (its model needs ``prefill``/``decode``;
            PAWN models and adapted models have them).
    """

    def __init__(self, player):
        import equinox as eqx
        import jax

        self.player = player
        self.seq: Optional[list[int]] = None
        self.cache = None
        self.last: Optional[np.ndarray] = None

        @eqx.filter_jit
        def prefill_last(model, seq, attn, last, dtype, cache_len):
            logits, cache = model.prefill(seq, attn, dtype=dtype, cache_len=cache_len)
            return jax.lax.dynamic_index_in_dim(logits, last, axis=1, keepdims=False), cache

        self._prefill = prefill_last

    def logits(self, seq: Sequence[int]) -> np.ndarray:
        """float32 [V] logits after the last token of ``seq`` (model input incl. any outcome token;
        1 ≤ len ≤ context), decoding only what extends the previous call's input."""
        import jax.numpy as jnp

        from pawn.evaluate.generation import _decode
        from pawn.play.players import _bucket
        from pawn.vocab import PAD_TOKEN

        seq = list(seq)
        model, ctx = self.player.loaded.model, self.player.context
        n_old = len(self.seq) if self.seq is not None else 0
        if self.seq is not None and n_old < len(seq) and seq[:n_old] == self.seq:
            logits = None
            for pos in range(n_old, len(seq)):
                logits, self.cache = _decode(model, self.cache, jnp.asarray([seq[pos]], jnp.int32), jnp.int32(pos))
            self.last = np.asarray(logits)[0]
        elif self.seq != seq:
            T = _bucket(len(seq), ctx)
            tok = np.full((1, T), PAD_TOKEN, np.int32)
            tok[0, :len(seq)] = seq
            attn = np.arange(T)[None, :] < len(seq)
            logits, self.cache = self._prefill(model, jnp.asarray(tok), jnp.asarray(attn), jnp.int32(len(seq) - 1),
                                               self.player.dtype, ctx)
            self.last = np.asarray(logits)[0]
        self.seq = seq
        return self.last

    def warm(self) -> None:
        """Compile every prefill length and the decode step on a dummy game (state untouched)."""
        from pawn.vocab import uci_to_token

        keep = (self.seq, self.cache, self.last)
        self.seq = None
        e4 = uci_to_token("e2e4")
        for b in self.player.buckets():
            self.seq = None
            self.logits([e4] * b)
        self.logits([e4] * (self.player.buckets()[0] - 1))
        self.logits([e4] * self.player.buckets()[0])
        self.seq, self.cache, self.last = keep


@dataclass
class _Search:
    stop: threading.Event = field(default_factory=threading.Event)
    ponderhit: threading.Event = field(default_factory=threading.Event)
    thread: Optional[threading.Thread] = None


class UciEngine:
    """The UCI protocol around a PAWN player (module docstring for every rule).

    Args:
        load: builds the :class:`pawn.play.players.PawnPlayer` (batch 1); called once, in a
            background thread started by :meth:`start`.
        write: writes one line to the GUI (no newline; called from several threads, serialised here).
        name: the ``id name`` text.
        on_fatal: called with the message when ``load`` fails (the CLI prints one ``error:`` line
            and exits); the engine answers ``info string error: …`` first.
    """

    def __init__(self, load: Callable[[], object], write: Callable[[str], None], name: str = "PAWN",
                 on_fatal: Optional[Callable[[str], None]] = None):
        import chess

        self._load, self._write_raw, self.name, self._on_fatal = load, write, name, on_fatal
        self._out_lock = threading.Lock()
        self._model_lock = threading.Lock()
        self._loaded = threading.Event()
        self._load_error: Optional[str] = None
        self.player = None
        self.incremental: Optional[IncrementalLogits] = None
        self.options = EngineOptions()
        self.rng = np.random.default_rng(self.options.seed)
        self.board = chess.Board()
        self.root_is_start = True
        self._applied: tuple[tuple[str, ...], list[str]] = (("startpos",), [])
        self._hist_cache: tuple[list, list[int]] = ([], [])
        self._hist_root = None
        self.debug = False
        self.search: Optional[_Search] = None
        self._outcome_warned = False
        self._table: Optional[dict[str, int]] = None
        self.last_model_ms: Optional[float] = None

    # ------------------------------------------------------------------ output and loading
    def send(self, line: str) -> None:
        """Write one protocol line (thread-safe)."""
        with self._out_lock:
            self._write_raw(line)

    def info(self, text: str) -> None:
        """``info string <text>`` (one line)."""
        self.send("info string " + " ".join(str(text).split()))

    def start(self) -> None:
        """Begin loading the model (and compiling the shortest length) in the background."""
        threading.Thread(target=self._load_now, name="pawn-uci-load", daemon=True).start()

    def _load_now(self) -> None:
        try:
            player = self._load()
            from pawn.play.match import _token_table

            self._table = _token_table()
            buckets = player.buckets()
            inc = IncrementalLogits(player) if hasattr(player.loaded.model, "decode") else None
            with self._model_lock:
                # what the first moves of a game run, compiled before readyok (GUIs wait for it):
                # the full forward of every length up to KV_MIN_LEN, then the first KV-cache
                # prefill past it and the decode step
                for b in [b for b in buckets if b <= KV_MIN_LEN] or buckets[:1]:
                    player.warm(b)
                if inc is not None and buckets[-1] > KV_MIN_LEN:
                    e4 = [self._table["e2e4"]]
                    inc.logits(e4 * (KV_MIN_LEN + 1))
                    inc.logits(e4 * (KV_MIN_LEN + 2))
                    inc.seq = None
            self.player, self.incremental = player, inc
        except Exception as e:  # noqa: BLE001  (reported to the GUI and the CLI in one line)
            self._load_error = f"{type(e).__name__}: {e}" if not str(e) else str(e)
            self.info(f"error: {self._load_error}")
            self._loaded.set()
            if self._on_fatal is not None:
                self._on_fatal(self._load_error)
            return
        self._loaded.set()
        # the other lengths, shortest first, beside the moves (JAX compiles thread-safely; the
        # warm-up uses its own cache, never the game's)
        if inc is not None:
            IncrementalLogits(player).warm()
            player.warm(buckets[-1])  # the sliding-window forward past the context
        else:
            for b in buckets:
                if b > KV_MIN_LEN:
                    player.warm(b)

    def wait_loaded(self, timeout: Optional[float] = None) -> bool:
        """Whether the model is loaded (waits up to ``timeout`` s; None = forever)."""
        return self._loaded.wait(timeout) and self.player is not None

    # ------------------------------------------------------------------ commands
    def handle(self, line: str) -> bool:
        """Act on one line from the GUI; False after ``quit``."""
        tokens = line.split()
        while tokens and tokens[0] not in COMMANDS:
            tokens = tokens[1:]
        if not tokens:
            if line.strip():
                self.info(f"unknown command: {line.strip()}")
            return True
        cmd, args = tokens[0], tokens[1:]
        if cmd != line.split()[0]:
            self.info(f"skipped unknown tokens before {cmd!r}")
        if cmd == "uci":
            self.send(f"id name {self.name}")
            self.send(f"id author {ENGINE_AUTHOR}")
            for d in self.options.declarations():
                self.send(d)
            self.send("uciok")
        elif cmd == "debug":
            self.debug = args[:1] == ["on"]
        elif cmd == "isready":
            self._loaded.wait()
            self.send("readyok")
        elif cmd == "setoption":
            self._setoption(args)
        elif cmd == "register":
            pass  # nothing to register
        elif cmd == "ucinewgame":
            self._finish_search()
            self.rng = np.random.default_rng(self.options.seed)
        elif cmd == "position":
            self._position(args)
        elif cmd == "go":
            self._go(args)
        elif cmd == "stop":
            if self.search is not None:
                self.search.stop.set()
                self._join()
        elif cmd == "ponderhit":
            if self.search is not None:
                self.search.ponderhit.set()
        elif cmd == "quit":
            if self.search is not None:
                self.search.stop.set()
                self._join(timeout=2.0)
            return False
        return True

    def _setoption(self, args: list[str]) -> None:
        if not args or args[0] != "name":
            self.info("setoption: expected 'setoption name <id> [value <x>]'")
            return
        rest = args[1:]
        if "value" in rest:
            k = rest.index("value")
            name, value = " ".join(rest[:k]), " ".join(rest[k + 1:])
        else:
            name, value = " ".join(rest), ""
        try:
            key = self.options.set(name, value)
        except KeyError:
            self.info(f"setoption: no option named {name!r}; ignored")
            return
        except ValueError as e:
            self.info(f"setoption: {e}; kept the old value")
            return
        if key == "seed":
            self.rng = np.random.default_rng(self.options.seed)

    def _position(self, args: list[str]) -> None:
        import chess

        if not args or args[0] not in ("startpos", "fen"):
            self.info("position: expected 'position startpos|fen <FEN> [moves …]'; position unchanged")
            return
        k = args.index("moves") if "moves" in args else len(args)
        root, moves = tuple(args[:k]), args[k + 1:]
        prev_root, prev_moves = self._applied
        if root == prev_root and moves[:len(prev_moves)] == prev_moves:  # a GUI's next move: push only the new ones
            board, start, done = self.board.copy(), self.root_is_start, len(prev_moves)
        elif args[0] == "startpos":
            board, start = chess.Board(), True
        else:
            fen = " ".join(args[1:k])
            try:
                board = chess.Board(fen)
            except ValueError as e:
                self.info(f"position: bad FEN {fen!r} ({e}); position unchanged")
                return
            start = board.fen() == chess.STARTING_FEN
        if not (root == prev_root and moves[:len(prev_moves)] == prev_moves):
            done = 0
        applied = list(moves[:done])
        for mv in moves[done:]:
            try:
                move = board.parse_uci(mv)
            except ValueError:
                self.info(f"position: move {mv!r} is not legal in {board.fen()}; the moves after it are ignored")
                break
            board.push(move)
            applied.append(mv)
        self.board, self.root_is_start, self._applied = board, start, (root, applied)

    def _go(self, args: list[str]) -> None:
        import chess

        if self.search is not None:  # a second go without stop: the first one ends now
            self.search.stop.set()
            self._join()
        params: dict[str, int] = {}
        infinite = ponder = False
        searchmoves: list[str] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a in GO_KEYS_INT and i + 1 < len(args):
                try:
                    v = int(args[i + 1])
                except ValueError:
                    self.info(f"go: {a} {args[i + 1]!r} is not an integer; ignored")
                else:
                    lo = -GO_INT_MAX if a in ("wtime", "btime", "winc", "binc") else 0
                    params[a] = min(max(v, lo), GO_INT_MAX)
                    if params[a] != v:
                        shown = args[i + 1] if len(args[i + 1]) <= 24 else args[i + 1][:12] + f"… ({len(args[i + 1])} digits)"
                        self.info(f"go: {a} {shown} is out of range; taken as {params[a]}")
                i += 2
                continue
            if a == "infinite":
                infinite = True
            elif a == "ponder":
                ponder = True
            elif a == "searchmoves":
                j = i + 1
                while j < len(args) and args[j] not in GO_KEYS_INT + ("infinite", "ponder"):
                    searchmoves.append(args[j])
                    j += 1
                i = j
                continue
            else:
                self.info(f"go: unknown parameter {a!r}; ignored")
            i += 1
        board = self.board.copy()
        legal = list(board.legal_moves)
        if searchmoves:
            wanted = set(searchmoves)
            narrowed = [m for m in legal if m.uci() in wanted]
            if narrowed:
                legal = narrowed
            else:
                self.info("go: no legal move among searchmoves; searching all moves")
        budget = None if (infinite or ponder) else time_budget_ms(params, board.turn == chess.WHITE,
                                                                   self.options.move_overhead_ms)
        search = _Search()
        self.search = search
        search.thread = threading.Thread(target=self._search, args=(search, board, legal, budget, infinite, ponder),
                                         name="pawn-uci-go", daemon=True)
        search.thread.start()

    def _join(self, timeout: Optional[float] = None) -> None:
        s = self.search
        if s is not None and s.thread is not None:
            s.thread.join(timeout)
        self.search = None

    def _finish_search(self) -> None:
        if self.search is not None:
            self.search.stop.set()
            self._join()

    # ------------------------------------------------------------------ the move
    def _history(self, board) -> list[int]:
        from pawn.play.match import _to_token

        stack = board.move_stack
        moves, toks = self._hist_cache  # the previous history, when this one extends it
        if not (len(moves) <= len(stack) and stack[:len(moves)] == moves and board.root() == self._hist_root):
            moves, toks = [], []
        toks = list(toks)
        for i in range(len(moves), len(stack)):
            t = self._table.get(stack[i].uci())
            if t is None:  # a spelling outside the vocabulary: matched among that ply's legal moves
                replay = board.root()
                for m in stack[:i]:
                    replay.push(m)
                t = _to_token(self._table, replay, stack[i].uci())
            toks.append(t)
        self._hist_cache, self._hist_root = (list(stack), toks), board.root()
        return toks

    def _model_move(self, board, legal: list) -> tuple[int, Optional[np.ndarray], str]:
        """(index into ``legal``, legal logits or None, rule) — runs under the model lock."""
        import chess

        from pawn.play.match import _to_token

        player = self.player
        hist = self._history(board)
        off = player.layout.offset
        if not hist and off == 0:
            if self.root_is_start:
                book = [m for m in self.options.book if chess.Move.from_uci(m) in legal]
                if book:
                    pick = book[0] if self.options.temperature == 0 else book[int(self.rng.integers(len(book)))]
                    return [m.uci() for m in legal].index(pick), None, "book"
            return int(self.rng.integers(len(legal))), None, "uniform (no move to condition on)"
        prefix = None
        if off:
            if self.options.outcome != "auto":
                prefix = OUTCOME_TOKEN_BASE + OUTCOME_NAMES.index(self.options.outcome)
        elif self.options.outcome != "auto" and not self._outcome_warned:
            self._outcome_warned = True
            self.info("Outcome ignored: this model has no outcome prefix (pure-moves layout)")
        toks = [_to_token(self._table, board, m.uci()) for m in legal]
        t0 = time.perf_counter()
        keep = player.context - off
        if self.incremental is not None and KV_MIN_LEN < len(hist) + off <= player.context:
            from pawn.vocab import BLACK_CHECKMATES, WHITE_CHECKMATES

            head = [] if not off else [prefix if prefix is not None else
                                       (WHITE_CHECKMATES if board.turn == chess.WHITE else BLACK_CHECKMATES)]
            logits = self.incremental.logits(head + hist)[np.asarray(toks, np.int64)].astype(np.float64)
        else:
            logits = player.legal_logits([hist], [toks], [board.turn == chess.WHITE], [prefix])[0]
        self.last_model_ms = (time.perf_counter() - t0) * 1e3
        rule = "model" if len(hist) <= keep else f"model (last {keep} of {len(hist)} moves)"
        return sample_move(logits, self.options, self.rng), logits, rule

    def _search(self, search: _Search, board, legal: list, budget: Optional[float], infinite: bool, ponder: bool) -> None:
        """The ``go`` thread: always ends with one ``bestmove`` (a legal move drawn uniformly if
        anything in between fails)."""
        try:
            self._search_move(search, board, legal, budget, infinite, ponder)
        except Exception as e:  # noqa: BLE001  (the GUI still gets its bestmove)
            self.info(f"fallback: uniformly drawn legal move ({type(e).__name__}: {' '.join(str(e).split())})")
            self.send(f"bestmove {legal[int(self.rng.integers(len(legal)))].uci()}" if legal else "bestmove (none)")

    def _search_move(self, search: _Search, board, legal: list, budget: Optional[float], infinite: bool, ponder: bool) -> None:
        t0 = time.perf_counter()
        if not legal:
            self.info("no legal move: the game is over")
            self._wait_release(search, infinite or ponder)
            self.send("bestmove (none)")
            return
        result: dict = {}
        done = threading.Event()

        def compute() -> None:
            try:
                if not self._loaded.wait() or self.player is None:
                    result["error"] = self._load_error or "model not loaded"
                    return
                with self._model_lock:
                    result["move"] = self._model_move(board, legal)
            except Exception as e:  # noqa: BLE001  (the engine still answers with a legal move)
                result["error"] = f"{type(e).__name__}: {e}"
            finally:
                done.set()

        threading.Thread(target=compute, name="pawn-uci-model", daemon=True).start()
        deadline = None if budget is None else t0 + budget / 1000.0
        while not done.is_set() and not search.stop.is_set():
            if deadline is not None and time.perf_counter() >= deadline:
                break
            done.wait(0.002 if deadline is None else min(0.002, max(0.0, deadline - time.perf_counter())))
        ms = (time.perf_counter() - t0) * 1e3
        if "move" in result:
            idx, logits, rule = result["move"]
            if logits is not None:
                p = probabilities(logits)
                order = np.argsort(-p, kind="stable")[:self.options.multipv]
                nps = int(1000.0 / max(ms, 1e-3))
                for k, j in enumerate(order, 1):
                    self.send(f"info depth 1 seldepth 1 multipv {k} score cp {prob_to_cp(p[j])} nodes 1 nps {nps} "
                              f"time {int(round(ms))} pv {legal[j].uci()}")
                self.info(f"{rule}: p({legal[idx].uci()}) = {p[idx]:.4f}, model {self.last_model_ms:.1f} ms")
            else:
                self.info(f"{rule}: {legal[idx].uci()}")
            move = legal[idx]
        else:
            why = result.get("error") or ("stopped before the model answered" if search.stop.is_set()
                                          else f"the model did not answer within {budget:.0f} ms")
            move = legal[int(self.rng.integers(len(legal)))]
            self.info(f"fallback: uniformly drawn legal move ({why})")
        self._wait_release(search, infinite or ponder)
        self.send(f"bestmove {move.uci()}")

    @staticmethod
    def _wait_release(search: _Search, hold: bool) -> None:
        """After ``go infinite``/``go ponder``: wait for ``stop`` or ``ponderhit``."""
        while hold and not (search.stop.is_set() or search.ponderhit.is_set()):
            search.stop.wait(0.005)

    # ------------------------------------------------------------------ the loop
    def run(self, readline: Callable[[], str]) -> None:
        """Read commands until ``quit`` or end of input (``readline`` returns "" at EOF)."""
        while True:
            line = readline()
            if line == "":
                self._finish_search()
                return
            if not self.handle(line):
                return


def _shape_label(model_config: Optional[dict], run_config: dict, variant: Optional[str]) -> Optional[str]:
    """``tiny/large``, ``base``… for a model of a named shape, its supernet's variant for a supernet
    checkpoint (``variant``, else the largest), else ``d192_L4_F768``; None without a model config."""
    from pawn.config import NAMED_CONFIGS, SUPERNETS, VARIANTS, ModelConfig, supernet_of

    if not isinstance(model_config, dict):
        return None
    try:
        mc = ModelConfig(**model_config)
    except (TypeError, ValueError):
        return None
    named = lambda sup, v: v if sup == "large" else f"{sup}/{v}"  # noqa: E731  (the published names: small, base, large)
    sup = supernet_of(mc, run_config or None)
    if sup is not None:
        return named(sup, variant or list(SUPERNETS[sup][1])[-1])
    if NAMED_CONFIGS.get(run_config.get("variant")) == mc and run_config.get("variant") not in VARIANTS:
        return run_config["variant"]  # toy
    sliced = run_config.get("sliced_from") if isinstance(run_config.get("sliced_from"), dict) else {}
    for name, (_, variants) in SUPERNETS.items():
        if sliced.get("supernet") not in (None, name):
            continue
        for v, c in variants.items():
            if c == mc:
                return named(name, v)
    return mc.name


def uci_name(source: str, variant: Optional[str] = None) -> str:
    """The ``id name`` of checkpoint ``source``: ``PAWN`` and the model it holds, read from its
    ``config.json`` without loading the weights, so a GUI's ``uci`` is answered at once:
    ``PAWN tiny/large`` (a supernet's variant, or a variant exported from one), ``PAWN base``,
    ``PAWN lora adapter on tiny/large``; a Hub id is its own name (``PAWN thomas-schweich/pawn-base``).
    A folder whose config cannot be read is named after the folder."""
    import json
    from pathlib import Path

    d = Path(source)
    try:
        cfg = json.loads((d / "config.json").read_text("utf-8"))
    except (OSError, ValueError):
        cfg = None
    if not isinstance(cfg, dict):
        return f"PAWN {source if not d.is_dir() else (d.resolve().name or source)}"
    run = cfg.get("run_config") if isinstance(cfg.get("run_config"), dict) else {}
    shape = _shape_label(cfg.get("model_config"), run, variant)
    adapter = cfg.get("adapter")
    if isinstance(adapter, dict) and adapter.get("strategy"):
        return f"PAWN {adapter['strategy']} adapter" + (f" on {shape}" if shape else "")
    return f"PAWN {shape or d.resolve().name}"

