//! PGN and UCI bindings (spec §6): parse files or bytes into NumPy arrays, convert move lists.
//! All parsing runs with the GIL released.

use numpy::ndarray::{Array1, Array2};
use numpy::IntoPyArray;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use super::common::game_batch;
use crate::pgn::{self, PgnBatch, SkipReason, Skipped};
use crate::uci::{self, MoveError};
use crate::vocab;

/// `(tokens int16 [N, T], lengths int16 [N])` as NumPy arrays.
type TokenArrays<'py> = (Bound<'py, numpy::PyArray2<i16>>, Bound<'py, numpy::PyArray1<i16>>);
/// A per-game move-list conversion returning the moves done and the first error.
type MoveConvert = fn(&[String]) -> (Vec<String>, Option<MoveError>);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_pgn_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(parse_pgn_path, m)?)?;
    m.add_function(wrap_pyfunction!(parse_uci_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(uci_to_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(tokens_to_uci, m)?)?;
    m.add_function(wrap_pyfunction!(tokens_to_san, m)?)?;
    m.add_function(wrap_pyfunction!(uci_to_san, m)?)?;
    m.add_function(wrap_pyfunction!(san_to_uci, m)?)?;
    Ok(())
}

fn check_plies(max_ply: i64, min_ply: i64) -> PyResult<(usize, usize)> {
    if !(1..=i16::MAX as i64).contains(&max_ply) {
        return Err(PyValueError::new_err(format!("max_ply must be in 1..=32767, got {max_ply}")));
    }
    if !(0..=max_ply).contains(&min_ply) {
        return Err(PyValueError::new_err(format!("min_ply must be in 0..=max_ply ({max_ply}), got {min_ply}")));
    }
    Ok((max_ply as usize, min_ply as usize))
}

fn read_file(py: Python<'_>, path: &str) -> PyResult<Vec<u8>> {
    py.detach(|| std::fs::read(path)).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(format!("no such file: {path}")),
        _ => PyOSError::new_err(format!("cannot read {path}: {e}")),
    })
}

fn skipped_list<'py>(py: Python<'py>, skipped: &[Skipped]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, skipped.iter().map(|s| (s.game, s.ply, s.reason.name())))
}

fn counts_dict<'py>(py: Python<'py>, n_read: usize, kept: usize, skipped: &[Skipped]) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("read", n_read)?;
    d.set_item("kept", kept)?;
    for r in SkipReason::ALL {
        d.set_item(r.name(), skipped.iter().filter(|s| s.reason == r).count())?;
    }
    Ok(d)
}

/// Space-joined UCI of move tokens (non-move ids are left out).
fn join_uci(tokens: &[u16]) -> String {
    let mut s = String::with_capacity(tokens.len() * 5);
    for a in tokens.iter().filter_map(|&t| vocab::decompose(t)) {
        if !s.is_empty() {
            s.push(' ');
        }
        for sq in [a.src, a.dst] {
            s.push((b'a' + sq % 8) as char);
            s.push((b'1' + sq / 8) as char);
        }
        if a.promo > 0 {
            s.push(['q', 'r', 'b', 'n'][(a.promo - 1) as usize]);
        }
    }
    s
}

/// Space-joined SAN.
fn join_san(san: &[pgn_reader::SanPlus]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(san.len() * 5);
    for (i, x) in san.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{x}");
    }
    s
}

