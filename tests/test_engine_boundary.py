"""The typed Rust/Python boundary (issue 12 item 6): records are the engine's ``#[pyclass]``
objects declared in ``_engine.pyi``, constants come from Rust, and every engine error is one of
the ``pawn.engine.errors`` classes (and still the builtin it was before)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from pawn import _engine, vocab
from pawn.engine import BatchEnv, legal_move_counts, parse_pgn, parse_uci_file, tokens_to_uci, uci_to_tokens
from pawn.engine.errors import EngineIndexError, EngineInputError, EngineStateError, EngineUsageError
from pawn.errors import DataError, PawnError, UsageError

PYI = Path(__file__).resolve().parents[1] / "src" / "pawn" / "_engine.pyi"

PGN = """[Event "a"]
[White "w1"]
[Termination "Normal"]
[Result "1-0"]

1. e4 {[%clk 0:03:00]} e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0

[Event "b"]
[Result "0-1"]

1. e4 e5 2. Ke3 0-1
"""


def test_pyi_declares_exactly_the_public_names_of_the_module():
    tree = ast.parse(PYI.read_text())
    declared = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            declared.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared.add(node.target.id)
    public = {n for n in dir(_engine) if not n.startswith("_")} | {"__version__"}
    assert declared == public


def test_pgn_record_is_the_engine_class_with_field_access_and_dict_access():
    g = parse_pgn(PGN, max_ply=8)
    assert type(g) is _engine.PgnGames and len(g) == 1
    assert g.tokens.dtype == np.int16 and g.tokens.shape == (1, 8)
    assert g.lengths.tolist() == [7] and g.outcome.tolist() == [vocab.WHITE_CHECKMATES]
    assert g.clocks[0, :2].tolist() == [180, _engine.CLOCK_MISSING] and g.clocks[0, 7] == 0
    assert g.uci[0][:3] == ["e2e4", "e7e5", "d1h5"] and g.san[0][-1] == "Qxf7#"
    assert g.skipped == [(2, 2, "illegal_move")] and g.headers["white"] == ["w1"]
    assert g.path is None
    assert g["tokens"] is g.tokens and g["counts"] == {**g.counts} and g.counts["illegal_move"] == 1
    d = g.to_dict()
    assert list(d) == ["tokens", "lengths", "outcome", "white_elo", "black_elo", "clocks", "evals", "game_index",
                       "full_length", "headers", "skipped", "counts", "path", "san", "uci"]
    with pytest.raises(KeyError):
        g["nope"]
    with pytest.raises(AttributeError):
        g.tokens = None  # read-only record


def test_uci_file_parsed_in_the_core_gives_the_same_record_from_path_and_bytes(tmp_path):
    text = "\ufeffe2e4 e7e5 1-0\n\n e2e5 \nd2d4 d7d5 c2c4\ng1f3\n"
    p = tmp_path / "games.txt"
    p.write_text(text, encoding="utf-8")
    from_path = parse_uci_file(p, max_ply=2, min_ply=2)
    from_bytes = _engine.parse_uci_bytes(text.encode("utf-8"), 2, 2)
    assert type(from_path) is _engine.UciGames and from_path.path == p and from_bytes.path is None
    for r in (from_path, from_bytes):
        assert r.game_index.tolist() == [1, 3] and r.lengths.tolist() == [2, 2]
        assert r.uci == [["e2e4", "e7e5"], ["d2d4", "d7d5"]]
        assert r.skipped == [(2, 0, "illegal_move"), (4, 1, "too_short")]
        assert r.counts == {"read": 4, "kept": 2, **{k: 0 for k in _engine.SKIP_REASONS},
                            "illegal_move": 1, "too_short": 1}
    assert (from_path.tokens == from_bytes.tokens).all()


def test_termination_constants_and_outcome_mapping_come_from_the_engine():
    assert vocab.TERMINATION_NAMES == ("checkmate", "stalemate", "seventy_five_move_rule", "fivefold_repetition",
                                       "insufficient_material", "ply_limit")
    assert (vocab.RUNNING, vocab.PREMATURE_PAD, vocab.FORFEIT) == (-1, -2, -3)
    expected = {0: (vocab.BLACK_CHECKMATES, vocab.WHITE_CHECKMATES), 1: (vocab.STALEMATE,) * 2,
                2: (vocab.DRAW_BY_RULE,) * 2, 3: (vocab.DRAW_BY_RULE,) * 2, 4: (vocab.DRAW_BY_RULE,) * 2,
                5: (vocab.PLY_LIMIT,) * 2}
    for code, (even, odd) in expected.items():
        assert vocab.termination_outcome(code, 10) == even and vocab.termination_outcome(code, 11) == odd
    for sentinel in (vocab.RUNNING, vocab.PREMATURE_PAD, vocab.FORFEIT, 6):
        assert vocab.termination_outcome(sentinel, 10) is None


def test_engine_errors_are_pawn_errors_with_unchanged_messages():
    bad = np.array([[317, 317]], np.int16), np.array([2], np.int16)
    with pytest.raises(EngineInputError, match=r"^game 0, ply 1: move token 317 \(e2e4\) is illegal") as e:
        legal_move_counts(*bad)
    assert isinstance(e.value, DataError) and isinstance(e.value, ValueError) and e.value.exit_code == 1
    with pytest.raises(EngineInputError, match=r"^game 0: token -5 at ply 1 is not a move$"):
        tokens_to_uci(np.array([[317, -5]], np.int16), np.array([2], np.int16))
    with pytest.raises(EngineInputError, match=r'^game 1: illegal move "e2e5" at ply 0$'):
        uci_to_tokens(["e2e4", "e2e5"])
    with pytest.raises(EngineUsageError, match="on_error must be") as e:
        uci_to_tokens(["e2e4"], on_error="skip")
    assert isinstance(e.value, UsageError) and e.value.exit_code == 2
    with pytest.raises(EngineUsageError, match="max_ply must be in 1..32767, got 0"):
        parse_uci_file("whatever.txt", max_ply=0)
    env = BatchEnv(2, max_ply=16, seed=0)
    with pytest.raises(EngineStateError, match=r"reset\(\) must be called") as e:
        env.active_games()
    assert isinstance(e.value, RuntimeError) and isinstance(e.value, PawnError)
    env.reset()
    with pytest.raises(EngineIndexError, match="game index 5 is out of range for 2 games") as e:
        env.apply_moves(np.array([5]), np.array([317]))
    assert isinstance(e.value, IndexError)


# --- the records of random_games, board_states, diagnostics and the vocabulary export ----------

def _records() -> dict[str, object]:
    """One small instance of every record class the engine returns, by class name."""
    from pawn.engine import accuracy_ceiling, board_states, generate_diagnostic_sets, random_games

    games = random_games(6, max_ply=24, seed=3)
    quotas = np.zeros(64, np.int32)
    return {
        "RandomGames": games,
        "BoardStates": board_states(games.tokens, games.lengths),
        "DiagnosticSets": generate_diagnostic_sets(quotas, quotas, 3, max_ply=16, seed=1),
        "AccuracyCeiling": accuracy_ceiling(n_games=3, max_ply=20, sample_rate=1.0, seed=5),
        "MoveVocabulary": vocab.export_move_vocabulary(),
        "PgnGames": parse_pgn(PGN, max_ply=8),
        "UciGames": _engine.parse_uci_bytes(b"e2e4 e7e5\n", 4, 1),
    }


def _pyi_classes() -> dict[str, ast.ClassDef]:
    return {n.name: n for n in ast.parse(PYI.read_text()).body if isinstance(n, ast.ClassDef)}


def _properties(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    """The ``@property`` declarations of a .pyi class, in declaration order."""
    return {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)
            and any(isinstance(d, ast.Name) and d.id == "property" for d in f.decorator_list)}


def test_every_record_class_is_declared_with_exactly_its_public_attributes():
    records, classes = _records(), _pyi_classes()
    for name, record in records.items():
        assert type(record) is getattr(_engine, name) and type(record).__module__ == "pawn._engine"
        declared = {f.name for f in classes[name].body if isinstance(f, ast.FunctionDef) and not f.name.startswith("_")}
        public = {a for a in dir(type(record)) if not a.startswith("_")}
        assert declared == public, name
        assert ast.get_docstring(classes[name]), name
        for prop in _properties(classes[name]).values():
            assert ast.get_docstring(prop), f"{name}.{prop.name} has no docstring"


def test_record_arrays_have_the_dtype_and_rank_the_pyi_declares():
    # `npt.NDArray[np.int16]` and a docstring starting "int16 [N, T]" must both match the array.
    records, classes = _records(), _pyi_classes()
    checked = 0
    for name, record in records.items():
        for field, prop in _properties(classes[name]).items():
            ann = ast.unparse(prop.returns)
            if not ann.startswith("npt.NDArray["):
                continue
            value = getattr(record, field)
            dtype = np.dtype(ann[len("npt.NDArray[np."):-1])
            assert isinstance(value, np.ndarray) and value.dtype == dtype, f"{name}.{field}: {value.dtype} != {dtype}"
            doc = ast.get_docstring(prop)
            assert doc.split()[0] == dtype.name, f"{name}.{field} docstring says {doc.split()[0]}"
            dims = doc[doc.index("[") + 1:doc.index("]")].split(",")
            assert value.ndim == len(dims), f"{name}.{field}: ndim {value.ndim}, docstring [{','.join(dims)}]"
            checked += 1
    assert checked >= 35


def test_records_keep_dict_access_in_the_old_key_order_and_are_read_only():
    expected = {
        "RandomGames": ["tokens", "lengths", "termination", "outcome", "seed"],
        "BoardStates": ["boards", "side_to_move", "castling_rights", "ep_square", "is_check", "halfmove_clock"],
        "DiagnosticSets": ["move_ids", "game_lengths", "termination_codes", "per_ply_stats", "white", "black",
                           "quota_assignment_white", "quota_assignment_black", "quotas_filled_white",
                           "quotas_filled_black", "n_simulated"],
        "AccuracyCeiling": ["n_positions", "n_games", "n_rollouts", "sample_rate", "unconditional_ceiling",
                            "naive_conditional_ceiling", "conditional_ceiling", "conditional_corrected_ceiling", "ply",
                            "game_length", "n_legal", "unconditional", "naive_conditional", "conditional",
                            "conditional_corrected", "outcome", "game_idx"],
        "MoveVocabulary": ["square_names", "promo_pieces", "promo_pairs", "token_to_move", "move_to_token"],
    }
    records = _records()
    for name, keys in expected.items():
        r = records[name]
        d = r.to_dict()
        assert list(d) == keys, name
        for k in keys:
            value = getattr(r, k)
            if isinstance(value, (int, float)):  # scalars are built per access
                assert r[k] == value == d[k]
            else:  # arrays, lists and dicts are the record's own objects, not copies
                assert r[k] is value and d[k] is value
        with pytest.raises(KeyError):
            r["nope"]
        with pytest.raises(AttributeError):
            setattr(r, keys[0], None)


def test_random_games_record_values():
    from pawn.engine import random_games

    g = random_games(6, max_ply=24, seed=3)
    assert len(g) == 6 and g.max_ply == 24 and g.seed == 3 and g["seed"] == 3
    assert (g.attention_mask() == (g.tokens != vocab.PAD_TOKEN)).all() and g.attention_mask().dtype == np.bool_
    assert (g.attention_mask().sum(axis=1) == g.lengths).all()
    assert repr(g) == "RandomGames(n=6, max_ply=24, seed=3)"
    # The blocks between which Ctrl-C is checked do not change the games (spec §3.2).
    for block in (1, 4, 6, 100):
        b = _engine.random_games(6, 24, 3, 0.0, False, 0, block)
        for k in ("tokens", "lengths", "termination", "outcome"):
            np.testing.assert_array_equal(b[k], g[k])
    tail = _engine.random_games(3, 24, 3, 0.0, False, 3, 2)
    np.testing.assert_array_equal(tail.tokens, g.tokens[3:])
    with pytest.raises(EngineUsageError, match="block must be ≥ 1, got 0"):
        _engine.random_games(6, 24, 3, 0.0, False, 0, 0)


def test_accuracy_ceiling_and_diagnostic_set_records_hold_consistent_values():
    r = _records()
    c = r["AccuracyCeiling"]
    assert c.n_positions == len(c.ply) == len(c.unconditional) and c.n_games == 3 and c.sample_rate == 1.0
    # sample_rate 1 keeps every position: plies 0 … length−1 of each game, in game-then-ply order.
    lengths = [int(c.game_length[c.game_idx == i][0]) for i in range(3)]
    assert c.ply.tolist() == [t for n in lengths for t in range(n)] and c.n_positions == sum(lengths)
    assert c.unconditional_ceiling == pytest.approx(c.unconditional.mean())
    assert (c.unconditional == 1.0 / c.n_legal).all()
    s = r["DiagnosticSets"]
    assert len(s) == s.move_ids.shape[0] == 3 and s.n_simulated == 3
    assert s.quotas_filled_white.shape == (64,) and not s.quotas_filled_white.any()


def test_wrong_dtypes_and_oversized_requests_are_engine_errors_of_the_builtin_types():
    from pawn.engine import board_states, generate_diagnostic_sets, random_games
    from pawn.engine.errors import EngineError, EngineMemoryError, EngineTypeError

    g = random_games(2, max_ply=8, seed=1)
    with pytest.raises(EngineTypeError, match=r"^tokens must be a 2-D int16 NumPy array \[n_games, max_ply\], "
                                              r"got array of dtype int32") as e:
        board_states(g.tokens.astype(np.int32), g.lengths)
    assert isinstance(e.value, TypeError) and isinstance(e.value, PawnError) and e.value.exit_code == 2
    with pytest.raises(EngineTypeError, match="^quotas_white must be a 1-D int32"):
        generate_diagnostic_sets(np.zeros(64, np.int64), np.zeros(64, np.int32), 1)
    with pytest.raises(EngineTypeError, match="^n_games must be an integer, got 2.5"):
        random_games(2.5)
    env = BatchEnv(2)
    env.reset()
    with pytest.raises(EngineTypeError, match="^indices must be"):
        env.fens("x")
    with pytest.raises(EngineMemoryError, match=r"^random_games: tokens of shape \[1000000000000000, 512\] needs "
                                                r"2048000000000000000 bytes, which cannot be allocated$") as e:
        random_games(10**15, max_ply=512)
    assert isinstance(e.value, MemoryError) and isinstance(e.value, EngineError) and e.value.exit_code == 1
    with pytest.raises(EngineMemoryError, match="needs more than 2\\*\\*64 bytes"):
        random_games(2**62, max_ply=512)


def test_ctrl_c_stops_random_games_between_blocks():
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("from pawn.engine import games\ngames.INTERRUPT_BLOCK = 256\nprint('start', flush=True)\n"
            "games.random_games(10**6, 512)\nprint('finished')")  # about a minute of play if not stopped
    # preexec: the child's SIGINT at its default even when a CI harness started us with it ignored
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                         env=os.environ)
    try:
        assert p.stdout.readline() == "start\n"
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
    finally:
        p.kill()
    assert "finished" not in out and err.strip().splitlines()[-1] == "KeyboardInterrupt"
