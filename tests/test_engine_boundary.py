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
