//! PGN and UCI bindings (spec §6): parse files or bytes into NumPy arrays, convert move lists.
//! All parsing runs with the GIL released.

use numpy::ndarray::{Array1, Array2};
use numpy::IntoPyArray;
use numpy::{PyArray1, PyArray2};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};

use super::common::{as_dict, game_batch, item};
use super::error::arg_err;
use crate::error::EngineError;
use crate::game::IllegalToken;
use crate::pgn::{self, PgnBatch, SkipReason, Skipped};
use pgn_reader::SanPlus;
use crate::uci::{self, MoveError, UciBatch};
use crate::vocab;

/// `(tokens int16 [N, T], lengths int16 [N])` as NumPy arrays.
type TokenArrays<'py> = (Bound<'py, numpy::PyArray2<i16>>, Bound<'py, numpy::PyArray1<i16>>);
/// A per-game move-list conversion returning the moves done and the first error.
type MoveConvert = fn(&[String]) -> (Vec<String>, Option<MoveError>);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(parse_pgn_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(parse_pgn_path, m)?)?;
    m.add_function(wrap_pyfunction!(parse_uci_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(parse_uci_path, m)?)?;
    m.add_class::<PgnGames>()?;
    m.add_class::<UciGames>()?;
    m.add("SKIP_REASONS", SkipReason::ALL.map(|r| r.name()).to_vec())?;
    let parse_faults: Vec<&str> = SkipReason::ALL.iter().filter(|r| r.is_parse_fault()).map(|r| r.name()).collect();
    m.add("PARSE_SKIP_REASONS", parse_faults)?;
    let text = PyDict::new(m.py());
    for r in SkipReason::ALL {
        text.set_item(r.name(), r.describe())?;
    }
    m.add("SKIP_REASON_TEXT", text)?;
    m.add("PARSER_VERSION", pgn::PARSER_VERSION)?;
    m.add("CLOCK_MISSING", pgn::CLOCK_MISSING)?;
    m.add("EVAL_MISSING", pgn::EVAL_MISSING)?;
    m.add_function(wrap_pyfunction!(uci_to_tokens, m)?)?;
    m.add_function(wrap_pyfunction!(tokens_to_uci, m)?)?;
    m.add_function(wrap_pyfunction!(tokens_to_san, m)?)?;
    m.add_function(wrap_pyfunction!(uci_to_san, m)?)?;
    m.add_function(wrap_pyfunction!(san_to_uci, m)?)?;
    Ok(())
}

fn check_plies(max_ply: i64, min_ply: i64) -> PyResult<(usize, usize)> {
    if !(1..=i16::MAX as i64).contains(&max_ply) {
        return Err(arg_err(format!("max_ply must be in 1..=32767, got {max_ply}")));
    }
    if !(0..=max_ply).contains(&min_ply) {
        return Err(arg_err(format!("min_ply must be in 0..=max_ply ({max_ply}), got {min_ply}")));
    }
    Ok((max_ply as usize, min_ply as usize))
}

fn read_file(py: Python<'_>, path: &str) -> PyResult<Vec<u8>> {
    Ok(py.detach(|| std::fs::read(path)).map_err(|e| EngineError::io(path, &e))?)
}

fn skipped_list(py: Python<'_>, skipped: &[Skipped]) -> PyResult<Py<PyList>> {
    Ok(PyList::new(py, skipped.iter().map(|s| (s.game, s.ply, s.reason.name())))?.unbind())
}

fn counts_dict(py: Python<'_>, n_read: usize, kept: usize, skipped: &[Skipped]) -> PyResult<Py<PyDict>> {
    let d = PyDict::new(py);
    d.set_item("read", n_read)?;
    d.set_item("kept", kept)?;
    for r in SkipReason::ALL {
        d.set_item(r.name(), skipped.iter().filter(|s| s.reason == r).count())?;
    }
    Ok(d.unbind())
}

/// `pathlib.Path(path)`, or None.
fn as_path(py: Python<'_>, path: &Option<String>) -> PyResult<Py<PyAny>> {
    match path {
        Some(p) => Ok(py.import("pathlib")?.getattr("Path")?.call1((p,))?.unbind()),
        None => Ok(py.None()),
    }
}

/// Each space-joined string split into a list of moves, built once.
fn split_once<'py>(py: Python<'py>, cell: &PyOnceLock<Py<PyList>>, joined: &[String]) -> PyResult<Bound<'py, PyList>> {
    let list = cell.get_or_try_init(py, || -> PyResult<Py<PyList>> {
        let rows = joined.iter().map(|s| s.split_whitespace().collect::<Vec<_>>());
        Ok(PyList::new(py, rows)?.unbind())
    })?;
    Ok(list.bind(py).clone())
}

