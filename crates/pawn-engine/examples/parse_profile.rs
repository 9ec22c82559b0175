//! The PGN parser alone, for `perf`: parses every `*.pgn` file in a folder REPS times with
//! `pgn::parse_pgn(data, 512, 0)` (the files are read into memory first) and prints games/s.
//!
//! ```text
//! CARGO_PROFILE_RELEASE_DEBUG=true cargo build --release --example parse_profile
//! RAYON_NUM_THREADS=1 perf record -g target/release/examples/parse_profile ../shared/data/lichess 20
//! ```
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), reps) = (args.next(), args.next()) else {
        eprintln!("usage: parse_profile DIR [REPS]");
        std::process::exit(2);
    };
    let reps: usize = match reps.map(|s| s.parse()) {
        None => 20,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("parse_profile: REPS must be a whole number ({e})");
            std::process::exit(2);
        }
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("parse_profile: cannot read {dir}: {e}");
            std::process::exit(1);
        }
    };
    let mut files: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().is_some_and(|e| e == "pgn")).collect();
    files.sort();
    let mut data = Vec::new();
    for p in &files {
        match std::fs::read(p) {
            Ok(d) => data.push(d),
            Err(e) => {
                eprintln!("parse_profile: cannot read {}: {e}", p.display());
                std::process::exit(1);
            }
        }
    }
    let t = Instant::now();
    let mut n = 0;
    for _ in 0..reps {
        for d in &data {
            n += pawn_engine::pgn::parse_pgn(d, 512, 0).n_read;
        }
    }
    let s = t.elapsed().as_secs_f64();
    println!("{n} games {s:.3} s {:.0} games/s", n as f64 / s);
}
