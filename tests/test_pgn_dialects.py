"""PGN dialects (issue 9) with python-chess as the oracle.

Rule checked for every game of every input: when python-chess reads a game without errors,
PAWN's parser gives the same main-line moves (UCI and token ids) and the spec §6.3 outcome, or
skips it for a reason python-chess's reading also shows (no §6.3 outcome from its headers,
FEN start, variant); when python-chess reports an error or a null move, PAWN skips the game as
``illegal_move`` / ``unreadable_move``. The few places where PAWN departs from python-chess on
purpose are listed in ``DIVERGENCES``, and each test there first checks that python-chess
really reads the text the way the entry says.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import chess
import chess.pgn
import pytest

from pawn import vocab
from pawn.engine import parse_pgn, san_to_uci

from _chess_oracle import expected_outcome

MAX_PLY = 512
MOVE_ERRORS = {"illegal_move", "unreadable_move"}


class _Builder(chess.pgn.GameBuilder):
    """python-chess's game builder, noting whether its first error was in the main line."""

    def begin_game(self) -> None:
        super().begin_game()
        self.first_error_in_mainline: bool | None = None

    def handle_error(self, error: Exception) -> None:
        if self.first_error_in_mainline is None:
            self.first_error_in_mainline = len(self.variation_stack) == 1
        super().handle_error(error)

    def result(self) -> chess.pgn.Game:
        game = super().result()
        game.first_error_in_mainline = self.first_error_in_mainline
        return game


def python_chess_games(text: str) -> list[tuple[list[str], str | None, int | None]]:
    """python-chess's reading of each game: (main-line UCIs, reason PAWN must skip it or None,
    expected outcome token when kept). Reason ``"move_error"``: python-chess's first error was in
    the main line, or it read a null move. ``"unknown"``: its first error was inside a variation,
    after which python-chess's own main line is unreliable (it does not pop the variation's
    board), so nothing is expected of PAWN."""
    out = []
    f = io.StringIO(text)
    while (game := chess.pgn.read_game(f, Visitor=_Builder)) is not None:
        h, board, ucis = game.headers, game.board(), []
        null = False
        for m in game.mainline_moves():
            if game.errors:
                break
            null |= not m
            ucis.append(board.uci(m, chess960=False))
            board.push(m)
        variant = h.get("Variant", "Standard")
        if variant == "From Position" or "FEN" in h or h.get("SetUp") == "1":
            reason = "fen_start"
        elif variant not in ("Standard", "Chess"):
            reason = "variant"
        elif game.errors and not game.first_error_in_mainline:
            reason = "unknown"
        elif game.errors or null:
            reason = "move_error"
        elif expected_outcome(h, board, len(ucis), MAX_PLY) is None:
            reason = "no_outcome"
        else:
            reason = None
        out.append((ucis, reason, None if reason else expected_outcome(h, board, len(ucis), MAX_PLY)))
    return out


def assert_same_as_python_chess(data: str | bytes, oracle_text: str | None = None, name: str = "") -> dict[str, int]:
    """Parse ``data`` with PAWN and check every game against python-chess's reading of
    ``oracle_text`` (default: ``data`` decoded as UTF-8). Returns PAWN's counts."""
    if oracle_text is None:
        oracle_text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    parsed = parse_pgn(data.encode("utf-8") if isinstance(data, str) else data, max_ply=MAX_PLY, min_ply=0)
    ref = python_chess_games(oracle_text)
    assert parsed.counts["read"] == len(ref), (name, parsed.counts, len(ref))
    skipped = {g: (ply, reason) for g, ply, reason in parsed.skipped}
    kept = {int(g): row for row, g in enumerate(parsed.game_index)}
    for i, (ucis, reason, outcome) in enumerate(ref, start=1):
        where = f"{name} game {i}"
        if reason == "unknown":
            continue
        if reason == "move_error":
            assert i in skipped and skipped[i][1] in MOVE_ERRORS, (where, skipped.get(i), ucis)
        elif reason is not None:
            assert skipped.get(i, (None, None))[1] == reason, (where, skipped.get(i), ucis)
            if reason == "no_outcome":
                assert skipped[i][0] == len(ucis), where  # the ply of a game-level skip = its plies
        else:
            assert i in kept, (where, skipped.get(i), ucis)
            row = kept[i]
            assert parsed.uci[row] == ucis[:MAX_PLY], where
            want = [vocab.uci_to_token(u) for u in ucis[:MAX_PLY]]
            assert parsed.tokens[row, : len(want)].tolist() == want, where
            assert (parsed.tokens[row, len(want) :] == vocab.PAD_TOKEN).all(), where
            assert int(parsed.outcome[row]) == outcome, where
    return parsed.counts


