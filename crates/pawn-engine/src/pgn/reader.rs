//! The parallel driver: [`parse_pgn`] over bytes in memory and [`parse_pgn_read`] over a
//! reader, cutting games on one thread while the others parse them (rayon), in file order.

use std::sync::Mutex;

use super::cut::is_tag_start;
use super::{cut_games, each_game_span, parse_game, Game, GameSpan, PgnBatch, Skipped};

/// Parse every game of a PGN input (bytes in UTF-8 or Latin-1, optional BOM, LF or CRLF).
///
/// Games are parsed in parallel with rayon and returned in file order. Kept games hold at most
/// `max_ply` tokens (longer games are truncated and get outcome PLY_LIMIT, §6.3; the whole
/// game is still replayed). Games are skipped and reported (never silently truncated) for an
/// illegal or unreadable move, a variant or set-up start, no §6.3 outcome, or fewer than
/// `min_ply` plies. Callers validate `max_ply ≥ 1`.
///
/// ```
/// use pawn_engine::pgn::{parse_pgn, SkipReason};
/// use pawn_engine::vocab::outcome::WHITE_CHECKMATES;
///
/// let pgn = b"[Result \"1-0\"]\n[Termination \"Normal\"]\n\n1. e4 e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n\
///             [Result \"0-1\"]\n\n1. e4 e5 2. Ke3 0-1\n";
/// let batch = parse_pgn(pgn, 512, 1);
/// assert_eq!((batch.n_read, batch.games.len()), (2, 1));
/// assert_eq!(batch.games[0].tokens.len(), 7);
/// assert_eq!(batch.games[0].outcome, WHITE_CHECKMATES);
/// assert_eq!((batch.skipped[0].game, batch.skipped[0].ply), (2, 2));
/// assert_eq!(batch.skipped[0].reason, SkipReason::IllegalMove);
/// ```
pub fn parse_pgn(data: &[u8], max_ply: usize, min_ply: usize) -> PgnBatch {
    // Games are cut on one pool thread and parsed in batches as they are cut, so the other
    // threads need not wait for the cutting (~8 % of the work) to end; batches finish in any
    // order and are put back in file order. Small batches (32 games, ~0.3 ms each) leave the
    // other threads little idle time at the end of a file.
    let done: Mutex<Vec<(usize, Parsed)>> = Mutex::new(Vec::new());
    let mut spans = Vec::new();
    rayon::scope(|s| {
        let queue = |chunk: Vec<GameSpan>, first: usize| {
            let done = &done;
            s.spawn(move |_| parse_chunk(data, &chunk, first, max_ply, min_ply, done));
        };
        let mut first = 0;
        each_game_span(data, |span| {
            spans.push(span);
            if spans.len() - first == PARSE_BATCH {
                queue(spans[first..].to_vec(), first);
                first = spans.len();
            }
        });
        if first < spans.len() {
            queue(spans[first..].to_vec(), first);
        }
    });
    let head = &data[..data.len().min(PGN_LIKE_HEAD)];
    let no_nul = memchr::memchr(0, head).is_none();
    let blank = data.iter().all(|b| b.is_ascii_whitespace());
    let tagged = spans.iter().any(|s| s.movetext > s.start && is_tag_start(data, s.start));
    assemble(done, spans.len(), no_nul, blank, tagged)
}

/// Games per parse task of [`parse_pgn`] and [`parse_pgn_read`].
const PARSE_BATCH: usize = 32;
/// The leading bytes in which a NUL byte marks an input as not PGN.
const PGN_LIKE_HEAD: usize = 64 << 10;
/// Bytes [`parse_pgn_read`] reads before cutting: small enough that the first read (the only
/// one no parsing overlaps) is short, large enough that a read call moves a lot at once.
const READ_BLOCK: usize = 256 << 10;

/// Bytes of read blocks whose games [`parse_pgn_read`] lets wait for a parse before its reading
/// thread parses some itself (16 blocks).
const READ_AHEAD: usize = 16 * READ_BLOCK;