fn batch_to_dict<'py>(py: Python<'py>, b: PgnBatch, max_ply: usize) -> PyResult<Bound<'py, PyDict>> {
    let n = b.games.len();
    let mut tokens = Array2::<i16>::from_elem((n, max_ply), vocab::PAD_TOKEN as i16);
    let mut clocks = Array2::<u16>::zeros((n, max_ply));
    let mut evals = Array2::<i16>::zeros((n, max_ply));
    for (i, g) in b.games.iter().enumerate() {
        for (j, &t) in g.tokens.iter().enumerate() {
            tokens[[i, j]] = t as i16;
            clocks[[i, j]] = g.clocks[j];
            evals[[i, j]] = g.evals[j];
        }
    }
    let col = |f: &dyn Fn(&pgn::Game) -> i64| -> Vec<i64> { b.games.iter().map(f).collect() };
    let d = PyDict::new(py);
    d.set_item("tokens", tokens.into_pyarray(py))?;
    d.set_item("clocks", clocks.into_pyarray(py))?;
    d.set_item("evals", evals.into_pyarray(py))?;
    let lengths: Array1<i16> = b.games.iter().map(|g| g.tokens.len() as i16).collect();
    d.set_item("lengths", lengths.into_pyarray(py))?;
    let outcome: Array1<i16> = b.games.iter().map(|g| g.outcome as i16).collect();
    d.set_item("outcome", outcome.into_pyarray(py))?;
    let we: Array1<u16> = b.games.iter().map(|g| g.headers.white_elo).collect();
    d.set_item("white_elo", we.into_pyarray(py))?;
    let be: Array1<u16> = b.games.iter().map(|g| g.headers.black_elo).collect();
    d.set_item("black_elo", be.into_pyarray(py))?;
    d.set_item("game_index", Array1::from(col(&|g| g.index as i64)).into_pyarray(py))?;
    d.set_item("full_length", Array1::from(col(&|g| g.full_length as i64)).into_pyarray(py))?;
    let (san, uci): (Vec<String>, Vec<String>) = py.detach(|| {
        use rayon::prelude::*;
        b.games.par_iter().map(|g| (join_san(&g.san), join_uci(&g.tokens))).unzip()
    });
    d.set_item("san_joined", san)?;
    d.set_item("uci_joined", uci)?;
    let headers = PyDict::new(py);
    type Getter = fn(&pgn::Headers) -> &str;
    let fields: [(&str, Getter); 12] = [
        ("event", |h| &h.event),
        ("site", |h| &h.site),
        ("date", |h| &h.date),
        ("utc_date", |h| &h.utc_date),
        ("utc_time", |h| &h.utc_time),
        ("white", |h| &h.white),
        ("black", |h| &h.black),
        ("result", |h| &h.result),
        ("termination", |h| &h.termination),
        ("time_control", |h| &h.time_control),
        ("eco", |h| &h.eco),
        ("opening", |h| &h.opening),
    ];
    for (name, get) in fields {
        headers.set_item(name, b.games.iter().map(|g| get(&g.headers)).collect::<Vec<_>>())?;
    }
    d.set_item("headers", headers)?;
    d.set_item("skipped", skipped_list(py, &b.skipped)?)?;
    d.set_item("counts", counts_dict(py, b.n_read, n, &b.skipped)?)?;
    Ok(d)
}

/// Parse PGN bytes (spec §6.1–§6.4). Returns a dict: `tokens` int16 [N, max_ply] PAD-filled,
/// `lengths` int16 [N], `outcome` int16 [N], `white_elo`/`black_elo` uint16 [N], `clocks`
/// uint16 and `evals` int16 [N, max_ply] (sentinels inside a game, 0 beyond), `game_index` and
/// `full_length` int64 [N], `san_joined`/`uci_joined` (one space-joined string per game),
/// `headers` (dict of string columns), `skipped` [(game, ply, reason)] and `counts`.
/// Raises ValueError for max_ply outside 1..=32767 or min_ply outside 0..=max_ply.
#[pyfunction]
#[pyo3(signature = (data, max_ply=512, min_ply=1))]
fn parse_pgn_bytes<'py>(py: Python<'py>, data: &[u8], max_ply: i64, min_ply: i64) -> PyResult<Bound<'py, PyDict>> {
    let (max_ply, min_ply) = check_plies(max_ply, min_ply)?;
    let batch = py.detach(|| pgn::parse_pgn(data, max_ply, min_ply));
    batch_to_dict(py, batch, max_ply)
}