HEAD = (
    '[Event "Rated Blitz game"]\n[Site "https://lichess.org/abc1d2e3"]\n[Result "{result}"]\n'
    '[WhiteElo "1500"]\n[BlackElo "1600"]\n[Termination "{term}"]\n\n'
)


def game(movetext: str, result: str = "1-0", term: str = "Normal", head: str = HEAD) -> str:
    return head.format(result=result, term=term) + movetext + "\n\n"


PROMO = "1. e4 d5 2. exd5 c6 3. dxc6 Nf6 4. cxb7 Nbd7 5. "
GLYPHS = [
    "±", "∓", "∞", "→", "=", "+-", "-+", "+=", "=+", "+/-", "-/+", "=/+", "+/=", "=/∞", "TN", "N", "RR", "D",
    "Δ", "∆", "□", "⨀", "⊙", "○", "⩲", "⩱", "↑", "↑↑", "⇆", "⟳", "⊕", "⌓", "◫", "!!", "?!", "!?", "??", "!", "?",
    "$14", "$1", "$146", "~", "<=>",
]

# name -> (PGN text, python-chess text when it must differ: glued games only)
CORPUS: dict[str, tuple[str, str | None]] = {}
for g in GLYPHS:
    CORPUS[f"glyph {g}"] = (game(f"1. e4 e5 2. Nf3 {g} Nc6 3. Bb5 {g} a6 {g} 1-0"), None)
    CORPUS[f"glyph glued {g}"] = (game(f"1. e4 e5 2. Nf3{g} Nc6 3. Bb5+{g} a6 1-0"), None)
for promo in ["bxa8Q", "bxa8N", "bxa8R", "bxa8B", "bxa8q", "bxa8n", "bxa8=Q", "bxa8=n", "bxa8Q+", "bxa8Q!", "bxa8K", "bxa8"]:
    CORPUS[f"promotion {promo}"] = (game(PROMO + promo + " 1-0"), None)