/// A read block shared by the parse tasks of its games; dropping the last one takes its bytes
/// off the count of bytes waiting.
struct Segment<'a> {
    bytes: Vec<u8>,
    waiting: &'a std::sync::atomic::AtomicUsize,
}

impl Drop for Segment<'_> {
    fn drop(&mut self) {
        self.waiting.fetch_sub(self.bytes.len(), std::sync::atomic::Ordering::Relaxed);
    }
}

/// Parse results of one task: its kept games and its skipped ones, each in file order (apart,
/// so a skipped game takes the size of a [`Skipped`], not of a [`Game`]).
type Parsed = (Vec<Game>, Vec<Skipped>);

/// Parse the games at `spans` of `data` (games `first + 1 …`, 1-based) into `done`.
fn parse_chunk(data: &[u8], spans: &[GameSpan], first: usize, max_ply: usize, min_ply: usize, done: &Mutex<Vec<(usize, Parsed)>>) {
    let mut parsed: Parsed = (Vec::with_capacity(spans.len()), Vec::new());
    for (k, &span) in spans.iter().enumerate() {
        match parse_game(data, span, first + k + 1, max_ply, min_ply) {
            Ok(g) => parsed.0.push(g),
            Err(s) => parsed.1.push(s),
        }
    }
    done.lock().unwrap_or_else(|e| e.into_inner()).push((first, parsed));
}

/// The batch of the parse tasks' results, in file order; `pgn_like` as [`PgnBatch`] defines it.
fn assemble(done: Mutex<Vec<(usize, Parsed)>>, n_read: usize, no_nul: bool, blank: bool, tagged: bool) -> PgnBatch {
    let mut parts = done.into_inner().unwrap_or_else(|e| e.into_inner());
    parts.sort_unstable_by_key(|(first, _)| *first);
    let mut batch = PgnBatch { n_read, ..PgnBatch::default() };
    batch.games.reserve(parts.iter().map(|(_, (g, _))| g.len()).sum());
    for (_, (games, skipped)) in parts {
        batch.games.extend(games);
        batch.skipped.extend(skipped);
    }
    batch.pgn_like = no_nul && (blank || !batch.games.is_empty() || batch.skipped.iter().any(|s| s.ply > 0) || tagged);
    batch
}

/// Append up to `want` bytes of `input` to `buf`; true when `input` ended before that.
fn read_block(input: &mut impl std::io::Read, buf: &mut Vec<u8>, want: usize) -> std::io::Result<bool> {
    use std::io::Read;
    let n = input.by_ref().take(want as u64).read_to_end(buf)?;
    Ok(n < want)
}

/// [`parse_pgn`] on everything `input` yields (a file, a decoder), the same games, skips and
/// `pgn_like`, with the reading overlapped with the parsing.
///
/// The input is read in blocks of 256 KiB on one pool thread, which cuts each block (with the
/// unfinished game carried over from the block before) as soon as it is read and hands its
/// games to the other threads in batches of 32, so with two threads or more only the first
/// block's read runs before any parsing. When more than 4 MiB of read blocks wait for their
/// games to be parsed, the reading thread parses waiting batches itself until they fit again
/// (on one thread: read 4 MiB, parse, read on). A game longer than a block (or bytes that never
/// end a game) makes the next block as large as what is carried, so the cut work stays linear
/// in the input. Memory: ≈ 4 MiB of input (more only for a game longer than that) plus the
/// parsed games.
///
/// Errors: the first read error of `input` (nothing is returned for a part of the input).
pub fn parse_pgn_read(input: impl std::io::Read + Send, max_ply: usize, min_ply: usize) -> std::io::Result<PgnBatch> {
    parse_pgn_blocks(input, READ_BLOCK, READ_AHEAD, max_ply, min_ply).map(|(batch, _)| batch)
}

