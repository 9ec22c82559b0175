"""PGN parsing (spec engine.md §6.1–§6.4) against python-chess, plus hand-written edge cases."""

from __future__ import annotations

from pathlib import Path

import chess
import chess.pgn
import numpy as np
import pytest

from pawn import vocab
from pawn.engine import parse_pgn
from pawn.engine.pgn import CLOCK_MISSING, EVAL_MISSING, is_pgn_text

from _chess_oracle import expected_outcome

MAX_PLY = 512


def elo(value: str | None) -> int:
    """Spec §6.6: an unsigned 16-bit integer, 0 if missing or unparsable ("?")."""
    return int(value) if value and value.isdigit() and int(value) < 65536 else 0


def oracle(path: Path):
    """python-chess reading of every game: (ucis, expected skip reason or None, outcome, game)."""
    out = []
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        while (game := chess.pgn.read_game(f)) is not None:
            h = game.headers
            variant = h.get("Variant", "Standard")
            moves = list(game.mainline_moves())
            board = game.board()
            ucis = []
            for m in moves:
                ucis.append(board.uci(m, chess960=False))
                board.push(m)
            if variant == "From Position" or "FEN" in h or h.get("SetUp") == "1":
                reason = "fen_start"
            elif variant not in ("Standard", "Chess"):
                reason = "variant"
            elif game.errors:
                reason = "illegal_move"
            else:
                outcome = expected_outcome(h, board, len(ucis), MAX_PLY)
                reason = "no_outcome" if outcome is None else ("too_short" if not ucis else None)
            out.append((ucis, reason, None if reason else expected_outcome(h, board, len(ucis), MAX_PLY), game))
    return out


@pytest.mark.slow
def test_every_lichess_game_matches_python_chess_moves_outcome_elo_and_clocks(lichess_pgns):
    for path in lichess_pgns:
        parsed = parse_pgn(path, max_ply=MAX_PLY)
        ref = oracle(path)
        assert parsed.counts["read"] == len(ref), path.name
        want_skipped = [(i + 1, r) for i, (_, r, _, _) in enumerate(ref) if r]
        got_skipped = [(g, r if r != "unreadable_move" else "illegal_move") for g, _, r in parsed.skipped]
        assert got_skipped == want_skipped, path.name
        kept = [(i + 1, x) for i, x in enumerate(ref) if not x[1]]
        assert parsed.game_index.tolist() == [i for i, _ in kept]
        for row, (_, (ucis, _, outcome, game)) in enumerate(kept):
            n = int(parsed.lengths[row])
            assert parsed.uci[row] == ucis[:MAX_PLY], (path.name, row)
            assert n == min(len(ucis), MAX_PLY)
            assert (parsed.tokens[row, n:] == vocab.PAD_TOKEN).all()
            assert parsed.outcome[row] == outcome, (path.name, game.headers.get("Site"))
            assert parsed.white_elo[row] == elo(game.headers.get("WhiteElo"))
            assert parsed.black_elo[row] == elo(game.headers.get("BlackElo"))
            if row % 25 == 0:  # clocks and evals spot check
                for ply, node in enumerate(list(game.mainline())[:n]):
                    clk = node.clock()
                    assert parsed.clocks[row, ply] == (CLOCK_MISSING if clk is None else min(int(clk), 32767))
                    ev = node.eval()
                    if ev is None:
                        assert parsed.evals[row, ply] == EVAL_MISSING
                    elif ev.white().mate() is not None and ev.white().mate() != 0:
                        m = ev.white().mate()
                        assert parsed.evals[row, ply] == int(np.sign(m)) * (32767 - abs(m))
                    elif ev.white().mate() is None:
                        assert parsed.evals[row, ply] == max(-16383, min(16383, ev.white().score()))
                assert (parsed.clocks[row, n:] == 0).all() and (parsed.evals[row, n:] == 0).all()


HEAD = '[Event "Rated Blitz game"]\n[Site "https://lichess.org/x"]\n[Result "{result}"]\n[WhiteElo "1500"]\n[BlackElo "1600"]\n[Termination "{term}"]\n\n'


def game(moves: str, result: str = "1-0", term: str = "Normal", extra: str = "") -> str:
    return extra + HEAD.format(result=result, term=term) + moves + f" {result}\n\n"


def one(text: str, **kw):
    p = parse_pgn(text, **kw)
    assert p.counts["read"] == 1
    return p