CORPUS.update(
    {
        "castling with zeros": (
            game("1. e4 e5 2. Nf3 Nc6 3. Bc4 Bc5 4. 0-0 d6 5. d3 Be6 6. Nc3 Qd7 7. Be3 0-0-0 8. a3 h6 1-0"),
            None,
        ),
        "castling suffixes": (game("1. e4 e5 2. Nf3 Nc6 3. Bc4 Bc5 4. O-O! d6 5. d3 Be6 6. Nc3 Qd7 7. Be3 O-O-O?! 1-0"), None),
        "e.p. suffix": (game("1. e4 a6 2. e5 d5 3. exd6 e.p. cxd6 4. d4 f5 5. d5 e5 6. dxe6e.p. Bxe6 7. f4 g5 8. fxg6ep 1-0"), None),
        "check suffixes": (game("1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7++ 1-0"), None),
        "mate suffix": (game("1. f3 e5 2. g4 Qh4# 0-1", result="0-1"), None),
        "wrong check marks": (game("1. e4+ e5# 2. Nf3+ Nc6 1-0"), None),
        "move numbers without spaces": (game("1.e4 e5 2.Nf3 Nc6 3.Bb5 a6 4.Ba4 1-0"), None),
        "black move numbers": (game("1. e4 1... e5 2. Nf3 2...Nc6 3.Bb5 3. ... a6 4. Ba4 4.. Nf6 1-0"), None),
        "chess.com clocks": (
            game("1. e4 {[%clk 0:09:58.3]} 1... e5 {[%clk 0:09:57]} 2. Nf3 {[%clk 0:09:50]} 2... Nc6 {[%clk 0:09:49]} 1-0"),
            None,
        ),
        "comments and line comments": (
            game("1. e4 {best by test} e5 ; open game\n2. Nf3 {multi\nline\n\nwith a blank line} Nc6 {}\n3. Bb5 ;\n a6 1-0"),
            None,
        ),
        "escape lines": (
            "% header escape\n" + game("1. e4 e5\n% movetext escape Ke2\n2. Nf3 Nc6 1-0"),
            None,
        ),
        "nested variations": (
            game(
                "1. e4 e5 2. Nf3 (2. f4 exf4 (2... d5 3. exd5 {a (b} e4) 3. Nf3 g5 (3... d6)) 2... Nc6 "
                "(2... d6 3. d4 (3. Bc4 Be7) exd4) 3. Bb5 a6 ( 3... Nf6 4. O-O ) 4. Ba4 1-0"
            ),
            None,
        ),
        "results draw and unknown": (
            game("1. e4 e5 2. Nf3 Nc6 1/2-1/2", result="1/2-1/2")
            + game("1. d4 d5 *", result="*", term="Unterminated")
            + game("1. c4 e5 0-1", result="0-1", term="Time forfeit"),
            None,
        ),
        "unknown tags": (
            game("1. e4 e5 1-0", head='[Annotator "me"]\n[PlyCount "2"]\n[X_Y-Z "w"]\n' + HEAD),
            None,
        ),
        "bom and crlf": ("\ufeff" + (game("1. e4 e5 2. Nf3 Nc6 3. Bb5 1-0") + game("1. d4 1-0")).replace("\n", "\r\n"), None),
        "no tags": ("1. e4 e5 2. Nf3 *\n\n1. d4 d5 1-0\n\n", None),
        "long algebraic": (game("1. e2-e4 e7-e5 2. Ng1-f3 Nb8-c6 3. Bf1-b5 a7-a6 4. Bb5xc6 d7xc6 5. e1g1 1-0"), None),
        "coordinate moves": (game("1. e2e4 e7e5 2. g1f3 b8c6 3. f1c4 g8f6 4. e1g1 1-0"), None),
        "capture marks missing or extra": (game("1. e4 d5 2. ed5 Qd5 3. Nc3 Qxd8 4. Nxf3 Nf6 1-0"), None),
        "pawn letter": (game("1. Pe4 e5 2. Pf4 Pexf4 1-0"), None),
        "chessbase": (
            game(
                "1.e4 e5 2.Nf3 Nc6 3.Bb5 a6 4.Ba4 Nf6 5.O-O Be7 6.Re1 b5 7.Bb3 d6 8.c3 O-O 9.h3 Nb8 $146 {Breyer} "
                "10.d4 Nbd7 11.Nbd2 Bb7 12.Bc2 Re8 13.Nf1 Bf8 14.Ng3 g6 $5 15.a4 c5 16.d5 c4 17.Bg5 h6 18.Be3 Nc5 "
                "19.Qd2 h5 20.Bg5 Be7 +/= 21.Ra3 Nfd7 22.Bh6 Bf8 23.Bg5 Be7 24.Be3 $14 1/2-1/2",
                result="1/2-1/2",
            ),
            None,
        ),
        "comment lines around tags": (
            "; file comment\n\n" + game("1. e4 e5 1-0", head='[Event "x"]\n; between tags\n% escape\n' + HEAD), None
        ),
        "unicode spaces": (game("1.\u00a0e4\u00a0e5 2.\u2009Nf3\u202fNc6\u3000 3. Bb5 1-0"), None),
        "tabs and odd line breaks": (game("1.\te4\te5\n2.\nNf3\nNc6 1-0"), None),
        "glued games": (
            game("1. e4 e5 1-0").rstrip() + '[Event "b"]\n[Result "0-1"]\n[Termination "Normal"]\n\n1. d4 d5 0-1\n\n',
            game("1. e4 e5 1-0").rstrip() + '\n\n[Event "b"]\n[Result "0-1"]\n[Termination "Normal"]\n\n1. d4 d5 0-1\n\n',
        ),
        "glued games with space and star": (
            game("1. e4 e5 *", result="*", term="Abandoned").rstrip() + ' [Event "b"]\n[Result "1-0"]\n'
            '[Termination "Normal"]\n\n1. c4 1-0\n\n',
            game("1. e4 e5 *", result="*", term="Abandoned").rstrip() + '\n\n[Event "b"]\n[Result "1-0"]\n'
            '[Termination "Normal"]\n\n1. c4 1-0\n\n',
        ),
        "no blank line before next game": (
            game("1. e4 e5 1-0").rstrip() + "\n" + game("1. d4 d5 0-1", result="0-1"),
            game("1. e4 e5 1-0") + game("1. d4 d5 0-1", result="0-1"),
        ),
        "illegal and ambiguous moves": (
            game("1. e4 e5 2. Ke3 Nc6 1-0") + game("1. Nf3 d5 2. d3 e5 3. Nd2 1-0")
            + game("1. e4 e5 2. Nf3 Nf6 3. Nxe5 1-0"),
            None,
        ),
        "null moves": (game("1. e4 -- 2. d4 1-0") + game("1. e4 Z0 1-0") + game("1. e4 0000 1-0"), None),
        "variant and set-up games": (
            game("1. e4 e5 1-0", head='[Variant "Chess960"]\n' + HEAD)
            + game("1. Kb1 1-0", head='[SetUp "1"]\n[FEN "8/8/8/8/8/8/8/K6k w - - 0 1"]\n' + HEAD),
            None,
        ),
    }
)


