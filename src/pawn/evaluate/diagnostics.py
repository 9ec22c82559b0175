"""Generation diagnostics (spec ``eval-probe-generate-sweep-bench.md`` §3.3, §3.5).

* The five outcome-conditioned tests. They only mean something for a model trained with the
  outcome prefix: otherwise every test returns ``{"_skipped": reason}`` without running (the
  gate the spec documents as intended for all five).
* Edge-case legality: per category (check, double check, pin, en passant, castling, castling
  blocked by check, promotion) the legal fraction of tokens sampled from the model's softmax,
  and P(PAD) at checkmate and stalemate.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from pawn.data.layout import Layout
from pawn.engine import edge_case_bits, generate_diagnostic_sets, legal_move_masks, random_games
from pawn.evaluate.generation import analyze, autoregressive_generate
from pawn.vocab import (BLACK_CHECKMATES, DRAW_BY_RULE, OUTCOME_NAMES, OUTCOME_TOKEN_BASE, PAD_TOKEN, PLY_LIMIT,
                        STALEMATE, TERMINATION_NAMES, VOCAB_SIZE, WHITE_CHECKMATES)

PRETRAIN_OUTCOMES = (WHITE_CHECKMATES, BLACK_CHECKMATES, STALEMATE, DRAW_BY_RULE, PLY_LIMIT)
"""The five outcome tokens of random-game pretraining."""
TESTS = ("outcome_signal", "prefix_continuation", "poisoned_prefix", "impossible_task", "improbable_task")
NOT_PREFIX_TRAINED = ("the model was not trained with an outcome prefix, so conditioning on an outcome "
                      "token is meaningless input")


def _name(token: int) -> str:
    return OUTCOME_NAMES[token - OUTCOME_TOKEN_BASE]


def sub_seed(seed: int, *parts: str) -> int:
    """Per-test sub-seed: ``(seed XOR u32_le(SHA-256("p1|p2|…")[:4])) & 0x7FFFFFFF`` (spec §3.1)."""
    h = int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:4], "little")
    return (int(seed) ^ h) & 0x7FFFFFFF


def outcome_signal_seed(seed: int, outcome: str, masked: bool) -> int:
    """``seed + (u32_le(SHA-256("<OUTCOME>:<True|False>")[:4]) mod 10,000)`` (spec §3.1)."""
    h = int.from_bytes(hashlib.sha256(f"{outcome}:{masked}".encode()).digest()[:4], "little")
    return int(seed) + h % 10_000


def _corpus_outcomes(corpus) -> np.ndarray:
    return np.asarray(corpus.outcome).astype(np.int64)


def run_outcome_tests(
    model: Callable,
    *,
    outcome_prefix_trained: bool,
    tests: tuple[str, ...] = TESTS,
    n_per_outcome: int = 200,
    n_per_bucket: int = 100,
    n_per_pair: int = 200,
    n_per_scenario: int = 100,
    corpus_size: int = 2000,
    corpus_max_ply: int = 255,
    corpus_seed: int = 4242,
    seed: int = 0,
    batch_size: int = 32,
    use_kv_cache: bool = True,
    dtype: Optional[str] = None,
    progress: Optional[Callable[[float, float, str], None]] = None,
) -> dict[str, Any]:
    """The five outcome-conditioned diagnostics of spec §3.3 (v2 CLI defaults; ``seed`` is passed
    to every test). Corpus-based tests continue held-out random games
    (``random_games(corpus_size, corpus_max_ply, corpus_seed)``) with ``mask_illegal=True``.

    Returns:
        ``{test: result}``; with ``outcome_prefix_trained=False`` every requested test is
        ``{"_skipped": reason}``. Results: outcome_signal ``[outcome][masked|unmasked]``;
        prefix_continuation ``[actual][bucket][cond]``; poisoned_prefix ``["A->B"]``;
        impossible/improbable ``[scenario]`` — each an :func:`analyze` dict (or ``_skipped``
        when the corpus cannot supply the games).

    ``progress``: optional callback ``(tests done, tests in all, message)`` after each test.

    Raises:
        ValueError: an unknown test name.
    """
    unknown = sorted(set(tests) - set(TESTS))
    if unknown:
        raise ValueError(f"unknown tests {unknown}; choose from {list(TESTS)}")
    def step(name: str) -> None:
        if progress is not None:
            progress(len(out), len(tests), name)

    if not outcome_prefix_trained:
        if progress is not None:
            progress(len(tests), len(tests), "skipped: not outcome-prefix trained")
        return {t: {"_skipped": NOT_PREFIX_TRAINED} for t in tests}
    ctx = model.config.max_seq_len
    gen = dict(batch_size=batch_size, use_kv_cache=use_kv_cache, dtype=dtype)
    corpus = random_games(corpus_size, corpus_max_ply, corpus_seed) if set(tests) - {"outcome_signal"} else None
    lengths = None if corpus is None else corpus.lengths.astype(np.int64)

    def continue_games(rows, plen, cond, s):
        plen = np.minimum(np.asarray(plen, np.int64), ctx - 1)
        r = autoregressive_generate(model, len(rows), outcome_token=cond, prefix_moves=corpus.tokens[rows],
                                    prefix_lengths=plen, mask_illegal=True, seed=s, **gen)
        return r, analyze(r, _name(cond))

    out: dict[str, Any] = {}
    if "outcome_signal" in tests:
        res: dict[str, Any] = {}
        for o in PRETRAIN_OUTCOMES:
            res[_name(o)] = {}
            for masked in (False, True):
                r = autoregressive_generate(model, n_per_outcome, outcome_token=o, mask_illegal=masked,
                                            seed=outcome_signal_seed(seed, _name(o), masked), **gen)
                res[_name(o)]["masked" if masked else "unmasked"] = analyze(r, _name(o))
        out["outcome_signal"] = res
        step("outcome_signal")
    if "prefix_continuation" in tests:
        res = {}
        rng = np.random.default_rng(seed)
        outc = _corpus_outcomes(corpus)
        for actual in PRETRAIN_OUTCOMES:
            pool = np.nonzero(outc == actual)[0]
            if pool.size < n_per_bucket:
                continue
            rows = np.sort(rng.choice(pool, n_per_bucket, replace=False))
            buckets: dict[str, tuple[np.ndarray, np.ndarray]] = {
                f"pct_{int(p * 100)}": (rows, np.maximum(1, np.floor(lengths[rows] * p)).astype(np.int64)) for p in (0.1, 0.5, 0.9)}
            for ply in (10, 50, 100, 200):
                longer = pool[lengths[pool] > ply]
                if longer.size >= 10:
                    sel = longer[:n_per_bucket]
                    buckets[f"ply_{ply}"] = (sel, np.full(sel.size, ply))
            res[_name(actual)] = {
                b: {_name(c): continue_games(r_, pl, c, sub_seed(seed, _name(actual), b, _name(c)))[1] for c in PRETRAIN_OUTCOMES}
                for b, (r_, pl) in buckets.items()}
        out["prefix_continuation"] = res
        step("prefix_continuation")
    if "poisoned_prefix" in tests:
        res = {}
        outc = _corpus_outcomes(corpus)
        for a, b in ((WHITE_CHECKMATES, BLACK_CHECKMATES), (WHITE_CHECKMATES, DRAW_BY_RULE),
                     (DRAW_BY_RULE, WHITE_CHECKMATES), (PLY_LIMIT, WHITE_CHECKMATES)):
            key = f"{_name(a)}->{_name(b)}"
            rows = np.nonzero(outc == a)[0][:n_per_pair]
            if rows.size == 0:
                res[key] = {"_skipped": f"no {_name(a)} games in the corpus"}
                continue
            r, m = continue_games(rows, np.maximum(1, lengths[rows] // 2), b, sub_seed(seed, "poisoned", _name(a), _name(b)))
            m["original_outcome_match_rate"] = float(np.mean([x == _name(a) for x in r.outcomes()]))
            m["actual_outcome"], m["poisoned_outcome"] = _name(a), _name(b)
            res[key] = m
        out["poisoned_prefix"] = res
        step("poisoned_prefix")
    if "impossible_task" in tests:
        res = {}
        zr = np.nonzero((corpus.termination == 5) & (lengths >= ctx - 1))[0][:n_per_scenario]
        if zr.size:
            for name, cond in (("zero_remaining_ply", WHITE_CHECKMATES), ("control_ply_limit", PLY_LIMIT)):
                res[name] = continue_games(zr, np.full(zr.size, ctx - 1), cond, sub_seed(seed, "impossible", name))[1]
        else:
            res["zero_remaining_ply"] = {"_skipped": f"the corpus (max_ply {corpus_max_ply}) has no ply-limit games of ≥ {ctx - 1} plies"}
        im = np.nonzero(corpus.termination == 4)[0][:n_per_scenario]
        res["insufficient_material"] = (
            continue_games(im, np.maximum(1, np.floor(lengths[im] * 0.9)).astype(np.int64), WHITE_CHECKMATES,
                           sub_seed(seed, "impossible", "insufficient_material"))[1]
            if im.size else {"_skipped": "no insufficient-material games in the corpus"})
        out["impossible_task"] = res
        step("impossible_task")
    if "improbable_task" in tests:
        res = {}
        few = np.nonzero(lengths >= 240)[0][:n_per_scenario]
        for name, cond in (("checkmate_few_ply", WHITE_CHECKMATES), ("control_few_ply", PLY_LIMIT)):
            res[name] = (continue_games(few, np.minimum(245, lengths[few] - 1), cond, sub_seed(seed, "improbable", name))[1]
                         if few.size else {"_skipped": "no games of ≥ 240 plies in the corpus"})
        early = np.nonzero(lengths >= 40)[0][:n_per_scenario]
        for name, cond in (("stalemate_early", STALEMATE), ("control_early", PLY_LIMIT)):
            res[name] = (continue_games(early, np.full(early.size, 20), cond, sub_seed(seed, "improbable", name))[1]
                         if early.size else {"_skipped": "no games of ≥ 40 plies in the corpus"})
        out["improbable_task"] = res
        step("improbable_task")
    return out


# --------------------------------------------------------------------------- edge cases (§3.5)
EDGE_CATEGORIES: dict[str, str] = {
    "in_check": "IN_CHECK", "double_check": "IN_DOUBLE_CHECK", "pin_restricts": "PIN_RESTRICTS_MOVEMENT",
    "ep_available": "EP_CAPTURE_AVAILABLE", "castle_legal_k": "CASTLE_LEGAL_KINGSIDE",
    "castle_legal_q": "CASTLE_LEGAL_QUEENSIDE", "castle_blocked_check": "CASTLE_BLOCKED_CHECK",
    "promotion_available": "PROMOTION_AVAILABLE",
}
"""Non-terminal categories → edge-case bit names (engine §7.1)."""
TERMINAL_CATEGORIES: dict[str, tuple[str, int]] = {
    name: (name.upper(), TERMINATION_NAMES.index(name)) for name in ("checkmate", "stalemate")}
"""Terminal categories → (bit name, termination code)."""

from pawn.metrics import EDGE_LABELS  # noqa: E402  (the labels' one home for JAX-free readers)

if set(EDGE_LABELS) != set(EDGE_CATEGORIES) | set(TERMINAL_CATEGORIES):
    raise RuntimeError("pawn.evaluate.diagnostics: its categories and pawn.metrics.EDGE_LABELS differ")


@eqx.filter_jit
def _edge_scores(model, ids, attn, b, p, legal, key, n_samples, dtype):
    """At (b, p) [n]: legal fraction of ``n_samples`` softmax samples, P(PAD), entropy (nats)."""
    logits = model(ids, attn, dtype=dtype)[b, p].astype(jnp.float32)  # [n, V]
    logp = jax.nn.log_softmax(logits, -1)
    samples = jax.random.categorical(key, logits, axis=-1, shape=(n_samples, logits.shape[0])).T
    ok = jnp.take_along_axis(legal, samples, axis=-1).mean(-1)
    ent = -(jnp.exp(logp) * logp).sum(-1)
    return ok, jnp.exp(logp[:, PAD_TOKEN]), ent


def edge_case_diagnostics(
    model: Callable,
    *,
    n_per_category: int = 10_000,
    max_ply: int = 255,
    seed: int = 42,
    max_simulated_factor: float = 200.0,
    n_samples: int = 100,
    batch_size: int = 64,
    prepend_outcome: bool = False,
    dtype: Optional[str] = None,
    progress: Optional[Callable[[float, float, str], None]] = None,
) -> dict[str, Any]:
    """Legality in edge cases (spec §3.5).

    Corpus: the engine's quota generator, ``n_per_category`` games per category split evenly
    between the white and black perspective (``max_ply``, ``seed``, ``max_simulated_factor``).
    Positions: scanning games in order, every ply t < length with the category's bit set, up to
    ``n_per_category`` per category; checkmate/stalemate use ply = game length. The model sees
    the moves before ply t (pure moves, ply 0 skipped; with the outcome prefix the game's own
    outcome first) and is scored at the last position: ``n_samples`` tokens drawn from the full
    softmax are checked against the legal tokens of ply t (at a terminal position only PAD is
    "legal").

    ``progress``: optional callback ``(categories done, categories in all, message)`` after each
    category (and once when the corpus is generated, with 0 done).

    Returns:
        ``{category: {n_positions, terminal, mean_legal_rate, std_legal_rate, mean_pad_prob,
        mean_entropy, std_entropy}}`` (categories with no position get ``n_positions`` 0 and
        NaN means).
    """
    bits = edge_case_bits()
    quota_w = np.zeros(64, np.int32)
    quota_b = np.zeros(64, np.int32)
    cats = {**{c: (b, None) for c, b in EDGE_CATEGORIES.items()}, **TERMINAL_CATEGORIES}
    for c, (bname, _) in cats.items():
        bit = int(bits[bname]).bit_length() - 1
        quota_w[bit] = n_per_category // 2
        quota_b[bit] = n_per_category - n_per_category // 2
    sets = generate_diagnostic_sets(quota_w, quota_b, n_per_category * len(cats), max_ply, seed, max_simulated_factor)
    tokens, lengths = sets["move_ids"], sets["game_lengths"].astype(np.int64)
    per_ply, codes = sets["per_ply_stats"], sets["termination_codes"]
    layout = Layout.of(prepend_outcome)
    ctx = model.config.max_seq_len
    # Select (game, ply) per category in scan order.
    picks: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    plies = np.arange(tokens.shape[1])[None, :]
    for c, (bname, term) in cats.items():
        if term is None:
            m = ((per_ply & np.uint64(bits[bname])) != 0) & (plies < lengths[:, None]) & (plies >= 1)
            g, t = np.nonzero(m)
        else:
            g = np.nonzero((codes == term) & (lengths >= 1))[0]
            t = lengths[g]
        keep = layout.position_of_ply(t) <= ctx  # the prompt (moves before t, plus the prefix) must fit
        picks[c] = (g[keep][:n_per_category], t[keep][:n_per_category])
    if progress is not None:
        progress(0, len(cats), "corpus generated")
    outcome = np.asarray(random_outcome_tokens(codes, lengths), np.int32)
    T = min(ctx, layout.seq_len(max_ply))
    key = jax.random.PRNGKey(seed)
    out: dict[str, Any] = {}
    for ci, (c, (g, t)) in enumerate(picks.items()):
        oks, pads, ents = [], [], []
        for s in range(0, g.size, batch_size):
            gb, tb = g[s:s + batch_size], t[s:s + batch_size]
            n = gb.size
            ids = np.full((batch_size, T), PAD_TOKEN, np.int32)
            ids[:n] = layout.pack(tokens[gb], tb, outcome[gb], T)["input_ids"]  # the moves before ply t
            attn = ids != PAD_TOKEN
            masks = legal_move_masks(np.ascontiguousarray(tokens[gb]), lengths[gb].astype(np.int16), VOCAB_SIZE)
            legal = np.zeros((batch_size, VOCAB_SIZE), bool)
            legal[:n] = masks[np.arange(n), np.minimum(tb, masks.shape[1] - 1)]
            legal[:n][tb >= masks.shape[1]] = False
            legal[np.arange(n)[tb >= masks.shape[1]], PAD_TOKEN] = True  # game over at T: only PAD
            pos = np.zeros(batch_size, np.int64)
            pos[:n] = layout.position_of_ply(tb) - 1  # its target is ply t
            ok, pad, ent = _edge_scores(model, jnp.asarray(ids), jnp.asarray(attn), jnp.arange(batch_size), jnp.asarray(pos),
                                        jnp.asarray(legal), jax.random.fold_in(key, ci * 100_003 + s), n_samples, dtype)
            oks.append(np.asarray(ok)[:n])
            pads.append(np.asarray(pad)[:n])
            ents.append(np.asarray(ent)[:n])
        ok = np.concatenate(oks) if oks else np.zeros(0)
        pad = np.concatenate(pads) if pads else np.zeros(0)
        ent = np.concatenate(ents) if ents else np.zeros(0)

        def stat(f, a):
            return float(f(a)) if a.size else float("nan")

        out[c] = {"n_positions": int(ok.size), "terminal": c in TERMINAL_CATEGORIES,
                  "mean_legal_rate": stat(np.mean, ok), "std_legal_rate": stat(np.std, ok),
                  "mean_pad_prob": stat(np.mean, pad), "mean_entropy": stat(np.mean, ent), "std_entropy": stat(np.std, ent)}
        if progress is not None:
            progress(len(out), len(picks), c)
    return out


def random_outcome_tokens(codes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Outcome tokens of engine games from termination codes and lengths (spec §0 code → outcome)."""
    codes = np.asarray(codes).astype(np.int64)
    lengths = np.asarray(lengths).astype(np.int64)
    mate = np.where(lengths % 2 == 1, WHITE_CHECKMATES, BLACK_CHECKMATES)
    table = np.array([0, STALEMATE, DRAW_BY_RULE, DRAW_BY_RULE, DRAW_BY_RULE, PLY_LIMIT])
    return np.where(codes == 0, mate, table[np.clip(codes, 0, 5)])
