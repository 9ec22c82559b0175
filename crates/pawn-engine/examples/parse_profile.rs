use std::time::Instant;
fn main() {
    let dir = std::env::args().nth(1).unwrap();
    let reps: usize = std::env::args().nth(2).map(|s| s.parse().unwrap()).unwrap_or(20);
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.extension().map_or(false, |e| e == "pgn")).collect();
    files.sort();
    let data: Vec<Vec<u8>> = files.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let t = Instant::now();
    let mut n = 0;
    for _ in 0..reps {
        for d in &data {
            let b = pawn_engine::pgn::parse_pgn(d, 512, 0);
            n += b.n_read;
        }
    }
    let s = t.elapsed().as_secs_f64();
    println!("{} games {:.3} s {:.0} games/s", n, s, n as f64 / s);
}