/// A list of move-string lists, one per game, built on first access (most callers read only
/// the token arrays, so the strings are not made for them).
fn moves_once<'py, T: Sync>(
    py: Python<'py>,
    cell: &PyOnceLock<Py<PyList>>,
    games: &[T],
    fmt: fn(&T) -> Vec<String>,
) -> PyResult<Bound<'py, PyList>> {
    let list = cell.get_or_try_init(py, || -> PyResult<Py<PyList>> {
        let rows: Vec<Vec<String>> = py.detach(|| {
            use rayon::prelude::*;
            games.par_iter().map(fmt).collect()
        });
        Ok(PyList::new(py, rows)?.unbind())
    })?;
    Ok(list.bind(py).clone())
}

fn san_strings(g: &Vec<SanPlus>) -> Vec<String> {
    g.iter().map(|s| s.to_string()).collect()
}

fn uci_strings(g: &Vec<u16>) -> Vec<String> {
    g.iter().filter_map(|&t| vocab::token_to_uci(t)).collect()
}

/// Row i of an [n, width] array filled by `fill(i, row)` in parallel (so the pages are first
/// touched by the threads that fill them).
fn par_rows<T: Copy + Send + Sync>(n: usize, width: usize, init: T, fill: impl Fn(usize, &mut [T]) + Sync) -> Array2<T> {
    use rayon::prelude::*;
    let mut v: Vec<T> = Vec::with_capacity(n * width);
    v.spare_capacity_mut().par_chunks_mut(width.max(1)).enumerate().for_each(|(i, row)| {
        row.iter_mut().for_each(|x| {
            x.write(init);
        });
        // SAFETY: every element of `row` was initialised just above.
        let row = unsafe { &mut *(row as *mut [std::mem::MaybeUninit<T>] as *mut [T]) };
        fill(i, row);
    });
    // SAFETY: the n·width elements were all initialised by the loop above.
    unsafe { v.set_len(n * width) };
    Array2::from_shape_vec((n, width), v).expect("n·width elements")
}

/// The [N, width] array of `rows` (each ≤ width long, zero after it), built on first access.
fn padded_once<'py, T: numpy::Element + Copy + Default + Send + Sync>(
    py: Python<'py>,
    cell: &PyOnceLock<Py<PyArray2<T>>>,
    rows: &[Vec<T>],
    width: usize,
) -> Bound<'py, PyArray2<T>> {
    cell.get_or_init(py, || {
        let a = py.detach(|| par_rows(rows.len(), width, T::default(), |i, row| row[..rows[i].len()].copy_from_slice(&rows[i])));
        a.into_pyarray(py).unbind()
    })
    .bind(py)
    .clone()
}

/// A PAD-filled int16 [N, max_ply] array of token rows.
fn token_matrix<'a>(rows: impl ExactSizeIterator<Item = &'a [u16]>, max_ply: usize) -> Array2<i16> {
    let mut tokens = Array2::<i16>::from_elem((rows.len(), max_ply), vocab::PAD_TOKEN as i16);
    for (i, t) in rows.enumerate() {
        for (j, &tok) in t.iter().enumerate() {
            tokens[[i, j]] = tok as i16;
        }
    }
    tokens
}

/// The header columns of `PgnGames.headers`, in order.
const HEADER_COLUMNS: [(&str, pgn::Tag); 12] = [
    ("event", pgn::Tag::Event),
    ("site", pgn::Tag::Site),
    ("date", pgn::Tag::Date),
    ("utc_date", pgn::Tag::UtcDate),
    ("utc_time", pgn::Tag::UtcTime),
    ("white", pgn::Tag::White),
    ("black", pgn::Tag::Black),
    ("result", pgn::Tag::Result),
    ("termination", pgn::Tag::Termination),
    ("time_control", pgn::Tag::TimeControl),
    ("eco", pgn::Tag::Eco),
    ("opening", pgn::Tag::Opening),
];

const PGN_FIELDS: [&str; 15] = [
    "tokens", "lengths", "outcome", "white_elo", "black_elo", "clocks", "evals", "game_index", "full_length",
    "headers", "skipped", "counts", "path", "san", "uci",
];

