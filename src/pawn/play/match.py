"""The match runner of ``pawn play`` (spec ``eval-probe-generate-sweep-bench.md`` §4.2).

Game ``i`` of a match has PAWN (player A) as white when ``i`` is even. A PAWN model never picks
move 1 (in the pure-moves layout no position predicts it), so when a PAWN model is white its
first move comes from the opening book, ``first_moves[(i // 2) % len(first_moves)]`` (rotation by
white-game count). Games end by the rules (python-chess ``Board.outcome()`` without claims:
checkmate, stalemate, insufficient material, 75-move rule, fivefold repetition, the §2.2
terminations), at ``max_ply`` plies (scored a draw), or as ``engine_error`` when the Stockfish
process dies or misbehaves (not scored; the match goes on with a fresh process).

Up to ``slots`` games run at once: every round, the games waiting for PAWN are moved by one
batched model forward, then the games waiting for the opponent are moved (Stockfish processes in
parallel threads, one per slot, or one batched forward of the second model). Ctrl-C stops the
match and keeps the games already finished.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional, Sequence

import numpy as np

from pawn.play.players import EngineCrashed, PawnPlayer, UciPool
from pawn.play.stats import Score

ENGINE_ERROR = "engine_error"
"""Termination of a game whose UCI engine died or misbehaved (not scored)."""
PLY_LIMIT = "ply_limit"
"""Termination at ``max_ply`` plies (a draw)."""

_TERMS = {"CHECKMATE": "checkmate", "STALEMATE": "stalemate", "INSUFFICIENT_MATERIAL": "insufficient_material",
          "SEVENTYFIVE_MOVES": "seventy_five_move_rule", "FIVEFOLD_REPETITION": "fivefold_repetition"}


@dataclass
class GameRecord:
    """One finished game, PAWN's point of view.

    Attributes:
        index: game number in its match (0-based). temperature: PAWN's sampling temperature.
        pawn: PAWN player name. opponent: ``stockfish-<elo>`` or the second model's name.
        opponent_elo: the opponent's rating anchor (UCI_Elo played by Stockfish, a ladder rung's anchor), else None.
        pawn_white: PAWN had white. first_move: move 1 (UCI). book: move 1 came from the book.
        result: ``"win"``, ``"draw"``, ``"loss"``, or None (engine error: not scored).
        term: termination (``checkmate``, ``stalemate``, ``insufficient_material``,
            ``seventy_five_move_rule``, ``fivefold_repetition``, ``ply_limit``, ``engine_error``).
        plies: moves played. moves: UCI moves. error: the engine failure, if any.
    """

    index: int
    temperature: float
    pawn: str
    opponent: str
    opponent_elo: Optional[int]
    pawn_white: bool
    first_move: Optional[str]
    book: bool
    result: Optional[str]
    term: str
    plies: int
    moves: list[str]
    error: Optional[str] = None

    @property
    def white(self) -> str:
        return self.pawn if self.pawn_white else self.opponent

    @property
    def black(self) -> str:
        return self.opponent if self.pawn_white else self.pawn

    @property
    def pgn_result(self) -> str:
        """``1-0``, ``0-1``, ``1/2-1/2``, or ``*`` for an unscored game."""
        if self.result is None:
            return "*"
        if self.result == "draw":
            return "1/2-1/2"
        return "1-0" if (self.result == "win") == self.pawn_white else "0-1"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _Live:
    index: int
    slot: int
    board: Any
    tokens: list[int]
    pawn_white: bool
    rng: np.random.Generator
    book: bool = False
    term: Optional[str] = None
    winner: Optional[bool] = None
    error: Optional[str] = None


@dataclass
class MatchResult:
    """Games of one (temperature, opponent) cell: ``records`` in finishing order,
    ``wall_seconds``, ``interrupted`` (Ctrl-C), ``engine_restarts``."""

    records: list[GameRecord]
    wall_seconds: float
    interrupted: bool = False
    engine_restarts: int = 0
    notes: list[str] = field(default_factory=list)


def _token_table() -> dict[str, int]:
    from pawn.vocab import export_move_vocabulary

    return {str(k): int(v) for k, v in export_move_vocabulary()["move_to_token"].items()}


def _to_token(table: dict[str, int], board, uci: str) -> int:
    """Token of a legal move; a UCI spelling outside the vocabulary is matched among the legal
    moves' tokens by its from/to squares and promotion (spec §4.2)."""
    t = table.get(uci)
    if t is not None:
        return t
    import chess

    mv = chess.Move.from_uci(uci)
    for m in board.legal_moves:
        if m.from_square == mv.from_square and m.to_square == mv.to_square and m.promotion == mv.promotion and m.uci() in table:
            return table[m.uci()]
    raise ValueError(f"move {uci} has no token in the PAWN vocabulary")