@pytest.mark.parametrize("name", list(CORPUS))
def test_dialect_corpus_matches_python_chess(name: str):
    text, oracle_text = CORPUS[name]
    assert_same_as_python_chess(text, oracle_text, name)


def test_issue_examples_give_the_expected_moves():
    """The three inputs of issue 9, checked against hand-written expectations as well."""
    p = parse_pgn(game("1. e4 e5 2. Nf3 ± Nc6 1-0"))
    assert p.uci == [["e2e4", "e7e5", "g1f3", "b8c6"]]
    p = parse_pgn(game(PROMO + "bxa8Q 1-0") + game(PROMO + "bxa8N 1-0"))
    assert [u[-1] for u in p.uci] == ["b7a8q", "b7a8n"]
    assert [int(p.tokens[i, 8]) for i in range(2)] == [1892, 1895]  # spec §1.3 anchors: b7a8q, +3 = n
    text, _ = CORPUS["glued games"]
    p = parse_pgn(text)
    assert p.headers["event"] == ["Rated Blitz game", "b"] and p.uci == [["e2e4", "e7e5"], ["d2d4", "d7d5"]]


def test_san_to_uci_reads_the_same_dialects():
    sans = ["e2-e4", "d5", "ed5", "Qd5", "Ng1-f3!?", "Bg4±", "Be2", "Nc6", "0-0", "0-0-0+/=", "c4", "Qe6TN"]
    g = chess.pgn.read_game(io.StringIO(" ".join(sans) + " *\n"))
    assert not g.errors
    assert san_to_uci([sans]) == [[m.uci() for m in g.mainline_moves()]]
    with pytest.raises(ValueError, match="malformed move \"Sf3\" at ply 1"):
        san_to_uci([["e4", "Sf3"]])


