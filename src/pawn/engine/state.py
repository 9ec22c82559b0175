"""Stateful games (spec ``engine.md`` §8): :class:`GameState` for one game and
:class:`BatchEnv` for N concurrent games (autoregressive generation and RL self-play).

``GameState(max_ply=512)`` — one game from the standard start position:

- ``make_move(token) -> bool``: play if legal, else False with the state unchanged (PAD,
  outcome and out-of-range ids are never legal). Moves are not refused after a draw rule or
  the ply cap; ``max_ply`` only feeds ``check_termination``.
- ``make_move_uci(uci) -> str | None``: same with a UCI string (castling as ``e1g1``).
- ``legal_move_tokens() -> list[int]`` in generation order; ``ply()``, ``is_white_to_move()``,
  ``is_check()``.
- ``check_termination() -> int``: §2.2 code 0 checkmate, 1 stalemate, 2 75-move, 3 fivefold,
  4 insufficient material, 5 ply limit; −1 while running. ``is_game_over()``,
  ``is_checkmate()``, ``outcome_token()`` (1969–1973, None while running).
- ``move_history() -> list[int]``, ``uci_position() -> str``, ``fen() -> str`` (en-passant
  field only when a capture is legal, like python-chess ``board.fen(en_passant="legal")``).
- ``legal_moves_grid_mask() -> list[bool]`` (4,096, index ``src*64+dst``),
  ``legal_moves_structured()`` / ``legal_moves_full()`` (grid indices, promotion pairs §1.7).

``BatchEnv(n_games, max_ply=512, seed=42)`` — N games and one shared ChaCha8 RNG seeded with
``seed`` (used only for random opponent moves; ``reset`` does not reseed it). ``reset()``
must be called first; any other method before it raises ``RuntimeError``. A bad game index
raises ``IndexError`` before anything is applied. Termination codes (int8): −1 running, 0–5
per §2.2, −3 forfeited by an illegal token.

- Generation: ``apply_moves(indices, tokens) -> (played bool [k], code int8 [k])``
  (side-agnostic; terminated game → (False, its code); illegal → forfeit (False, −3)),
  ``load_prefixes(tokens int16 [N, W], lengths int16 [N]) -> int8 [N]`` (row i into game i
  from its current state; stops at an illegal token or termination),
  ``legal_token_masks(indices, vocab_size=1980) -> bool [k, V]`` — a terminated game has only
  PAD (1968) set, so masked sampling always has an admissible token and emits PAD after the
  end — ``move_histories(indices) -> (int16 [k, max_ply] PAD-filled, int16 [k])``,
  ``fens(indices)``, ``uci_positions(indices)``, ``plies(indices) -> int32 [k]``,
  ``outcomes() -> (codes int8 [N], outcome tokens int16 [N], −1 while running or forfeited)``,
  ``n_games()``, ``max_ply()``, ``all_terminated()``, ``active_games()``.
- RL: games ``0 … N//2 − 1`` have the agent as white, the rest as black.
  ``active_agent_games()``, ``active_opponent_games()``, ``apply_agent_moves(indices, tokens)``
  (illegal → forfeit, reward −1), ``apply_opponent_moves(indices, tokens)`` (illegal → ended,
  reward 0); both raise ``ValueError`` before anything is applied if a running game listed is
  not waiting for that side (or is listed twice), ``apply_random_opponent_moves() -> list[int]``, ``rewards() -> float32 [N]``
  (+1 opponent mated, −1 agent mated or forfeited, else 0), ``rl_outcomes()`` (terminated,
  forfeited, reward, agent_plies, code, agent_is_white arrays).

Index and token arguments accept Python int sequences or 1-D integer NumPy arrays.
``BatchEnv(n_games)`` or ``legal_token_masks(..., vocab_size)`` too large to allocate raise
``MemoryError``.
"""

from __future__ import annotations

from pawn._engine import BatchEnv, GameState

__all__ = ["BatchEnv", "GameState"]