/// Games parsed from one PGN input, in file order (N kept games, T = `max_ply`); spec §6.1–§6.4.
/// Returned by `parse_pgn`; read-only. `record["tokens"]` and `to_dict()` give dict-style access.
#[pyclass(name = "PgnGames", module = "pawn._engine", frozen)]
pub struct PgnGames {
    /// int16 [N, T] move tokens, PAD (1968) after each game's length.
    #[pyo3(get)]
    tokens: Py<PyArray2<i16>>,
    /// int16 [N] plies kept (≤ T; a longer game is truncated and gets outcome 1973).
    #[pyo3(get)]
    lengths: Py<PyArray1<i16>>,
    /// int16 [N] outcome token per spec §6.3.
    #[pyo3(get)]
    outcome: Py<PyArray1<i16>>,
    /// uint16 [N], 0 when missing.
    #[pyo3(get)]
    white_elo: Py<PyArray1<u16>>,
    /// uint16 [N], 0 when missing.
    #[pyo3(get)]
    black_elo: Py<PyArray1<u16>>,
    /// Clocks and evals of each kept move; the padded arrays are built on first access (the
    /// Lichess cache build reads neither).
    game_clocks: Vec<Vec<u16>>,
    game_evals: Vec<Vec<i16>>,
    clocks: PyOnceLock<Py<PyArray2<u16>>>,
    evals: PyOnceLock<Py<PyArray2<i16>>>,
    max_ply: usize,
    /// int64 [N] 1-based number in the input of each kept game.
    #[pyo3(get)]
    game_index: Py<PyArray1<i64>>,
    /// int64 [N] plies of the whole game before truncation.
    #[pyo3(get)]
    full_length: Py<PyArray1<i64>>,
    /// The header values of each kept game; the `headers` dict is built on first access.
    game_headers: Vec<pgn::Headers>,
    headers: PyOnceLock<Py<PyDict>>,
    /// (game number, ply, reason) per skipped game; reasons in `SKIP_REASONS`.
    #[pyo3(get)]
    skipped: Py<PyList>,
    /// `read`, `kept` and one count per skip reason.
    #[pyo3(get)]
    counts: Py<PyDict>,
    /// Whether the input reads as PGN: no NUL byte in its first 64 KiB, and it is blank or
    /// some game has a tag pair or a readable move (False for a JSON or binary file).
    #[pyo3(get)]
    looks_like_pgn: bool,
    path: Option<String>,
    game_san: Vec<Vec<SanPlus>>,
    game_tokens: Vec<Vec<u16>>,
    san: PyOnceLock<Py<PyList>>,
    uci: PyOnceLock<Py<PyList>>,
}

#[pymethods]
impl PgnGames {
    /// The file read (`pathlib.Path`), or None for text input.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        as_path(py, &self.path)
    }

    /// SAN of each kept move, as written (normalised: `0-0` → `O-O`, `bxa8Q` → `bxa8=Q`,
    /// glyphs dropped).
    #[getter]
    fn san<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        moves_once(py, &self.san, &self.game_san, san_strings)
    }

    /// uint16 [N, T] seconds left after each move; 32768 without `[%clk]`, 0 beyond the length.
    /// Built on first access.
    #[getter]
    fn clocks<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<u16>> {
        padded_once(py, &self.clocks, &self.game_clocks, self.max_ply)
    }

    /// int16 [N, T] centipawns (mate ±(32767 − |N|)); -32768 without `[%eval]`, 0 beyond.
    /// Built on first access.
    #[getter]
    fn evals<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray2<i16>> {
        padded_once(py, &self.evals, &self.game_evals, self.max_ply)
    }

    /// UCI of each kept move (castling `e1g1`).
    #[getter]
    fn uci<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        moves_once(py, &self.uci, &self.game_tokens, uci_strings)
    }

    /// dict of str columns [N]: event, site, date, utc_date, utc_time, white, black, result,
    /// termination, time_control, eco, opening ('' when missing); built on first access.
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = self.headers.get_or_try_init(py, || -> PyResult<Py<PyDict>> {
            let d = PyDict::new(py);
            for (name, tag) in HEADER_COLUMNS {
                d.set_item(name, self.game_headers.iter().map(|h| h.get(tag)).collect::<Vec<_>>())?;
            }
            Ok(d.unbind())
        })?;
        Ok(d.bind(py).clone())
    }

    /// One header column (a key of `headers`) as a list of str [N], without building the others.
    /// Raises KeyError for another name.
    fn header(&self, name: &str) -> PyResult<Vec<String>> {
        let tag = HEADER_COLUMNS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t);
        let tag = tag.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(name.to_owned()))?;
        Ok(self.game_headers.iter().map(|h| h.get(tag).to_owned()).collect())
    }

    fn __len__(&self) -> usize {
        self.game_tokens.len()
    }

    fn __getitem__(slf: &Bound<'_, Self>, key: &str) -> PyResult<Py<PyAny>> {
        item(slf.as_any(), &PGN_FIELDS, key)
    }

    /// Every field as a dict.
    fn to_dict<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        as_dict(slf.as_any(), &PGN_FIELDS)
    }

    fn __repr__(&self) -> String {
        format!("PgnGames(n={}, path={})", self.game_tokens.len(), py_repr(&self.path))
    }
}

