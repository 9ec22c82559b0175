//! Reading a game's tag pairs into [`Headers`]: the common `[Name "value"]` lines directly,
//! anything else with `pgn-reader`.

use std::ops::ControlFlow;

use pgn_reader::{RawTag, Visitor};

use super::{Headers, Tag};

/// A game end (blank line) followed by enough spaces to cover pgn-reader's look-ahead.
pub(super) static TAIL_PADDING: [u8; 320] = {
    let mut p = [b' '; 320];
    p[0] = b'\n';
    p[1] = b'\n';
    p
};

/// `pgn-reader` visitor that reads the tag pairs of one game and stops at its movetext. The
/// headers accumulate over `read_game` calls, so tag pairs after a `;` comment line (where
/// `pgn-reader` sees a movetext) are kept.
#[derive(Default)]
pub(super) struct Tags {
    pub(super) headers: Headers,
}

impl Visitor for Tags {
    type Tags = Headers;
    type Movetext = std::convert::Infallible;
    type Output = ();

    fn begin_tags(&mut self) -> ControlFlow<(), Headers> {
        ControlFlow::Continue(std::mem::take(&mut self.headers))
    }

    fn tag(&mut self, h: &mut Headers, name: &[u8], value: RawTag<'_>) -> ControlFlow<()> {
        set_tag(h, name, &value.decode());
        ControlFlow::Continue(())
    }

    fn begin_movetext(&mut self, headers: Headers) -> ControlFlow<(), Self::Movetext> {
        self.headers = headers;
        ControlFlow::Break(())
    }

    fn end_game(&mut self, movetext: Self::Movetext) {
        match movetext {}
    }
}

/// Store one tag pair's (unescaped) value in `h` if it is a tag PAWN reads.
fn set_tag(h: &mut Headers, name: &[u8], value: &[u8]) {
    match name {
        b"WhiteElo" => h.white_elo = elo(value),
        b"BlackElo" => h.black_elo = elo(value),
        _ => {
            if let Some(tag) = Tag::from_name(name) {
                h.set(tag, value);
            }
        }
    }
}

/// An Elo tag value: an unsigned 16-bit integer (surrounding whitespace allowed), else 0.
fn elo(value: &[u8]) -> u16 {
    std::str::from_utf8(value).ok().and_then(|s| s.trim().parse::<u16>().ok()).unwrap_or(0)
}

/// The common case of a header block, read without `pgn-reader`: every non-blank line is
/// exactly `[Name "value"]` (one space, a name of ASCII letters, digits and `_`, a value with no
/// `"` or `\`). Returns `None` for anything else, which `pgn-reader` then reads (same values:
/// with no escapes its unescaped value is the raw one).
pub(super) fn simple_tags(hdr: &[u8]) -> Option<Headers> {
    let mut h = Headers { text: String::with_capacity(hdr.len()), ..Headers::default() };
    // One UTF-8 check for the block instead of one a value (values end at ASCII quotes, so a
    // valid block slices into valid values).
    let utf8 = std::str::from_utf8(hdr).ok();
    for line in hdr.split(|&b| b == b'\n') {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let inner = line.strip_prefix(b"[")?.strip_suffix(b"]")?;
        let sp = memchr::memchr(b' ', inner)?;
        let (name, rest) = (&inner[..sp], &inner[sp + 1..]);
        if name.is_empty() || !name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_') {
            return None;
        }
        let value = rest.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
        if memchr::memchr2(b'"', b'\\', value).is_some() {
            return None;
        }
        match (utf8, Tag::from_name(name)) {
            (Some(text), Some(tag)) => {
                let at = value.as_ptr() as usize - hdr.as_ptr() as usize;
                h.set_str(tag, &text[at..at + value.len()]);
            }
            _ => set_tag(&mut h, name, value),
        }
    }
    Some(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgn_reader::Reader;

    #[test]
    fn simple_tags_agree_with_pgn_reader() {
        let hdrs: [&[u8]; 6] = [
            b"[Event \"Rated Blitz game\"]\n[Site \"https://lichess.org/abc\"]\n[WhiteElo \"1500\"]\n\n",
            b"[Event \"a]b\"]\r\n[White \"caf\xe9\"]\r\n",
            b"[Event \"esc \\\"q\\\" \\\\\"]\n",
            b"[Event  \"two spaces\"]\n",
            b"[Event \"x\"] [Site \"y\"]\n",
            b"[Event \"x\"]\n; c\n[Site \"y\"]\n",
        ];
        for (k, hdr) in hdrs.iter().enumerate() {
            let mut reader = Reader::new(std::io::Read::chain(*hdr, &TAIL_PADDING[..]));
            let mut tags = Tags::default();
            while let Ok(Some(())) = reader.read_game(&mut tags) {}
            match simple_tags(hdr) {
                Some(h) => assert_eq!(h, tags.headers, "{k}"),
                None => assert!(k >= 2, "{k} should take the fast path"),
            }
        }
    }
}