/// [`parse_pgn_read`] reading `block` bytes at a time and letting `read_ahead` bytes wait (tests
/// cut games across many blocks), also returning the most bytes that waited at once.
fn parse_pgn_blocks(
    mut input: impl std::io::Read + Send,
    block: usize,
    read_ahead: usize,
    max_ply: usize,
    min_ply: usize,
) -> std::io::Result<(PgnBatch, usize)> {
    let done: Mutex<Vec<(usize, Parsed)>> = Mutex::new(Vec::new());
    let (mut n_read, mut seen) = (0usize, 0usize);
    let (mut no_nul, mut blank, mut tagged) = (true, true, false);
    let mut failed = None;
    let (waiting, mut peak) = (std::sync::atomic::AtomicUsize::new(0), 0);
    rayon::scope(|s| {
        let mut carry: Vec<u8> = Vec::new();
        let mut want = block;
        loop {
            let mut buf = Vec::with_capacity(carry.len() + want);
            buf.extend_from_slice(&carry);
            let eof = match read_block(&mut input, &mut buf, want) {
                Ok(eof) => eof,
                Err(e) => {
                    failed = Some(e);
                    return;
                }
            };
            let fresh = &buf[carry.len()..];
            if seen < PGN_LIKE_HEAD {
                no_nul &= memchr::memchr(0, &fresh[..fresh.len().min(PGN_LIKE_HEAD - seen)]).is_none();
            }
            seen += fresh.len();
            blank = blank && fresh.iter().all(|b| b.is_ascii_whitespace());
            peak = peak.max(waiting.fetch_add(buf.len(), std::sync::atomic::Ordering::Relaxed) + buf.len());
            let segment = std::sync::Arc::new(Segment { bytes: buf, waiting: &waiting });
            let queue = |chunk: Vec<GameSpan>, first: usize| {
                let (segment, done) = (std::sync::Arc::clone(&segment), &done);
                s.spawn(move |_| parse_chunk(&segment.bytes, &chunk, first, max_ply, min_ply, done));
            };
            let mut chunk = Vec::with_capacity(PARSE_BATCH);
            let cut = cut_games(&segment.bytes, eof, |span| {
                tagged |= span.movetext > span.start && is_tag_start(&segment.bytes, span.start);
                chunk.push(span);
                if chunk.len() == PARSE_BATCH {
                    queue(std::mem::replace(&mut chunk, Vec::with_capacity(PARSE_BATCH)), n_read);
                    n_read += PARSE_BATCH;
                }
            });
            if !chunk.is_empty() {
                let k = chunk.len();
                queue(chunk, n_read);
                n_read += k;
            }
            if eof {
                break;
            }
            carry = segment.bytes[cut..].to_vec();
            drop(segment);
            // read-ahead bound: parse waiting batches here while too many bytes wait (none
            // left to take: the other threads hold them all, and they are soon done)
            while waiting.load(std::sync::atomic::Ordering::Relaxed) > read_ahead {
                if rayon::yield_now() != Some(rayon::Yield::Executed) {
                    break;
                }
            }
            // no game ended in this block: read as much again as is carried (geometric growth)
            want = if cut == 0 { carry.len().max(block) } else { block };
        }
    });
    match failed {
        Some(e) => Err(e),
        None => Ok((assemble(done, n_read, no_nul, blank, tagged), peak)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pgn::testing::{pgn_pieces, sample, HEAD};
    use proptest::prelude::*;

    /// A reader handing out its bytes in pieces of the given lengths (cycled), as pipes do.
    struct Dribble<'a> {
        data: &'a [u8],
        at: usize,
        sizes: Vec<usize>,
        k: usize,
    }

    impl std::io::Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.sizes[self.k % self.sizes.len()].min(buf.len()).min(self.data.len() - self.at);
            self.k += 1;
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn same_batch(a: &PgnBatch, b: &PgnBatch) -> bool {
        (a.n_read, a.pgn_like, &a.skipped, format!("{:?}", a.games)) == (b.n_read, b.pgn_like, &b.skipped, format!("{:?}", b.games))
    }

    #[test]
    fn a_game_longer_than_many_blocks_and_a_read_error() {
        let long = format!("{HEAD}{} 1-0\n\n", "{ a comment that runs on } ".repeat(2000));
        let data = format!("{long}{HEAD}1. e4 e5 1-0\n\n{long}").into_bytes();
        let (read, _) = parse_pgn_blocks(&data[..], 64, 256, 512, 0).unwrap();
        assert!(same_batch(&read, &parse_pgn(&data, 512, 0)));
        assert_eq!((read.n_read, read.games.len(), read.games[1].tokens.len()), (3, 3, 2));
        struct Broken(usize);
        impl std::io::Read for Broken {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("disk gone"));
                }
                self.0 -= 1;
                let n = buf.len().min(HEAD.len());
                buf[..n].copy_from_slice(&HEAD.as_bytes()[..n]);
                Ok(n)
            }
        }
        let err = parse_pgn_blocks(Broken(3), 64, 256, 512, 0).unwrap_err();
        assert_eq!(err.to_string(), "disk gone");
    }

    #[test]
    fn read_ahead_is_bounded_and_one_thread_parses_as_it_reads() {
        // 2,000 games (≈ 330 KB) in 1 KiB blocks: on one thread the reading thread must parse
        // waiting games itself once 8 KiB wait, instead of reading the whole input first.
        let game = format!("{HEAD}1. e4 {{ [%clk 0:01:00] }} e5 2. Qh5 Nc6 3. Bc4 Nf6 4. Qxf7# 1-0\n\n");
        let data = game.repeat(2000).into_bytes();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        for threads in [1, 2] {
            let pool = if threads == 1 { &pool } else { &rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap() };
            let (batch, peak) = pool.install(|| parse_pgn_blocks(&data[..], 1024, 8192, 512, 0)).unwrap();
            assert!(same_batch(&batch, &parse_pgn(&data, 512, 0)));
            assert_eq!(batch.games.len(), 2000);
            // the bound plus one block and its carried game (each a batch of 32 games holds)
            assert!(peak <= 8192 + 2 * 1024 + 32 * game.len(), "{threads} threads: {peak} bytes waited");
        }
        let (_, unbounded) = pool.install(|| parse_pgn_blocks(&data[..], 1024, usize::MAX, 512, 0)).unwrap();
        assert!(unbounded > data.len() / 2, "without the bound one thread reads first: {unbounded}");
    }

    #[test]
    fn json_and_binary_inputs_are_not_pgn_like() {
        for data in [&b"{\"games\": [1, 2, 3]}\n"[..], b"[\n  {\"a\": 1}\n]\n", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR e4 e5", b"{x}"] {
            assert!(!parse_pgn(data, 512, 1).pgn_like, "{data:?}");
        }
        for data in [&b""[..], b" \n\n", b"1. e4 *", b"[Event \"x\"]\n\n*\n"] {
            assert!(parse_pgn(data, 512, 1).pgn_like, "{data:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            let b = parse_pgn(&data, 16, 1);
            prop_assert_eq!(b.n_read, b.games.len() + b.skipped.len());
        }

        #[test]
        fn mutated_real_pgn_never_panics(edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..20)) {
            let mut data = sample();
            for (at, byte) in edits {
                let i = at.index(data.len());
                data[i] = byte;
            }
            let b = parse_pgn(&data, 8, 1);
            prop_assert_eq!(b.n_read, b.games.len() + b.skipped.len());
            for g in &b.games {
                prop_assert!(g.tokens.len() <= 8);
                prop_assert_eq!(g.tokens.len(), g.clocks.len());
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]
        #[test]
        fn reading_in_blocks_gives_the_batch_of_the_whole_bytes(
            data in pgn_pieces(),
            block in 1usize..48,
            sizes in proptest::collection::vec(1usize..20, 1..4),
        ) {
            let whole = parse_pgn(&data, 8, 0);
            let (read, _) = parse_pgn_blocks(Dribble { data: &data, at: 0, sizes, k: 0 }, block, 4 * block, 8, 0).unwrap();
            prop_assert!(same_batch(&read, &whole), "{:?}\nblocks {:?}\nwhole {:?}", String::from_utf8_lossy(&data), read, whole);
        }
    }
}