def test_glyphs_nags_variations_and_comments_do_not_cut_the_game():
    p = one(game("1. e4!? {good} e5?! $6 2. Nf3!! (2. f4 exf4 (2... d5) 3. Nf3) Nc6?? ; comment\n3. Bb5! a6 $2"))
    assert p.uci[0] == ["e2e4", "e7e5", "g1f3", "b8c6", "f1b5", "a7a6"]
    assert p.san[0] == ["e4", "e5", "Nf3", "Nc6", "Bb5", "a6"]
    assert p.outcome[0] == vocab.WHITE_RESIGNS


def test_clock_and_eval_annotations_follow_spec():
    p = one(game("1. e4 { [%eval -0.35] [%clk 0:00:07] } e5 { [%eval #-3] } 2. Nf3 { [%clk 1:00:00] [%eval 0.2] }"))
    assert p.clocks[0, :3].tolist() == [7, CLOCK_MISSING, 3600]
    assert p.evals[0, :3].tolist() == [-35, -(32767 - 3), 20]
    assert p.clocks[0, 3:].max() == 0 and p.evals[0, 3:].max() == 0


def test_zero_castling_bom_and_crlf_are_read():
    text = "\ufeff" + game("1. e4 e5 2. Nf3 Nc6 3. Bc4 Bc5 4. 0-0 Nf6 5. d3 0-0").replace("\n", "\r\n")
    p = one(text)
    assert p.uci[0][6] == "e1g1" and p.uci[0][9] == "e8g8"
    assert p.headers["site"] == ["https://lichess.org/x"]


def test_latin1_headers_are_decoded():
    text = game("1. e4 e5").replace("Rated Blitz game", "Caf\xe9").encode("latin-1")
    assert parse_pgn(text).headers["event"] == ["Caf\xe9"]


def test_illegal_and_unreadable_moves_skip_the_game_with_its_ply():
    text = game("1. e4 e5 2. Ke3 Nc6") + game("1. d4 d5 2. c4 Sc6 3. Nc3") + game("1. e4")
    p = parse_pgn(text)
    assert p.skipped == [(1, 2, "illegal_move"), (2, 3, "unreadable_move")]
    assert p.game_index.tolist() == [3]
    assert p.counts["illegal_move"] == 1 and p.counts["unreadable_move"] == 1 and p.counts["kept"] == 1


def test_variant_and_fen_start_games_are_skipped():
    chess960 = game("1. e4", extra='[Variant "Chess960"]\n')
    fen = game("1. Kb1", extra='[Variant "From Position"]\n[SetUp "1"]\n[FEN "8/8/8/8/8/8/8/K6k w - - 0 1"]\n')
    p = parse_pgn(chess960 + fen)
    assert [(g, r) for g, _, r in p.skipped] == [(1, "variant"), (2, "fen_start")]


def test_unfinished_games_are_dropped_per_spec_6_3():
    p = parse_pgn(game("1. e4 e5", result="*", term="Unterminated") + game("1. e4 e5", result="0-1", term="Abandoned"))
    assert [r for _, _, r in p.skipped] == ["no_outcome", "no_outcome"] and len(p) == 0


def test_truncated_game_gets_ply_limit_even_when_abandoned():
    p = one(game("1. Nf3 Nf6 2. Ng1 Ng8 3. Nf3", result="*", term="Abandoned"), max_ply=4)
    assert p.outcome[0] == vocab.PLY_LIMIT and p.lengths[0] == 4 and p.full_length[0] == 5
    assert p.tokens.shape == (1, 4)


@pytest.mark.parametrize(
    "moves,result,term,token",
    [
        ("1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7#", "1-0", "Normal", vocab.WHITE_CHECKMATES),
        ("1. f3 e5 2. g4 Qh4#", "0-1", "Normal", vocab.BLACK_CHECKMATES),
        ("1. e4 e5 2. Qh5 Nc6", "1-0", "Normal", vocab.WHITE_RESIGNS),
        ("1. e4 e5 2. Qh5 Nc6", "0-1", "Normal", vocab.BLACK_RESIGNS),
        ("1. e4 e5", "1/2-1/2", "Normal", vocab.DRAW_BY_AGREEMENT),
        ("1. e4 e5", "1-0", "Time forfeit", vocab.WHITE_WINS_ON_TIME),
        ("1. e4 e5", "0-1", "Time forfeit", vocab.BLACK_WINS_ON_TIME),
        ("1. e4 e5", "1/2-1/2", "Time forfeit", vocab.DRAW_BY_TIME),
        ("1. e4 e5", "1/2-1/2", "Insufficient material", vocab.DRAW_BY_RULE),
        # Sam Loyd's 10-move stalemate
        ("1. e3 a5 2. Qh5 Ra6 3. Qxa5 h5 4. h4 Rah6 5. Qxc7 f6 6. Qxd7+ Kf7 7. Qxb7 Qd3 "
         "8. Qxb8 Qh7 9. Qxc8 Kg6 10. Qe6", "1/2-1/2", "Normal", vocab.STALEMATE),
    ],
)
def test_outcome_token_follows_spec_6_3(moves, result, term, token):
    assert one(game(moves, result=result, term=term)).outcome[0] == token


