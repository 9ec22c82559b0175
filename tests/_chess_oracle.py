"""python-chess oracle for mask and board-state tests: seeded uniform random games, tokenized,
with the per-ply facts the engine must reproduce."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import chess
import chess.pgn
import numpy as np

from pawn import vocab

PAD = 1968
PIECE_SYMBOLS = ".PNBRQKpnbrqk"  # index = §5 piece code


@dataclass
class OracleGames:
    """B games of at most T plies, PAD-filled tokens, and per-(game, ply) facts for t < length."""

    tokens: np.ndarray  # int16 [B, T]
    lengths: np.ndarray  # int16 [B]
    legal: list[list[list[int]]] = field(default_factory=list)  # [b][t] legal tokens
    boards: list[list[chess.Board]] = field(default_factory=list)  # [b][t] position before move t


def load_vocab(shared_data: Path) -> dict[str, int]:
    return json.loads((shared_data / "searchless_chess_vocabulary.json").read_text())["move_to_action"]


def random_games(uci_to_id: dict[str, int], n_games: int, max_ply: int, seed: int) -> OracleGames:
    """Uniform random legal moves from a seeded ``random.Random``, until no legal move is left or
    ``max_ply`` plies are played. Castling is tokenized as the king's two-square step."""
    rng = random.Random(seed)
    tokens = np.full((n_games, max_ply), PAD, dtype=np.int16)
    lengths = np.zeros(n_games, dtype=np.int16)
    out = OracleGames(tokens, lengths)
    for b in range(n_games):
        board = chess.Board()
        legal_g, boards_g = [], []
        for t in range(max_ply):
            moves = list(board.legal_moves)
            if not moves:
                break
            legal_g.append([uci_to_id[m.uci()] for m in moves])
            boards_g.append(board.copy(stack=False))
            move = rng.choice(moves)
            tokens[b, t] = uci_to_id[move.uci()]
            board.push(move)
        lengths[b] = len(legal_g)
        out.legal.append(legal_g)
        out.boards.append(boards_g)
    return out


def insufficient_material(b: chess.Board) -> bool:
    """Spec engine.md §2.2 (shakmaty) insufficient material, computed independently of the engine."""
    if b.pawns | b.rooks | b.queens:
        return False
    others = b.occupied & ~b.kings
    if not others or (others == b.knights and chess.popcount(others) == 1):
        return True
    if others == b.bishops:
        return not (others & chess.BB_DARK_SQUARES) or not (others & chess.BB_LIGHT_SQUARES)
    return False


def random_uci_games(n: int, max_plies: int, seed: int, *, stop_at_game_over: bool = False) -> list[list[str]]:
    """Uniformly random python-chess games as UCI lists (castling as e1g1). Each stops at
    max_plies or when no move is legal; with ``stop_at_game_over`` also at python-chess's
    automatic draws (insufficient material, 75 moves, fivefold)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        b = chess.Board()
        moves: list[str] = []
        while len(moves) < max_plies and not (stop_at_game_over and b.is_game_over(claim_draw=False)):
            legal = list(b.legal_moves)
            if not legal:
                break
            m = rng.choice(legal)
            moves.append(m.uci())
            b.push(m)
        out.append(moves)
    return out


def expected_outcome(headers: chess.pgn.Headers, board: chess.Board, n_ply: int, max_ply: int) -> int | None:
    """Spec §6.3, computed independently from python-chess's headers and final board."""
    if n_ply > max_ply:
        return vocab.PLY_LIMIT
    term, result = headers.get("Termination", ""), headers.get("Result", "")
    if term == "Normal":
        if result == "1-0":
            return vocab.WHITE_CHECKMATES if board.is_checkmate() else vocab.WHITE_RESIGNS
        if result == "0-1":
            return vocab.BLACK_CHECKMATES if board.is_checkmate() else vocab.BLACK_RESIGNS
        if result == "1/2-1/2":
            return vocab.STALEMATE if board.is_stalemate() else vocab.DRAW_BY_AGREEMENT
    if term == "Time forfeit":
        return {"1-0": vocab.WHITE_WINS_ON_TIME, "0-1": vocab.BLACK_WINS_ON_TIME, "1/2-1/2": vocab.DRAW_BY_TIME}.get(result)
    if term == "Insufficient material":
        return vocab.DRAW_BY_RULE
    return None
