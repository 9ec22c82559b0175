//! The legal move a SAN names in a position ([`san_to_move`]), with python-chess's leniency,
//! mostly without generating the move list.

use shakmaty::san::San;
use shakmaty::{attacks, Bitboard, Chess, Color, File, Move, Position, Role, Square};

/// The legal move a SAN names, with python-chess's leniency: the capture mark is not checked
/// (`Nxf3` to an empty square, `ed5` for `exd5`), a pawn move without a file stays on its file,
/// and a move given by both squares without a piece letter (`g1f3`, `e1g1`, `e2e4`) may be any
/// piece's (castling as the king's two-square move). `None` if no move or more than one
/// matches.
pub fn san_to_move(pos: &Chess, san: &San) -> Option<Move> {
    if let San::Castle(side) = *san {
        return pos.castling_moves(side).first().copied();
    }
    // Where a move other than the king's may end: anywhere when not in check; on the checking
    // piece or between it and the king in a single check; nowhere in a double check.
    let checkers = pos.checkers();
    let targets = match checkers.single_square() {
        _ if checkers.is_empty() => Bitboard::FULL,
        Some(c) => attacks::between(pos.board().king_of(pos.turn())?, c).with(c),
        None => Bitboard::EMPTY,
    };
    match *san {
        San::Castle(_) => None,
        San::Normal { role: Role::Pawn, file: Some(f), rank: Some(r), to, promotion, .. } => {
            let from = Square::from_coords(f, r);
            let dest = |m: &Move| match *m {
                Move::Castle { king, rook } => Square::from_coords(
                    if rook > king { File::G } else { File::C },
                    king.rank(),
                ),
                _ => m.to(),
            };
            pos.legal_moves().into_iter().find(|m| m.from() == Some(from) && dest(m) == to && m.promotion() == promotion)
        }
        // A pawn push or capture, without generating the move list (en passant and anything
        // unusual take the general path below). In check it must capture or block the checker.
        San::Normal { role: Role::Pawn, file, rank, to, promotion, .. } => {
            if let Some(m) = pawn_move(pos, file, rank, to, promotion) {
                return m.filter(|_| targets.contains(to));
            }
            general_san_to_move(pos, san)
        }
        // The common case, without generating the move list: a piece move (not king or pawn)
        // is legal unless it uncovers a slider's attack on the own king; in check it must also
        // capture or block the checker.
        San::Normal { role, file, rank, to, promotion: None, .. } if !matches!(role, Role::Pawn | Role::King) => {
            let board = pos.board();
            if pos.us().contains(to) || !targets.contains(to) {
                return None;
            }
            let occ = board.occupied();
            let reach = match role {
                Role::Knight => attacks::knight_attacks(to),
                Role::Bishop => attacks::bishop_attacks(to, occ),
                Role::Rook => attacks::rook_attacks(to, occ),
                _ => attacks::queen_attacks(to, occ),
            };
            let mut found = None;
            for from in reach & pos.our(role) {
                if file.is_some_and(|f| f != from.file()) || rank.is_some_and(|r| r != from.rank()) {
                    continue;
                }
                if uncovers_king(pos, from, to) {
                    continue;
                }
                if found.is_some() {
                    return None; // ambiguous
                }
                found = Some(Move::Normal { role, from, capture: board.role_at(to), to, promotion: None });
            }
            found
        }
        // A king step: legal unless the target square is attacked (with the king gone from its
        // square, so a checking slider's ray through it counts).
        San::Normal { role: Role::King, file, rank, to, promotion: None, .. } => {
            let board = pos.board();
            let from = (board.kings() & pos.us()).first()?;
            if !attacks::king_attacks(from).contains(to)
                || pos.us().contains(to)
                || file.is_some_and(|f| f != from.file())
                || rank.is_some_and(|r| r != from.rank())
                || board.attacks_to(to, !pos.turn(), board.occupied().without(from)).any()
            {
                return None;
            }
            Some(Move::Normal { role: Role::King, from, capture: board.role_at(to), to, promotion: None })
        }
        San::Normal { .. } => general_san_to_move(pos, san),
        San::Put { .. } | San::Null => None,
    }
}

/// Whether moving a piece `from` → `to` (capturing what stands on `to`) leaves the own king
/// attacked by a slider; only valid for a piece other than the king when the side to move is
/// not in check, or when `to` captures or blocks the single checker (then only a discovered
/// slider attack can arise).
fn uncovers_king(pos: &Chess, from: Square, to: Square) -> bool {
    let board = pos.board();
    let Some(king) = board.king_of(pos.turn()) else { return true };
    let after = board.occupied().without(from).with(to);
    let diag = (board.bishops() | board.queens()) & pos.them();
    let line = (board.rooks() | board.queens()) & pos.them();
    ((attacks::bishop_attacks(king, after) & diag) | (attacks::rook_attacks(king, after) & line)).without(to).any()
}