def play_match(pawn: PawnPlayer | UciPool, opponent: UciPool | PawnPlayer, *, games: int, temperature: float,
               first_moves: Sequence[str], max_ply: int, seed: int, slots: int, cell: int = 0,
               on_game: Optional[Callable[[GameRecord], None]] = None) -> MatchResult:
    """Play ``games`` games of ``pawn`` against ``opponent`` (module docstring for the rules).

    Args:
        pawn: player A: a :class:`PawnPlayer` (batched forwards), or any engine with the pool
            interface (a :class:`~pawn.play.players.UciPool` such as ``pawn uci CKPT``, a
            :class:`~pawn.play.players.StockfishPool`, a :mod:`pawn.play.ladder` mover) with ≥
            ``slots`` slots. opponent: the same kinds (a second :class:`PawnPlayer` plays at the
            same temperature; an engine keeps its own settings).
        games: ≥ 1. temperature: ≥ 0 (0 = greedy). first_moves: the UCI opening book.
        max_ply: ply limit (a draw). seed, cell: game ``i`` samples from
            ``numpy.random.default_rng([seed, cell, i])``, so results do not depend on ``slots``.
        slots: games in flight. on_game: called with each finished game.

    Returns:
        :class:`MatchResult`; on Ctrl-C, ``interrupted`` and the games finished so far.

    Raises:
        pawn.errors.EngineFailure: Stockfish cannot be started at all.
    """
    import chess

    table = _token_table()
    vs_engine = not isinstance(opponent, PawnPlayer)
    a_engine = not isinstance(pawn, PawnPlayer)
    restarts0 = (opponent.restarts if vs_engine else 0) + (pawn.restarts if a_engine else 0)
    records: list[GameRecord] = []
    queue = deque(range(games))
    live: dict[int, _Live] = {}
    free = list(range(min(slots, games)))[::-1]
    t0 = time.perf_counter()
    interrupted = False
    pool = ThreadPoolExecutor(max_workers=max(1, min(slots, games))) if (vs_engine or a_engine) else None

    def push(g: _Live, uci: str) -> None:
        g.tokens.append(_to_token(table, g.board, uci))
        g.board.push_uci(uci)
        out = g.board.outcome(claim_draw=False)
        if out is not None:
            g.term, g.winner = _TERMS.get(out.termination.name, out.termination.name.lower()), out.winner
        elif g.board.ply() >= max_ply:
            g.term = PLY_LIMIT

    def pawn_to_move(g: _Live) -> bool:
        return g.board.turn == (chess.WHITE if g.pawn_white else chess.BLACK)

    def finish(g: _Live) -> None:
        del live[g.slot]
        free.append(g.slot)
        if g.term == ENGINE_ERROR:
            result = None
        elif g.winner is None:
            result = "draw"
        else:
            result = "win" if g.winner == g.pawn_white else "loss"
        moves = [m.uci() for m in g.board.move_stack]
        rec = GameRecord(g.index, float(temperature), pawn.name, opponent.name,
                         opponent.effective_elo if vs_engine else None, g.pawn_white, moves[0] if moves else None,
                         g.book, result, g.term, len(moves), moves, g.error)
        records.append(rec)
        if on_game is not None:
            on_game(rec)

    def batch_move(player: PawnPlayer, group: list[_Live], white: list[bool]) -> None:
        legal = [{_to_token(table, g.board, m.uci()): m.uci() for m in g.board.legal_moves} for g in group]
        toks = player.choose([g.tokens for g in group], [list(lm) for lm in legal], white, temperature, [g.rng for g in group])
        for g, lm, t in zip(group, legal, toks):
            push(g, lm[t])

    def engine_moves(player, group: list[_Live]) -> None:  # one thread per game: engine processes in parallel
        futs = [(g, pool.submit(player.move, g.slot, g.board.copy())) for g in group]
        for g, f in futs:
            try:
                push(g, f.result())
            except EngineCrashed as e:
                g.term, g.error = ENGINE_ERROR, str(e)

    try:
        while queue or live:
            while queue and free:
                i = queue.popleft()
                g = _Live(i, free.pop(), chess.Board(), [], i % 2 == 0, np.random.default_rng([seed, cell, i]))
                live[g.slot] = g
                if g.pawn_white or not vs_engine:  # a PAWN model has white: move 1 from the book
                    push(g, first_moves[(i // 2) % len(first_moves)])
                    g.book = True
            for g in [g for g in live.values() if g.term]:
                finish(g)
            group = [g for g in live.values() if pawn_to_move(g)]
            if group and a_engine:
                engine_moves(pawn, group)
            elif group:
                batch_move(pawn, group, [g.pawn_white for g in group])
            for g in [g for g in live.values() if g.term]:
                finish(g)
            group = [g for g in live.values() if not pawn_to_move(g)]
            if group and vs_engine:
                engine_moves(opponent, group)
            elif group:
                batch_move(opponent, group, [not g.pawn_white for g in group])
            for g in [g for g in live.values() if g.term]:
                finish(g)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        if pool is not None:
            pool.shutdown(wait=not interrupted, cancel_futures=True)
    restarts = (opponent.restarts if vs_engine else 0) + (pawn.restarts if a_engine else 0) - restarts0
    records.sort(key=lambda r: r.index)
    return MatchResult(records, time.perf_counter() - t0, interrupted, restarts)


def summarize(records: Sequence[GameRecord], *, reference_elo: Optional[float] = None) -> dict:
    """Per-cell summary (spec §4.2): :meth:`Score.to_dict` fields (``wins, draws, losses, games,
    score, score_rate, score_rate_ci95, winrate_strict, elo_diff, elo_diff_ci95`` and, against
    Stockfish, ``elo_estimate``/``elo_estimate_ci95`` = UCI_Elo + difference), ``as_white_wdl``
    and ``as_black_wdl`` ``{w, d, l}``, ``per_opening {first move: {w, d, l}}`` over book games,
    ``engine_errors``, ``terminations`` (counts) and ``mean_plies``."""

    def wdl(rs) -> dict:
        c = Counter(r.result for r in rs)
        return {"w": c["win"], "d": c["draw"], "l": c["loss"]}

    c = Counter(r.result for r in records)
    out = Score(c["win"], c["draw"], c["loss"]).to_dict(reference_elo)
    out["as_white_wdl"] = wdl([r for r in records if r.pawn_white])
    out["as_black_wdl"] = wdl([r for r in records if not r.pawn_white])
    openings: dict[str, list] = {}
    for r in records:
        if r.book and r.first_move:
            openings.setdefault(r.first_move, []).append(r)
    out["per_opening"] = {m: wdl(rs) for m, rs in openings.items()}
    out["engine_errors"] = c[None]
    out["terminations"] = dict(Counter(r.term for r in records))
    out["mean_plies"] = float(np.mean([r.plies for r in records])) if records else float("nan")
    return out