# name -> (text, what python-chess reads (UCIs, no errors), PAWN's skip (ply, reason) or kept UCIs)
DIVERGENCES = {
    # python-chess's scanner finds the square inside a piece letter it does not know and plays a
    # pawn move: a German (S = knight), lowercase or figurine knight move becomes f2f3.
    "german piece letter": (game("1. e4 e5 2. Sf3 1-0"), ["e2e4", "e7e5", "f2f3"], (2, "unreadable_move")),
    "lowercase piece letter": (game("1. e4 e5 2. nf3 1-0"), ["e2e4", "e7e5", "f2f3"], (2, "unreadable_move")),
    "figurine": (game("1. e4 e5 2. ♘f3 1-0"), ["e2e4", "e7e5", "f2f3"], (2, "unreadable_move")),
    # Spec §1.4: king-takes-rook is never castling input; python-chess reads e1h1 as O-O.
    "king takes rook": (
        game("1. e4 e5 2. Nf3 Nc6 3. Bc4 Bc5 4. e1h1 1-0"),
        ["e2e4", "e7e5", "g1f3", "b8c6", "f1c4", "f8c5", "e1g1"],
        (6, "illegal_move"),
    ),
    # A comment never closed: python-chess reads it to the end of the input; PAWN reports it.
    "unterminated comment": (game("1. e4 {oops e5 2. Nf3 1-0"), ["e2e4"], (1, "malformed")),
    # Spec §6.1: the first result token ends the main line; python-chess reads on.
    "moves after the result": (game("1. e4 1-0 e5"), ["e2e4", "e7e5"], ["e2e4"]),
}


@pytest.mark.parametrize("name", list(DIVERGENCES))
def test_documented_divergences_from_python_chess(name: str):
    text, pc_ucis, pawn = DIVERGENCES[name]
    g = chess.pgn.read_game(io.StringIO(text))
    assert [m.uci() for m in g.mainline_moves()] == pc_ucis and not g.errors
    p = parse_pgn(text)
    if isinstance(pawn, tuple):
        assert p.skipped == [(1, *pawn)]
    else:
        assert p.uci == [pawn]


def render_dialect(sans: list[str], rng: random.Random) -> str:
    """A game's SAN moves written in a random mix of the dialects above: move numbers with and
    without spaces or black's `...`, castling with zeros, promotion without `=`, check marks
    dropped, glyphs standalone or glued, comments, `;` comments, legal variations, line breaks,
    no-break spaces and tabs."""
    glued = ["!", "?", "!?", "?!", "!!", "??", "±", "+-", "∓", "⩲", "$1", "e.p.", "□", "Δ", "TN", "=", "=/+", "∞"]
    board, out = chess.Board(), []
    for i, san in enumerate(sans):
        n = i // 2 + 1
        if i % 2 == 0:
            out.append(rng.choice([f"{n}.", f"{n}. ", f"{n} "]))
        elif rng.random() < 0.2:
            out.append(rng.choice([f"{n}...", f"{n}... ", f"{n}. ... "]))
        alt = board.san(rng.choice(list(board.legal_moves)))
        variation = f"({n}{'.' if i % 2 == 0 else '...'} {alt} {{v}} $2) "
        board.push_san(san)
        if san.startswith("O-O") and rng.random() < 0.5:
            san = san.replace("O", "0")
        if "=" in san and rng.random() < 0.5:
            san = san.replace("=", "")
        if san[-1] in "+#" and rng.random() < 0.3:
            san = san[:-1]
        if rng.random() < 0.15:
            san += rng.choice(glued)
        out.append(san + " ")
        if rng.random() < 0.1:
            out.append(rng.choice(GLYPHS + ["e.p.", "{c}", "{ [%clk 0:01:02] }"]) + " ")
        if rng.random() < 0.05:
            out.append(rng.choice(["\n", "\u00a0", "\t", "; line comment\n", variation]))
    return "".join(out)