def test_ply_bounds_and_missing_file_raise():
    with pytest.raises(FileNotFoundError, match="no_such.pgn"):
        parse_pgn(Path("/nonexistent/no_such.pgn"))
    with pytest.raises(ValueError, match="max_ply"):
        parse_pgn(game("1. e4"), max_ply=0)
    with pytest.raises(ValueError, match="min_ply"):
        parse_pgn(game("1. e4"), max_ply=8, min_ply=9)


def test_min_ply_skips_short_games():
    p = parse_pgn(game("1. e4 e5") + game("1. e4 e5 2. Nf3"), min_ply=3)
    assert p.skipped == [(1, 2, "too_short")] and p.game_index.tolist() == [2]


def test_text_or_path_rule():
    assert is_pgn_text("1. e4 *\n") and is_pgn_text('[Event "x"]') and is_pgn_text(b"1. e4")
    assert not is_pgn_text("games.pgn") and not is_pgn_text(Path("a\nb"))


def test_random_bytes_never_crash_the_parser():
    rng = np.random.default_rng(0)
    alphabet = np.frombuffer(b'[]{}()"$!?;%.-+#=01258abcdefghKQRBNOx \n\r\t*/\xef\xbb\xbf\xff', dtype=np.uint8)
    for _ in range(300):
        n = int(rng.integers(0, 400))
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        mixed = rng.choice(alphabet, n).tobytes()
        for blob in (data, mixed, game("1. e4 e5 2. Nf3").encode()[: n // 2] + data):
            p = parse_pgn(blob, max_ply=16)
            assert p.counts["read"] == p.counts["kept"] + len(p.skipped)
            assert p.tokens.shape == (len(p), 16)


def test_a_large_file_read_in_blocks_parses_as_its_bytes(lichess_pgns, tmp_path):
    # parse_pgn_path reads a file in 256 KiB blocks, cutting and parsing each block's games while
    # the next is read; the games, skips and counts must be those of the same bytes parsed from
    # memory, and the ~40 block ends falling inside games must not show.
    data = b"\n\n".join(p.read_bytes() for p in lichess_pgns)
    assert len(data) >= 2 << 20
    big = tmp_path / "big.pgn"
    big.write_bytes(data)
    a, b = parse_pgn(big, 512, 0), parse_pgn(data, 512, 0)
    assert a.counts == b.counts and a.counts["read"] > 7000
    for name in ("tokens", "lengths", "outcome", "white_elo", "black_elo", "game_index", "full_length"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.skipped == b.skipped and a.san == b.san and a.headers == b.headers


def test_a_named_pipe_is_read_as_a_stream(lichess_pgns, tmp_path):
    # `pawn eval --pgn <(zstdcat month.pgn.zst)` hands the parser a pipe: it is read in blocks as
    # it is written (a writer thread feeding it in pieces that split games), with the games of the
    # bytes written; a character device such as /dev/zero is still refused by name.
    import os
    import threading

    data = b"\n\n".join(p.read_bytes() for p in lichess_pgns[:3])
    fifo = tmp_path / "games.pgn"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "wb") as f:
            for i in range(0, len(data), 77_777):
                f.write(data[i : i + 77_777])

    writer = threading.Thread(target=write, daemon=True)  # never outlives a failed test
    writer.start()
    try:
        a = parse_pgn(fifo, 512, 0)
    finally:
        writer.join(timeout=30)
    b = parse_pgn(data, 512, 0)
    assert a.counts == b.counts and a.counts["read"] > 100 and a.path == fifo
    np.testing.assert_array_equal(a.tokens, b.tokens)
    assert a.skipped == b.skipped
    with pytest.raises(FileNotFoundError, match="/dev/zero"):
        parse_pgn("/dev/zero")
