"""UCI / SAN ↔ tokens (spec engine.md §6.7, §1.4) against python-chess on the shared UCI files."""

from __future__ import annotations

from pathlib import Path

import chess
import numpy as np
import pytest

from pawn import vocab
from pawn.engine import parse_uci_file, san_to_uci, tokens_to_san, tokens_to_uci, uci_to_san, uci_to_tokens


@pytest.fixture(scope="module")
def uci_files(shared_data: Path) -> list[Path]:
    files = sorted((shared_data / "uci").glob("*.txt"))
    assert files
    return files


def python_chess_san(ucis: list[str]) -> list[str]:
    board, out = chess.Board(), []
    for u in ucis:
        move = chess.Move.from_uci(u)
        assert board.is_legal(move), u
        out.append(board.san(move))
        board.push(move)
    return out


def test_shared_uci_files_round_trip_tokens_uci_san(uci_files):
    for path in uci_files:
        lines = [line.split() for line in path.read_text().splitlines() if line.strip()]
        parsed = parse_uci_file(path)
        assert parsed.counts["read"] == len(lines) and parsed.skipped == []
        assert parsed.uci == lines
        tokens, lengths = uci_to_tokens(lines)
        np.testing.assert_array_equal(tokens, parsed.tokens)
        assert tokens.dtype == np.int16 and lengths.tolist() == [len(g) for g in lines]
        assert all((tokens[i, n:] == vocab.PAD_TOKEN).all() for i, n in enumerate(lengths))
        assert tokens_to_uci(tokens, lengths) == lines
        want_san = [python_chess_san(g) for g in lines]
        assert tokens_to_san(tokens, lengths) == want_san
        assert uci_to_san(lines) == want_san
        assert san_to_uci(want_san) == lines


def test_castling_is_king_two_squares_and_king_takes_rook_is_rejected():
    opening = ["e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "f8c5"]
    tokens, _ = uci_to_tokens([opening + ["e1g1"]])
    assert tokens[0, 6] == 102
    with pytest.raises(ValueError, match=r"game 1: illegal move \"e1h1\" at ply 6"):
        uci_to_tokens([opening, opening + ["e1h1"]])


def test_promotion_letter_case_insensitive_and_required():
    pre = ["a2a4", "b7b5", "a4b5", "a7a6", "b5a6", "c8b7", "a6a7", "b7c6"]
    tokens, lengths = uci_to_tokens([pre + ["a7b8Q"], pre + ["a7b8n"]])
    assert tokens_to_uci(tokens, lengths)[0][-1] == "a7b8q"
    assert tokens_to_san(tokens, lengths)[1][-1] == "axb8=N"
    with pytest.raises(ValueError, match="game 0: illegal move \"a7b8\" at ply 8"):
        uci_to_tokens([pre + ["a7b8"]])


def test_truncate_mode_keeps_moves_before_the_error():
    tokens, lengths = uci_to_tokens([["e2e4", "e7e5", "zz", "g1f3"]], max_ply=8, on_error="truncate")
    assert lengths.tolist() == [2] and tokens.shape == (1, 8)
    with pytest.raises(ValueError, match="malformed move \"zz\" at ply 2"):
        uci_to_tokens([["e2e4", "e7e5", "zz"]])
    with pytest.raises(ValueError, match="on_error"):
        uci_to_tokens([["e2e4"]], on_error="ignore")


def test_san_errors_name_game_and_ply_and_accept_glyphs():
    assert san_to_uci([["e4!", "e5?!", "Nf3", "Nc6", "Bc4", "Bc5", "0-0"]])[0][-1] == "e1g1"
    with pytest.raises(ValueError, match="game 0: illegal move \"Ke3\" at ply 2"):
        san_to_uci([["e4", "e5", "Ke3"]])
    with pytest.raises(ValueError, match="game 0: illegal move .* at ply 1"):
        tokens_to_san(np.array([[317, 317]], dtype=np.int16), np.array([2], dtype=np.int16))
    with pytest.raises(ValueError, match="ply 1 is not a move"):
        tokens_to_uci(np.array([[317, vocab.PAD_TOKEN]], dtype=np.int16), np.array([2], dtype=np.int16))


def test_parse_uci_file_skips_bad_games_and_drops_results(tmp_path):
    f = tmp_path / "games.txt"
    f.write_text("e2e4 e7e5 1-0\n\ne2e4 e2e4\ne2e4 e7e5 g1f3 b8c6\r\nd2d4 *\n")
    p = parse_uci_file(f, max_ply=3, min_ply=2)
    assert p.uci == [["e2e4", "e7e5"], ["e2e4", "e7e5", "g1f3"]]
    assert p.game_index.tolist() == [1, 3]
    assert p.skipped == [(2, 1, "illegal_move"), (4, 1, "too_short")]
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        parse_uci_file(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="max_ply"):
        parse_uci_file(f, max_ply=40000)