/// As `parse_pgn_bytes`, reading the file at `path` (FileNotFoundError naming it if missing).
#[pyfunction]
#[pyo3(signature = (path, max_ply=512, min_ply=1))]
fn parse_pgn_path<'py>(py: Python<'py>, path: &str, max_ply: i64, min_ply: i64) -> PyResult<Bound<'py, PyDict>> {
    let (max_ply, min_ply) = check_plies(max_ply, min_ply)?;
    let data = read_file(py, path)?;
    let batch = py.detach(|| pgn::parse_pgn(&data, max_ply, min_ply));
    batch_to_dict(py, batch, max_ply)
}

fn game_error(game: usize, e: &MoveError) -> PyErr {
    PyValueError::new_err(format!("game {game}: {e}"))
}

/// Parse a UCI file's bytes (spec §6.7): one game per non-empty line, whitespace-separated
/// moves, a trailing result token dropped. Returns a dict: `tokens` int16 [N, max_ply]
/// PAD-filled, `lengths` int16 [N], `uci_joined`, `game_index` int64 [N] (1-based number of the
/// non-empty line), `skipped` [(game, ply, reason)] and `counts`. Games with a bad move are
/// skipped (`illegal_move` / `unreadable_move`), longer games truncated to max_ply, games with
/// fewer than min_ply moves skipped (`too_short`).
#[pyfunction]
#[pyo3(signature = (data, max_ply=512, min_ply=1))]
fn parse_uci_bytes<'py>(py: Python<'py>, data: &[u8], max_ply: i64, min_ply: i64) -> PyResult<Bound<'py, PyDict>> {
    use rayon::prelude::*;
    let (max_ply, min_ply) = check_plies(max_ply, min_ply)?;
    let (n_read, rows, skipped) = py.detach(|| {
        // A UTF-8 BOM would otherwise stick to the first move and make game 1 unreadable.
        let text = pgn::decode_text(data.strip_prefix(b"\xef\xbb\xbf").unwrap_or(data));
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let results: Vec<Result<Vec<u16>, Skipped>> = lines
            .par_iter()
            .enumerate()
            .map(|(i, line)| {
                let moves = uci::parse_uci_line(line);
                let (tokens, err) = uci::uci_game_to_tokens(&moves, max_ply);
                let game = i + 1;
                match err {
                    Some(e) => Err(Skipped {
                        game,
                        ply: e.ply,
                        reason: if e.malformed { SkipReason::UnreadableMove } else { SkipReason::IllegalMove },
                    }),
                    None if moves.len() < min_ply => Err(Skipped { game, ply: moves.len(), reason: SkipReason::TooShort }),
                    None => Ok(tokens),
                }
            })
            .collect();
        let mut rows = Vec::new();
        let mut skipped = Vec::new();
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(t) => rows.push((i + 1, t)),
                Err(s) => skipped.push(s),
            }
        }
        (lines.len(), rows, skipped)
    });
    let n = rows.len();
    let mut tokens = Array2::<i16>::from_elem((n, max_ply), vocab::PAD_TOKEN as i16);
    for (i, (_, t)) in rows.iter().enumerate() {
        for (j, &tok) in t.iter().enumerate() {
            tokens[[i, j]] = tok as i16;
        }
    }
    let d = PyDict::new(py);
    d.set_item("tokens", tokens.into_pyarray(py))?;
    let lengths: Array1<i16> = rows.iter().map(|(_, t)| t.len() as i16).collect();
    d.set_item("lengths", lengths.into_pyarray(py))?;
    let idx: Array1<i64> = rows.iter().map(|(g, _)| *g as i64).collect();
    d.set_item("game_index", idx.into_pyarray(py))?;
    let uci: Vec<String> = rows
        .iter()
        .map(|(_, t)| join_uci(t))
        .collect();
    d.set_item("uci_joined", uci)?;
    d.set_item("skipped", skipped_list(py, &skipped)?)?;
    d.set_item("counts", counts_dict(py, n_read, n, &skipped)?)?;
    Ok(d)
}