/// A Python-style repr of an optional string: `'…'` or `None`.
fn py_repr(s: &Option<String>) -> String {
    match s {
        Some(p) => format!("'{}'", p.replace('\\', "\\\\").replace('\'', "\\'")),
        None => "None".to_owned(),
    }
}

impl PgnGames {
    fn new(py: Python<'_>, mut b: PgnBatch, max_ply: usize, path: Option<String>) -> PyResult<Self> {
        let n = b.games.len();
        let games = &b.games;
        let tokens = py.detach(|| {
            par_rows(n, max_ply, vocab::PAD_TOKEN as i16, |i, row| {
                for (x, &t) in row.iter_mut().zip(&games[i].tokens) {
                    *x = t as i16;
                }
            })
        });
        let col = |f: &dyn Fn(&pgn::Game) -> i64| -> Vec<i64> { b.games.iter().map(f).collect() };
        let arr1 = |v: Vec<i64>| Array1::from(v).into_pyarray(py).unbind();
        Ok(PgnGames {
            tokens: tokens.into_pyarray(py).unbind(),
            lengths: b.games.iter().map(|g| g.tokens.len() as i16).collect::<Array1<i16>>().into_pyarray(py).unbind(),
            outcome: b.games.iter().map(|g| g.outcome as i16).collect::<Array1<i16>>().into_pyarray(py).unbind(),
            white_elo: b.games.iter().map(|g| g.headers.white_elo).collect::<Array1<u16>>().into_pyarray(py).unbind(),
            black_elo: b.games.iter().map(|g| g.headers.black_elo).collect::<Array1<u16>>().into_pyarray(py).unbind(),
            game_index: arr1(col(&|g| g.index as i64)),
            full_length: arr1(col(&|g| g.full_length as i64)),
            game_headers: b.games.iter_mut().map(|g| std::mem::take(&mut g.headers)).collect(),
            headers: PyOnceLock::new(),
            skipped: skipped_list(py, &b.skipped)?,
            counts: counts_dict(py, b.n_read, n, &b.skipped)?,
            looks_like_pgn: b.pgn_like,
            path,
            game_san: b.games.iter_mut().map(|g| std::mem::take(&mut g.san)).collect(),
            game_tokens: b.games.iter_mut().map(|g| std::mem::take(&mut g.tokens)).collect(),
            game_clocks: b.games.iter_mut().map(|g| std::mem::take(&mut g.clocks)).collect(),
            game_evals: b.games.iter_mut().map(|g| std::mem::take(&mut g.evals)).collect(),
            clocks: PyOnceLock::new(),
            evals: PyOnceLock::new(),
            max_ply,
            san: PyOnceLock::new(),
            uci: PyOnceLock::new(),
        })
    }
}

const UCI_FIELDS: [&str; 7] = ["tokens", "lengths", "game_index", "skipped", "counts", "path", "uci"];

/// Games parsed from a UCI file (spec §6.7; N kept games, T = `max_ply`). Returned by
/// `parse_uci_file`; read-only. `record["tokens"]` and `to_dict()` give dict-style access.
#[pyclass(name = "UciGames", module = "pawn._engine", frozen)]
pub struct UciGames {
    /// int16 [N, T] PAD-filled move tokens.
    #[pyo3(get)]
    tokens: Py<PyArray2<i16>>,
    /// int16 [N] plies kept.
    #[pyo3(get)]
    lengths: Py<PyArray1<i16>>,
    /// int64 [N] 1-based number of the non-empty line of each kept game.
    #[pyo3(get)]
    game_index: Py<PyArray1<i64>>,
    /// (game number, ply, reason) per skipped game: `illegal_move`, `unreadable_move` or
    /// `too_short`.
    #[pyo3(get)]
    skipped: Py<PyList>,
    /// `read`, `kept` and one count per skip reason.
    #[pyo3(get)]
    counts: Py<PyDict>,
    path: Option<String>,
    uci_joined: Vec<String>,
    uci: PyOnceLock<Py<PyList>>,
}

#[pymethods]
impl UciGames {
    /// The file read (`pathlib.Path`), or None for bytes input.
    #[getter]
    fn path(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        as_path(py, &self.path)
    }