/// The pawn move a SAN names, assuming it answers any check (see [`uncovers_king`]): `Some(Some(m))` legal, `Some(None)` no legal
/// move, `None` let the general path decide (en passant, a capture onto an empty square).
fn pawn_move(pos: &Chess, file: Option<File>, rank: Option<shakmaty::Rank>, to: Square, promotion: Option<Role>) -> Option<Option<Move>> {
    let white = pos.turn() == Color::White;
    let last = if white { shakmaty::Rank::Eighth } else { shakmaty::Rank::First };
    match promotion {
        None if to.rank() == last => return Some(None),
        Some(Role::Pawn | Role::King) => return Some(None),
        Some(_) if to.rank() != last => return Some(None),
        _ => {}
    }
    let back = |sq: Square| sq.offset(if white { -8 } else { 8 });
    let ours = pos.our(Role::Pawn);
    let occ = pos.board().occupied();
    let from = if file.is_none_or(|f| f == to.file()) {
        if occ.contains(to) {
            return Some(None);
        }
        let one = back(to)?;
        if ours.contains(one) {
            one
        } else {
            let double = if white { shakmaty::Rank::Fourth } else { shakmaty::Rank::Fifth };
            let two = back(one)?;
            if to.rank() != double || occ.contains(one) || !ours.contains(two) {
                return Some(None);
            }
            two
        }
    } else {
        let f = file?;
        if (f as i32 - to.file() as i32).abs() != 1 || !pos.them().contains(to) {
            return None; // en passant or illegal: the general path
        }
        let from = Square::from_coords(f, back(to)?.rank());
        if !ours.contains(from) {
            return Some(None);
        }
        from
    };
    if rank.is_some_and(|r| r != from.rank()) {
        return Some(None);
    }
    if uncovers_king(pos, from, to) {
        return Some(None);
    }
    Some(Some(Move::Normal { role: Role::Pawn, from, capture: pos.board().role_at(to), to, promotion }))
}

/// [`san_to_move`] by shakmaty's candidate list (any position).
fn general_san_to_move(pos: &Chess, san: &San) -> Option<Move> {
    match *san {
        San::Normal { role, file, rank, to, promotion, .. } => {
            let mut found = None;
            for m in pos.san_candidates(role, to) {
                let (from, p) = match m {
                    Move::Normal { from, promotion: p, .. } => (from, p),
                    Move::EnPassant { from, .. } => (from, None),
                    _ => continue,
                };
                let file_ok = match file {
                    Some(f) => f == from.file(),
                    None => role != Role::Pawn || from.file() == to.file(),
                };
                if file_ok && rank.is_none_or(|r| r == from.rank()) && p == promotion {
                    if found.is_some() {
                        return None; // ambiguous
                    }
                    found = Some(m);
                }
            }
            found
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgn::testing::{one, ucis, HEAD};
    use crate::pgn::{SkipReason, Skipped};
    use proptest::prelude::*;

    #[test]
    fn long_algebraic_and_lenient_capture_marks() {
        let g = one(&format!("{HEAD}1. e2-e4 e7-e5 2. Ng1-f3 Nb8xc6 3. Bf1c4 g8f6 4. e1g1 Nf6xe4 5. ed5 1-0\n"));
        // 5. ed5 is not legal here (no pawn on d5): the game is skipped at that ply.
        assert_eq!(g.unwrap_err(), Skipped { game: 1, ply: 8, reason: SkipReason::IllegalMove });
        let g = one(&format!("{HEAD}1. e2-e4 d7d5 2. ed5 Qd5 3. Nc3 Qxd8 4. Nf3 Nxf6 5. Bc4 Nc6 6. e1g1 1-0\n")).unwrap();
        assert_eq!(ucis(&g), ["e2e4", "d7d5", "e4d5", "d8d5", "b1c3", "d5d8", "g1f3", "g8f6", "f1c4", "b8c6", "e1g1"]);
        // Without a file a pawn move stays on its file, as in python-chess: `d5` is not `exd5`.
        let s = one(&format!("{HEAD}1. e4 d5 2. d5 1-0\n")).unwrap_err();
        assert_eq!((s.ply, s.reason), (2, SkipReason::IllegalMove));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn fast_san_paths_agree_with_shakmaty_candidates(picks in proptest::collection::vec(any::<prop::sample::Index>(), 1..120)) {
            // Along a random legal game, every SAN a piece, pawn or king could be given (each
            // role to each square, with and without a file or rank) resolves to the same move
            // (or none) by the fast paths as by shakmaty's candidate list.
            let mut pos = Chess::default();
            for pick in picks {
                for role in [Role::Pawn, Role::Knight, Role::Bishop, Role::Rook, Role::Queen, Role::King] {
                    for to in Square::ALL {
                        for (file, rank) in [(None, None), (Some(File::E), None), (None, Some(shakmaty::Rank::Second))] {
                            let san = San::Normal { role, file, rank, capture: false, to, promotion: None };
                            prop_assert_eq!(san_to_move(&pos, &san), general_san_to_move(&pos, &san), "{:?} in {}", san,
                                shakmaty::fen::Fen::from_position(&pos, shakmaty::EnPassantMode::Legal));
                        }
                    }
                }
                let moves = pos.legal_moves();
                if moves.is_empty() {
                    break;
                }
                pos.play_unchecked(moves[pick.index(moves.len())]);
            }
        }
    }
}
