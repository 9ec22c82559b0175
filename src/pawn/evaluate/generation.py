"""Autoregressive generation and its analysis (spec ``eval-probe-generate-sweep-bench.md``
§3.1, §3.2, §3.4), and writing games to parquet and PGN.

The model samples one token per step by Gumbel-max (``argmax(logits / T + Gumbel noise)``),
optionally restricted to the top k logits and/or to the engine's legal tokens; legality is always
decided by the engine (:class:`pawn.engine.BatchEnv`). Decoding uses the KV cache by default
(one compiled prefill, one compiled step at a traced position, the cache sized to the generation
length and donated to the step so it is updated in place); ``use_kv_cache=False`` recomputes the
full forward each step and gives identical games on CPU. Each step's model call is dispatched
before the host applies the sampled moves in the engine, so the two overlap.

Layouts: with ``outcome_token`` the sequence is ``[outcome, m1, m2, …]`` (the reference
behaviour); without it (pure moves, the published models) it is ``[m1, m2, …]``, and because
position 0 can never predict m1, a row without a prefix starts from a first move drawn
uniformly from the 20 legal ones (NumPy ``default_rng(seed)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from pawn.data.layout import Layout
from pawn.engine import BatchEnv, GameState
from pawn.vocab import (FORFEIT, OUTCOME_NAMES, OUTCOME_TOKEN_BASE, PAD_TOKEN, PREMATURE_PAD, TERMINATION_NAMES,
                        termination_outcome)
FORFEIT_BUCKETS: tuple[int, ...] = (0, 10, 20, 40, 80, 160, 256, 384)
"""Lower edges of the forfeit-ply histogram (the §5 ply buckets; the last is open)."""


def outcome_of(code: int, game_length: int) -> str:
    """Outcome name of a finished game (spec §0 code → outcome; −2/−3 give ``PREMATURE_PAD`` /
    ``FORFEIT``): checkmate is ``WHITE_CHECKMATES`` when the length is odd."""
    if code == PREMATURE_PAD:
        return "PREMATURE_PAD"
    if code == FORFEIT:
        return "FORFEIT"
    token = termination_outcome(code, game_length)
    if token is None:
        raise KeyError(code)
    return OUTCOME_NAMES[token - OUTCOME_TOKEN_BASE]


@dataclass
class GenerationResult:
    """Generated games in caller order (n rows, T = ``max_seq_len``).

    Attributes:
        sequences: int32 [n, T], the model's token buffer (outcome slot first when conditioned;
            in unmasked mode rows keep receiving samples after they end).
        moves: int16 [n, T − offset], the legal moves played, PAD from ``game_lengths`` on.
        game_lengths: int16 [n], moves played.
        term_codes: int8 [n]: 0–5 engine codes (5 also for rows still running at T), −2 premature
            PAD, −3 forfeit.
        forfeit_ply: int16 [n], the ply of the illegal sample, −1 if none.
        prefix_lengths: int16 [n], moves given (or drawn as first move) before sampling.
        outcome_token: the conditioning token, or None (pure moves).
    """

    sequences: np.ndarray
    moves: np.ndarray
    game_lengths: np.ndarray
    term_codes: np.ndarray
    forfeit_ply: np.ndarray
    prefix_lengths: np.ndarray
    outcome_token: Optional[int]

    @property
    def offset(self) -> int:
        return Layout.of(self.outcome_token is not None).offset

    def outcomes(self) -> list[str]:
        """Outcome name of every game (:func:`outcome_of`)."""
        return [outcome_of(int(c), int(n)) for c, n in zip(self.term_codes, self.game_lengths)]


# --------------------------------------------------------------------------- jitted pieces
@eqx.filter_jit
def _prefill_at(model, seq, attn, last, dtype):
    # The cache is sized to the generation buffer (T = seq.shape[1]), not the model context.
    logits, cache = model.prefill(seq, attn, dtype=dtype, cache_len=seq.shape[1])
    return jax.lax.dynamic_index_in_dim(logits, last, axis=1, keepdims=False), cache


@partial(jax.jit, donate_argnums=(1,))
def _decode(model, cache, token, pos):
    # The cache is donated: XLA writes slot pos of every layer's buffer in place.
    return model.decode(token, pos, cache)


@eqx.filter_jit
def _full_at(model, seq, pos, dtype):
    # All keys are "real": causality alone limits position pos to slots ≤ pos, exactly as the
    # KV cache attends to every filled slot (PAD samples included).
    logits = model(seq, jnp.ones(seq.shape, bool), dtype=dtype)
    return jax.lax.dynamic_index_in_dim(logits, pos, axis=1, keepdims=False)


@eqx.filter_jit
def _sample(logits, key, legal, temperature, top_k):
    """Gumbel-max sample per row: int32 [B]. ``legal`` bool [B, V] or None; ``top_k`` int or None."""
    x = logits.astype(jnp.float32) / temperature
    if legal is not None:
        x = jnp.where(legal, x, -jnp.inf)
    if top_k is not None:
        kth = jax.lax.top_k(x, top_k)[0][:, -1:]
        x = jnp.where(x >= kth, x, -jnp.inf)
    return jnp.argmax(x + jax.random.gumbel(key, x.shape), axis=-1).astype(jnp.int32)


# --------------------------------------------------------------------------- generation
def _generate_batch(model, outcome_token, prefix, plen, T, temperature, top_k, mask_illegal, key, use_kv_cache, dtype):
    B = prefix.shape[0]
    offset = Layout.of(outcome_token is not None).offset
    seq = np.full((B, T), PAD_TOKEN, np.int32)
    if offset:
        seq[:, 0] = outcome_token
    seq[:, offset:offset + plen] = prefix[:, :plen]
    env = BatchEnv(B, max_ply=T - offset, seed=0)
    env.reset()
    codes = np.asarray(env.load_prefixes(np.ascontiguousarray(prefix[:, :plen].astype(np.int16)), np.full(B, plen, np.int16)))
    term = codes.astype(np.int8).copy()
    done = term != -1
    length = np.full(B, plen, np.int64)
    forfeit = np.full(B, -1, np.int64)
    start = offset + plen - 1  # last filled position; its logits predict the next token
    if start < 0:
        raise ValueError("nothing to condition on: give an outcome token or a prefix of at least one move")
    keys = jax.random.split(key, T)
    all_idx = np.arange(B)
    if start < T - 1 and not done.all():
        if use_kv_cache:
            attn = np.arange(T)[None, :].repeat(B, 0) <= start
            logits, cache = _prefill_at(model, jnp.asarray(seq), jnp.asarray(attn), jnp.int32(start), dtype)
        else:
            logits = _full_at(model, jnp.asarray(seq), jnp.int32(start), dtype)
        for pos in range(start + 1, T):
            legal = jnp.asarray(env.legal_token_masks(all_idx)) if mask_illegal else None
            tok = _sample(logits, keys[pos], legal, jnp.float32(temperature), top_k)
            # The next step's model call does not depend on the engine: dispatch it first so the
            # device computes it while the host applies the moves (one step may be wasted when
            # every game ends here).
            if use_kv_cache and pos < T - 1:
                logits, cache = _decode(model, cache, tok, jnp.int32(pos))
            tok_np = np.asarray(tok)
            seq[:, pos] = tok_np
            if not use_kv_cache and pos < T - 1:
                logits = _full_at(model, jnp.asarray(seq), jnp.int32(pos), dtype)
            active = np.nonzero(~done)[0]
            pad = active[tok_np[active] == PAD_TOKEN]
            term[pad], length[pad], done[pad] = PREMATURE_PAD, pos - offset, True
            movers = active[tok_np[active] != PAD_TOKEN]
            if movers.size:
                played, code = env.apply_moves(movers, tok_np[movers])
                played, code = np.asarray(played), np.asarray(code)
                bad = movers[~played]
                term[bad], length[bad], forfeit[bad], done[bad] = FORFEIT, pos - offset, pos - offset, True
                ok = movers[played]
                length[ok] = pos - offset + 1
                ended = ok[code[played] >= 0]
                term[ended], done[ended] = code[played][code[played] >= 0], True
            if done.all():
                break
    running = ~done
    term[running] = 5  # ran to the end of the context: its length is already T − offset
    return seq, term, length, forfeit


def autoregressive_generate(
    model: Callable,
    n_games: int,
    *,
    outcome_token: Optional[int] = None,
    prefix_moves: Optional[np.ndarray] = None,
    prefix_lengths: Optional[np.ndarray] = None,
    max_seq_len: Optional[int] = None,
    temperature: float = 1.0,
    top_k: Optional[int] = None,
    mask_illegal: bool = False,
    batch_size: int = 64,
    seed: int = 0,
    use_kv_cache: bool = True,
    dtype: Optional[str] = None,
) -> GenerationResult:
    """Sample ``n_games`` games from ``model`` (spec §3.1).

    Rows are grouped by prefix length so every batch decodes from one position (no PAD gap in
    the context), then returned in caller order. Per step: logits / temperature, optional top-k,
    optional legal mask (terminated rows may then only emit PAD), Gumbel-max. An active row that
    samples PAD ends with code −2 and ``game_length = moves so far``; an illegal sample ends it
    with −3 and ``forfeit_ply = game_length``; a legal terminal move gives the engine code.
    Decoding stops when every row has ended; rows running at the end get code 5. One PRNG key
    per call (``seed``), split per batch and per step.

    Args:
        model: a :class:`pawn.model.PAWNModel` (``prefill``/``decode`` are needed with the KV cache).
        n_games: number of games (> 0).
        outcome_token: full id (1969–1979) written at position 0, or None for pure moves.
        prefix_moves: int [n, P] move tokens, with ``prefix_lengths`` int [n] (both or neither);
            clamped to the context. Without a prefix in pure-moves mode, each row's first move is
            drawn uniformly from the legal first moves.
        max_seq_len: T, default the model's context (includes the outcome slot).
        temperature: > 0. top_k: keep only the k largest logits (None = all).
        mask_illegal: restrict sampling to legal tokens.
        batch_size: rows per batch. seed: PRNG seed. use_kv_cache: cached decoding.
        dtype: compute dtype for the model.

    Returns:
        :class:`GenerationResult`.

    Raises:
        ValueError: ``n_games ≤ 0``, ``temperature ≤ 0``, ``top_k < 1``, only one of the prefix
            arrays, mismatched shapes, or ``max_seq_len`` outside 2…model context.
    """
    if n_games <= 0:
        raise ValueError(f"n_games must be positive, got {n_games}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be ≥ 1, got {top_k}")
    if (prefix_moves is None) != (prefix_lengths is None):
        raise ValueError("give both prefix_moves and prefix_lengths, or neither")
    ctx = model.config.max_seq_len
    T = ctx if max_seq_len is None else int(max_seq_len)
    if not 2 <= T <= ctx:
        raise ValueError(f"max_seq_len must lie in 2..{ctx}, got {T}")
    offset = Layout.of(outcome_token is not None).offset
    if prefix_moves is None:
        if offset:
            prefix_moves, prefix_lengths = np.full((n_games, 1), PAD_TOKEN, np.int64), np.zeros(n_games, np.int64)
        else:
            first = np.asarray(GameState().legal_move_tokens())
            prefix_moves = np.random.default_rng(seed).choice(first, size=(n_games, 1))
            prefix_lengths = np.ones(n_games, np.int64)
    prefix_moves = np.asarray(prefix_moves, np.int64)
    prefix_lengths = np.asarray(prefix_lengths, np.int64)
    if prefix_moves.ndim != 2 or prefix_moves.shape[0] != n_games or prefix_lengths.shape != (n_games,):
        raise ValueError(f"prefix_moves must be [{n_games}, P] and prefix_lengths [{n_games}], got "
                         f"{prefix_moves.shape} and {prefix_lengths.shape}")
    plens = np.clip(prefix_lengths, 0, min(T - offset, prefix_moves.shape[1]))
    if not offset and (plens < 1).any():
        raise ValueError(f"pure-moves generation needs a prefix of ≥ 1 move (row {int(np.argmax(plens < 1))} has none)")
    seqs = np.full((n_games, T), PAD_TOKEN, np.int32)
    terms = np.zeros(n_games, np.int8)
    lens = np.zeros(n_games, np.int64)
    forf = np.full(n_games, -1, np.int64)
    batches = [(p, rows[i:i + batch_size]) for p in np.unique(plens)
               for rows in [np.nonzero(plens == p)[0]] for i in range(0, rows.size, batch_size)]
    keys = jax.random.split(jax.random.PRNGKey(seed), max(len(batches), 1))
    for (p, rows), key in zip(batches, keys):
        s, t, ln, f = _generate_batch(model, outcome_token, prefix_moves[rows], int(p), T, temperature, top_k,
                                      mask_illegal, key, use_kv_cache, dtype)
        seqs[rows], terms[rows], lens[rows], forf[rows] = s, t, ln, f
    W = T - offset
    moves = seqs[:, offset:].copy()
    moves[np.arange(W)[None, :] >= lens[:, None]] = PAD_TOKEN
    return GenerationResult(seqs, moves.astype(np.int16), lens.astype(np.int16), terms, forf.astype(np.int16),
                            plens.astype(np.int16), outcome_token)


# --------------------------------------------------------------------------- analysis (§3.2)
def analyze(result: GenerationResult, conditioned: Optional[str] = None) -> dict[str, Any]:
    """Per-run metrics of spec §3.2.

    Returns:
        dict: ``n_games``; ``outcome_match_rate`` (only when ``conditioned`` names an outcome);
        ``outcome_distribution`` (fractions of the outcomes that occur); ``mean_game_length``;
        ``forfeit_rate``; ``post_terminal_padding_rate`` (PAD fraction of tokens at positions
        ≥ game_length + offset, 1.0 if there are none); ``post_terminal_move_count`` (non-PAD
        tokens there, summed); ``premature_padding_rate``; ``ar_completion_rate`` (fraction of
        games that neither forfeited nor ended with a premature PAD); and ``forfeit_plies``
        {mean, median, histogram over :data:`FORFEIT_BUCKETS`}.
    """
    n = len(result.term_codes)
    names = result.outcomes()
    uniq, counts = np.unique(names, return_counts=True)
    T = result.sequences.shape[1]
    post = np.arange(T)[None, :] >= (result.game_lengths.astype(np.int64) + result.offset)[:, None]
    n_post = int(post.sum())
    pads = int((post & (result.sequences == PAD_TOKEN)).sum())
    ff = result.forfeit_ply[result.forfeit_ply >= 0].astype(np.int64)
    edges = list(FORFEIT_BUCKETS) + [np.iinfo(np.int64).max]
    hist = {f"{lo}-{edges[i + 1] - 1}" if i + 1 < len(FORFEIT_BUCKETS) else f"{lo}+": int(((ff >= lo) & (ff < edges[i + 1])).sum())
            for i, lo in enumerate(FORFEIT_BUCKETS)}
    out: dict[str, Any] = {"n_games": n}
    if conditioned is not None:
        out["outcome_match_rate"] = float(np.mean([x == conditioned for x in names]))
    out.update(
        outcome_distribution={str(u): float(c / n) for u, c in zip(uniq, counts)},
        mean_game_length=float(result.game_lengths.mean()),
        forfeit_rate=float((result.forfeit_ply >= 0).mean()),
        post_terminal_padding_rate=float(pads / n_post) if n_post else 1.0,
        post_terminal_move_count=n_post - pads,
        premature_padding_rate=float((result.term_codes == PREMATURE_PAD).mean()),
        # counted, not 1 − forfeit − premature: that difference of floats printed as "-0.00%"
        ar_completion_rate=float(((result.forfeit_ply < 0) & (result.term_codes != PREMATURE_PAD)).mean()),
        forfeit_plies={"mean": float(ff.mean()) if ff.size else None,
                       "median": int(np.sort(ff)[(ff.size - 1) // 2]) if ff.size else None, "histogram": hist},
    )
    return out


# --------------------------------------------------------------------------- output
_RESULTS = {"WHITE_CHECKMATES": "1-0", "BLACK_CHECKMATES": "0-1", "STALEMATE": "1/2-1/2", "DRAW_BY_RULE": "1/2-1/2"}


def termination_name(code: int) -> str:
    """Name of a termination code: the §2.2 names for 0–5, ``premature_pad`` (−2), ``forfeit`` (−3)."""
    if 0 <= code < len(TERMINATION_NAMES):
        return TERMINATION_NAMES[code]
    return {PREMATURE_PAD: "premature_pad", FORFEIT: "forfeit"}.get(int(code), "running")


def games_table(moves: np.ndarray, lengths: np.ndarray, term_codes: np.ndarray, extra: Optional[dict[str, Sequence]] = None):
    """A pyarrow table of games: ``tokens`` list<int16>, ``uci``/``san`` list<string>,
    ``length`` int16, ``termination`` int8, ``termination_name``, ``outcome`` (name; also
    PREMATURE_PAD/FORFEIT), ``result`` (PGN result string), plus ``extra`` columns.

    Args:
        moves: int16 [n, W] legal moves, PAD-filled after each length. lengths: int [n].
        term_codes: int [n] termination codes (see :func:`termination_name`).
    """
    import pyarrow as pa

    from pawn.engine import tokens_to_san, tokens_to_uci

    moves = np.ascontiguousarray(moves, dtype=np.int16)
    lengths = np.asarray(lengths).astype(np.int16)
    codes = np.asarray(term_codes).astype(np.int8)
    uci = tokens_to_uci(moves, lengths)
    san = tokens_to_san(moves, lengths)
    outcomes = [outcome_of(int(c), int(n)) for c, n in zip(codes, lengths)]
    cols: dict[str, Any] = {
        "tokens": pa.array([m[:n].tolist() for m, n in zip(moves, lengths)], type=pa.list_(pa.int16())),
        "uci": pa.array(uci, type=pa.list_(pa.string())),
        "san": pa.array(san, type=pa.list_(pa.string())),
        "length": pa.array(lengths, type=pa.int16()),
        "termination": pa.array(codes, type=pa.int8()),
        "termination_name": pa.array([termination_name(int(c)) for c in codes]),
        "outcome": pa.array(outcomes),
        "result": pa.array([_RESULTS.get(o, "*") for o in outcomes]),
    }
    for k, v in (extra or {}).items():
        cols[k] = pa.array(list(v))
    return pa.table(cols)


def write_games(table, parquet: Optional[Path] = None, pgn: Optional[Path] = None, event: str = "PAWN games") -> None:
    """Write a :func:`games_table` to parquet and/or PGN (one game per record, SAN movetext,
    ``Result`` from the outcome, ``Termination`` tag with the termination name)."""
    from pawn.fileio import atomic_output

    if parquet is not None:
        import pyarrow.parquet as pq

        with atomic_output(parquet) as tmp:
            pq.write_table(table, str(tmp))
    if pgn is not None:
        d = table.to_pydict()
        with atomic_output(pgn) as tmp, open(tmp, "w", encoding="utf-8") as f:
            for i, (san, res, term) in enumerate(zip(d["san"], d["result"], d["termination_name"])):
                moves = " ".join(f"{k // 2 + 1}. {m}" if k % 2 == 0 else m for k, m in enumerate(san))
                f.write(f'[Event "{event}"]\n[Round "{i + 1}"]\n[White "?"]\n[Black "?"]\n[Result "{res}"]\n'
                        f'[Termination "{term}"]\n\n{moves} {res}\n\n')