    /// UCI of each kept move.
    #[getter]
    fn uci<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        split_once(py, &self.uci, &self.uci_joined)
    }

    fn __len__(&self) -> usize {
        self.uci_joined.len()
    }

    fn __getitem__(slf: &Bound<'_, Self>, key: &str) -> PyResult<Py<PyAny>> {
        item(slf.as_any(), &UCI_FIELDS, key)
    }

    /// Every field as a dict.
    fn to_dict<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        as_dict(slf.as_any(), &UCI_FIELDS)
    }

    fn __repr__(&self) -> String {
        format!("UciGames(n={}, path={})", self.uci_joined.len(), py_repr(&self.path))
    }
}

impl UciGames {
    fn new(py: Python<'_>, b: UciBatch, max_ply: usize, path: Option<String>) -> PyResult<Self> {
        let n = b.games.len();
        let tokens = token_matrix(b.games.iter().map(|(_, t)| t.as_slice()), max_ply);
        let lengths: Array1<i16> = b.games.iter().map(|(_, t)| t.len() as i16).collect();
        let idx: Array1<i64> = b.games.iter().map(|(g, _)| *g as i64).collect();
        Ok(UciGames {
            tokens: tokens.into_pyarray(py).unbind(),
            lengths: lengths.into_pyarray(py).unbind(),
            game_index: idx.into_pyarray(py).unbind(),
            skipped: skipped_list(py, &b.skipped)?,
            counts: counts_dict(py, b.n_read, n, &b.skipped)?,
            path,
            uci_joined: b.games.iter().map(|(_, t)| uci::join_uci(t)).collect(),
            uci: PyOnceLock::new(),
        })
    }
}

/// Parse PGN bytes (spec §6.1–§6.4) into a `PgnGames` record. Raises EngineUsageError (a
/// ValueError) for max_ply outside 1..=32767 or min_ply outside 0..=max_ply.
#[pyfunction]
#[pyo3(signature = (data, max_ply=512, min_ply=1))]
fn parse_pgn_bytes(py: Python<'_>, data: &[u8], max_ply: i64, min_ply: i64) -> PyResult<PgnGames> {
    let (max_ply, min_ply) = check_plies(max_ply, min_ply)?;
    let batch = py.detach(|| pgn::parse_pgn(data, max_ply, min_ply));
    PgnGames::new(py, batch, max_ply, None)
}

/// As `parse_pgn_bytes`, reading the file at `path` (FileNotFoundError naming it if missing);
/// the record's `path` is that file. The file is read in blocks while the games already read
/// are parsed (`pgn::parse_pgn_read`).
#[pyfunction]
#[pyo3(signature = (path, max_ply=512, min_ply=1))]
fn parse_pgn_path(py: Python<'_>, path: &str, max_ply: i64, min_ply: i64) -> PyResult<PgnGames> {
    let (max_ply, min_ply) = check_plies(max_ply, min_ply)?;
    let batch = py
        .detach(|| std::fs::File::open(path).and_then(|f| pgn::parse_pgn_read(f, max_ply, min_ply)))
        .map_err(|e| EngineError::io(path, &e))?;
    PgnGames::new(py, batch, max_ply, Some(path.to_owned()))
}

fn game_error(game: usize, e: &MoveError) -> PyErr {
    EngineError::from((game, e.clone())).into()
}

/// Parse a UCI file's bytes (spec §6.7, `uci::parse_uci_file`) into a `UciGames` record
/// (`path` None).
#[pyfunction]
#[pyo3(signature = (data, max_ply=512, min_ply=1))]
fn parse_uci_bytes(py: Python<'_>, data: &[u8], max_ply: i64, min_ply: i64) -> PyResult<UciGames> {
    let (max_ply, min_ply) = check_plies(max_ply, min_ply)?;
    let batch = py.detach(|| uci::parse_uci_file(data, max_ply, min_ply));
    UciGames::new(py, batch, max_ply, None)
}

/// As `parse_uci_bytes`, reading the file at `path` (FileNotFoundError naming it if missing).
#[pyfunction]
#[pyo3(signature = (path, max_ply=512, min_ply=1))]
fn parse_uci_path(py: Python<'_>, path: &str, max_ply: i64, min_ply: i64) -> PyResult<UciGames> {
    let (max_ply, min_ply) = check_plies(max_ply, min_ply)?;
    let data = read_file(py, path)?;
    let batch = py.detach(|| uci::parse_uci_file(&data, max_ply, min_ply));
    UciGames::new(py, batch, max_ply, Some(path.to_owned()))
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
        other => return Err(arg_err(format!("on_error must be 'raise' or 'truncate', got {other:?}"))),
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
                    vocab::token_to_uci(t).ok_or_else(|| EngineError::from((g, IllegalToken { ply, token: t })).into())
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
