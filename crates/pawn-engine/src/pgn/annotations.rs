//! The `[%clk …]` and `[%eval …]` commands of a movetext comment, in the §6.4 encodings.

/// `[%clk H:MM:SS]` in a comment → seconds (h·3600 + m·60 + s, fractions dropped), capped at
/// 32,767 (§6.4). `None` when absent or malformed.
pub fn parse_clock(comment: &[u8]) -> Option<u16> {
    clock_value(command_arg(comment, b"%clk")?)
}

/// `(parse_clock(comment), parse_eval(comment))` in one scan of the comment's `%` signs.
pub(super) fn clock_and_eval(comment: &[u8]) -> (Option<u16>, Option<i16>) {
    let (mut clk, mut ev) = (None, None);
    for k in memchr::memchr_iter(b'%', comment) {
        let rest = &comment[k..];
        if clk.is_none() && rest.starts_with(b"%clk") {
            clk = Some(k);
        } else if ev.is_none() && rest.starts_with(b"%eval") {
            ev = Some(k);
        }
        if clk.is_some() && ev.is_some() {
            break;
        }
    }
    (
        clk.and_then(|k| clock_value(command_body(&comment[k + 4..])?)),
        ev.and_then(|k| eval_value(command_body(&comment[k + 5..])?)),
    )
}

/// The seconds of a `%clk` argument (`H:MM:SS[.f]`).
fn clock_value(body: &[u8]) -> Option<u16> {
    let mut total: u64 = 0;
    let mut fields = 0;
    for part in body.split(|&b| b == b':') {
        let int_part = part.split(|&b| b == b'.').next()?;
        if int_part.is_empty() || int_part.len() > 9 || !int_part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let v = int_part.iter().fold(0u64, |a, &b| a * 10 + (b - b'0') as u64); // ≤ 9 digits
        total = total * 60 + v;
        fields += 1;
    }
    if fields == 0 || fields > 3 {
        return None;
    }
    Some(total.min(32_767) as u16)
}

/// `[%eval x]` in a comment → centipawns round(100·x) half away from zero, clamped to
/// ±16,383; `[%eval #N]` → ±(32,767 − |N|) with the sign of N, `#0` → −32,766 (§6.4).
/// Decimal strings are rounded exactly (no binary floating point). `None` when absent.
pub fn parse_eval(comment: &[u8]) -> Option<i16> {
    eval_value(command_arg(comment, b"%eval")?)
}

/// The centipawns of a `%eval` argument (`0.17`, `#-3`, `0.17,20`).
fn eval_value(body: &[u8]) -> Option<i16> {
    let body = body.split(|&b| b == b',').next()?; // "0.17,20" = eval, depth
    if let Some(mate) = body.strip_prefix(b"#") {
        let (neg, digits) = match mate.first() {
            Some(b'-') => (true, &mate[1..]),
            Some(b'+') => (false, &mate[1..]),
            _ => (false, mate),
        };
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = digits.iter().fold(0u32, |a, &b| (a * 10 + (b - b'0') as u32).min(16_383));
        if n == 0 {
            return Some(-32_766); // as the spec states for `#0` (the side to move is mated)
        }
        let mag = 32_767 - n as i32;
        return Some(if neg { -mag } else { mag } as i16);
    }
    let (neg, num) = match body.first() {
        Some(b'-') => (true, &body[1..]),
        Some(b'+') => (false, &body[1..]),
        _ => (false, body),
    };
    let mut parts = num.splitn(2, |&b| b == b'.');
    let int_part = parts.next()?;
    let frac = parts.next().unwrap_or(b"");
    if (int_part.is_empty() && frac.is_empty())
        || !int_part.iter().chain(frac).all(u8::is_ascii_digit)
    {
        return None;
    }
    let whole = int_part.iter().fold(0u64, |a, &b| (a * 10 + (b - b'0') as u64).min(1_000_000));
    let digit = |k: usize| frac.get(k).map_or(0, |&b| (b - b'0') as u64);
    let mut cp = whole * 100 + digit(0) * 10 + digit(1);
    if digit(2) >= 5 {
        cp += 1;
    }
    let cp = cp.min(16_383) as i16;
    Some(if neg { -cp } else { cp })
}

/// The argument of a `[%cmd arg]` command inside a comment, trimmed.
fn command_arg<'a>(comment: &'a [u8], cmd: &[u8]) -> Option<&'a [u8]> {
    let at = memchr::memchr_iter(b'%', comment).find(|&k| comment[k..].starts_with(cmd))?;
    command_body(&comment[at + cmd.len()..])
}

/// A command's argument from `rest`, the text just after its name: whitespace, then the
/// argument up to `]`, trimmed; `None` when empty or unterminated.
fn command_body(rest: &[u8]) -> Option<&[u8]> {
    if !rest.first().is_some_and(|b| b.is_ascii_whitespace()) {
        return None;
    }
    let end = rest.iter().position(|&b| b == b']')?;
    let arg = rest[..end].trim_ascii();
    (!arg.is_empty()).then_some(arg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn eval_and_clock_encodings_follow_spec() {
        assert_eq!(parse_eval(b"[%eval -0.35]"), Some(-35));
        assert_eq!(parse_eval(b"[%eval 0.005]"), Some(1));
        assert_eq!(parse_eval(b"[%eval -0.005]"), Some(-1));
        assert_eq!(parse_eval(b"[%eval 1000]"), Some(16_383));
        assert_eq!(parse_eval(b"[%eval #-3]"), Some(-32_764));
        assert_eq!(parse_eval(b"[%eval #2]"), Some(32_765));
        assert_eq!(parse_eval(b"[%eval #0]"), Some(-32_766));
        assert_eq!(parse_clock(b" [%eval 0.1] [%clk 0:00:07] "), Some(7));
        assert_eq!(parse_clock(b"[%clk 1:02:03]"), Some(3723));
        assert_eq!(parse_clock(b"[%clk 99:00:00]"), Some(32_767));
        assert_eq!(parse_clock(b"[%clk x]"), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]
        #[test]
        fn one_scan_reads_clock_and_eval_as_the_two_readers(
            parts in proptest::collection::vec(prop::sample::select(vec![
                "[%clk 0:03:00]", "[%eval 0.17]", "[%eval #-3]", "%clk", "%eval", "%clkx 1", "%evalx", " ", "]", "[",
                "%", "1:02:03.5", "-0.35", "#0", ",20", "x", "%clk  0:00:07 ]", "[%eval\t+2.5]",
            ]), 0..8)
        ) {
            let comment = parts.concat();
            let c = comment.as_bytes();
            prop_assert_eq!(clock_and_eval(c), (parse_clock(c), parse_eval(c)));
        }
    }
}