/// UCI games → `(tokens int16 [N, max_ply] PAD-filled, lengths int16 [N])` (spec §6.7, §1.4).
/// `on_error="raise"` raises ValueError naming the game (0-based index) and ply of the first
/// malformed or illegal move; `"truncate"` keeps the moves before it. Games longer than
/// max_ply are cut at max_ply (moves past it are still checked).
#[pyfunction]
#[pyo3(signature = (games, max_ply=512, on_error="raise"))]
fn uci_to_tokens<'py>(
    py: Python<'py>,
    games: Vec<Vec<String>>,
    max_ply: i64,
    on_error: &str,
) -> PyResult<TokenArrays<'py>> {
    let (max_ply, _) = check_plies(max_ply, 0)?;
    let raise = match on_error {
        "raise" => true,
        "truncate" => false,
        other => return Err(PyValueError::new_err(format!("on_error must be 'raise' or 'truncate', got {other:?}"))),
    };
    let results = py.detach(|| {
        use rayon::prelude::*;
        games.par_iter().map(|g| uci::uci_game_to_tokens(g, max_ply)).collect::<Vec<_>>()
    });
    let n = results.len();
    let mut tokens = Array2::<i16>::from_elem((n, max_ply), vocab::PAD_TOKEN as i16);
    let mut lengths = Array1::<i16>::zeros(n);
    for (i, (t, err)) in results.iter().enumerate() {
        if let (true, Some(e)) = (raise, err) {
            return Err(game_error(i, e));
        }
        for (j, &tok) in t.iter().enumerate() {
            tokens[[i, j]] = tok as i16;
        }
        lengths[i] = t.len() as i16;
    }
    Ok((tokens.into_pyarray(py), lengths.into_pyarray(py)))
}

/// `(tokens int16 [B, T], lengths int16 [B])` → UCI lists. No legality check; a non-move
/// token (PAD, outcome, out of range) within a game's length raises ValueError naming it.
#[pyfunction]
fn tokens_to_uci(tokens: &Bound<'_, PyAny>, lengths: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<String>>> {
    let b = game_batch(tokens, lengths)?;
    (0..b.n_games)
        .map(|g| {
            b.game(g)
                .iter()
                .enumerate()
                .map(|(ply, &t)| {
                    vocab::token_to_uci(t).ok_or_else(|| {
                        PyValueError::new_err(format!("game {g}: token {} at ply {ply} is not a move", t as i16))
                    })
                })
                .collect()
        })
        .collect()
}

/// `(tokens int16 [B, T], lengths int16 [B])` → SAN lists (`+`/`#`, `O-O`, `e8=Q`, minimal
/// disambiguation). Raises ValueError naming game and ply of a token that is not legal.
#[pyfunction]
fn tokens_to_san(py: Python<'_>, tokens: &Bound<'_, PyAny>, lengths: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<String>>> {
    let b = game_batch(tokens, lengths)?;
    let out = py.detach(|| {
        use rayon::prelude::*;
        (0..b.n_games).into_par_iter().map(|g| uci::tokens_to_san(b.game(g))).collect::<Vec<_>>()
    });
    out.into_iter()
        .enumerate()
        .map(|(g, (san, err))| match err {
            Some(e) => Err(game_error(g, &e)),
            None => Ok(san),
        })
        .collect()
}

fn convert_games(
    py: Python<'_>,
    games: Vec<Vec<String>>,
    f: MoveConvert,
) -> PyResult<Vec<Vec<String>>> {
    let out = py.detach(|| {
        use rayon::prelude::*;
        games.par_iter().map(|g| f(g)).collect::<Vec<_>>()
    });
    out.into_iter()
        .enumerate()
        .map(|(g, (moves, err))| match err {
            Some(e) => Err(game_error(g, &e)),
            None => Ok(moves),
        })
        .collect()
}

/// UCI lists → SAN lists. Raises ValueError naming game and ply of a bad move.
#[pyfunction]
fn uci_to_san(py: Python<'_>, games: Vec<Vec<String>>) -> PyResult<Vec<Vec<String>>> {
    convert_games(py, games, uci::uci_game_to_san)
}

/// SAN lists → UCI lists (castling as `e1g1`). Raises ValueError naming game and ply.
#[pyfunction]
fn san_to_uci(py: Python<'_>, games: Vec<Vec<String>>) -> PyResult<Vec<Vec<String>>> {
    convert_games(py, games, uci::san_game_to_uci)
}