def test_real_games_in_random_dialects_match_python_chess(shared_data):
    path = shared_data / "lichess" / "lichess_db_2021-10-01_first1000_kdave-pgn-toys.pgn"
    games = []
    with open(path, encoding="utf-8") as f:
        while len(games) < 150 and (g := chess.pgn.read_game(f)) is not None:
            board, sans = g.board(), []
            for m in g.mainline_moves():
                sans.append(board.san(m))
                board.push(m)
            games.append((sans, g.headers["Result"], g.headers["Termination"]))
    rng = random.Random(9)
    text = "".join(game(render_dialect(s, rng) + r, result=r, term=t) for s, r, t in games)
    counts = assert_same_as_python_chess(text, name="dialects")
    assert counts["kept"] >= 140, counts
    crlf = text.replace("\n", "\r\n")
    assert assert_same_as_python_chess(crlf, name="dialects crlf") == counts


@pytest.mark.slow  # in `pytest -m slow` (CI runs it); keeps the default run under 15 min
def test_every_shared_lichess_file_matches_python_chess(lichess_pgns):
    total = 0
    for path in lichess_pgns:
        data = path.read_bytes()
        counts = assert_same_as_python_chess(data, data.decode("utf-8-sig", errors="replace"), path.name)
        total += counts["kept"]
    assert total > 7000  # the seven files hold 7,321 games, almost all kept


# --- issue 25: phantom games and draw spellings ----------------------------------------------------
def _python_chess_reading(text: str) -> list[tuple[str, list[str]]]:
    """(Event, main-line UCIs) of every game python-chess returns, phantom ones included."""
    f, out = io.StringIO(text), []
    while (g := chess.pgn.read_game(f)) is not None:
        out.append((g.headers.get("Event", "?"), [m.uci() for m in g.mainline_moves()]))
    return out


GOOD = game("1. e4 e5 2. Nf3 Nc6 1-0").replace("Rated Blitz game", "good")
BAD = game("1. e4 e5 2. Ke3 1-0").replace("Rated Blitz game", "bad")


@pytest.mark.parametrize("between", ["{ exported by a tool }\n\n", "\ufeff", "\n\ufeff", "\ufeff\n"])
def test_comment_only_span_and_mid_file_bom_are_not_games(between: str):
    """Two exports concatenated (a BOM between them) or a comment-only block: python-chess returns
    an extra empty game (or none) there; PAWN counts only the games in the file, so the bad game
    is reported as game 2 (it was game 3 when the phantom game was counted)."""
    text = GOOD + between + BAD
    pc = [g for g in _python_chess_reading(text) if g[1]]  # python-chess's games with moves
    p = parse_pgn(text.encode("utf-8"), max_ply=MAX_PLY, min_ply=0)
    assert p.counts["read"] == 2 and p.skipped == [(2, 2, "illegal_move")]
    assert p.uci == [pc[0][1]] and p.headers["event"] == ["good"]
    if between.startswith("{"):
        assert len(_python_chess_reading(text)) == 3  # python-chess: a phantom game with the comment


@pytest.mark.parametrize("tag, movetext", [("½-½", "½-½"), ("1/2", "1/2"), ("0.5-0.5", "0.5-0.5"),
                                           ("1/2-1/2", "0.5-0.5")])
def test_older_draw_spellings_are_draws(tag: str, movetext: str):
    text = game(f"1. e4 e5 2. Nf3 Nc6 {movetext}", result=tag)
    g = chess.pgn.read_game(io.StringIO(text))
    assert [m.uci() for m in g.mainline_moves()] == ["e2e4", "e7e5", "g1f3", "b8c6"]
    p = parse_pgn(text)
    assert p.uci == [["e2e4", "e7e5", "g1f3", "b8c6"]]
    assert int(p.outcome[0]) == vocab.DRAW_BY_AGREEMENT  # spec §6.3
    t = parse_pgn(game(f"1. e4 e5 {movetext}", result=tag, term="Time forfeit"))
    assert int(t.outcome[0]) == vocab.DRAW_BY_TIME


def test_pgngames_repr_is_python_style(tmp_path: Path):
    f = tmp_path / "games.pgn"
    f.write_text(GOOD)
    assert repr(parse_pgn(f)) == f"PgnGames(n=1, path={str(f)!r})"
    assert repr(parse_pgn(GOOD)) == "PgnGames(n=1, path=None)"
