//! Lines from a byte stream, each held in memory up to a bound: a trace with no newline (binary
//! data, a runaway line) is read through, never buffered whole.

use std::io::{self, BufRead};

/// The longest line kept: 1 MiB, far beyond any real log line (Apache and nginx refuse request
/// lines over 8 KiB; a Logpush line with every field is a few KiB). A longer line is a bad line.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// One line as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Line {
    /// The line's bytes are in the buffer (without its line ending).
    Whole,
    /// The line was longer than [`MAX_LINE_BYTES`] (this many bytes); the buffer holds its start.
    TooLong(u64),
}

/// Reads the next line into `buf` (cleared first), dropping its `\n` / `\r\n` ending. `None` at
/// the end of the input.
pub(crate) fn read_line(input: &mut dyn BufRead, buf: &mut Vec<u8>) -> io::Result<Option<Line>> {
    buf.clear();
    let mut total = 0u64;
    loop {
        let chunk = match input.fill_buf() {
            Ok(chunk) => chunk,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            if total == 0 {
                return Ok(None);
            }
            break;
        }
        let (take, done) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        let room = MAX_LINE_BYTES + 1 - buf.len().min(MAX_LINE_BYTES + 1);
        buf.extend_from_slice(&chunk[..take.min(room)]);
        input.consume(take);
        total += take as u64;
        if done {
            break;
        }
    }
    while let [rest @ .., b'\n' | b'\r'] = buf.as_slice() {
        buf.truncate(rest.len());
    }
    Ok(Some(if buf.len() > MAX_LINE_BYTES {
        buf.truncate(MAX_LINE_BYTES);
        Line::TooLong(total)
    } else {
        Line::Whole
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(data: &[u8]) -> Vec<(Vec<u8>, Line)> {
        let mut input = io::BufReader::with_capacity(16, data);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let Some(line) = read_line(&mut input, &mut buf).unwrap() {
            out.push((buf.clone(), line));
        }
        out
    }

    #[test]
    fn splits_on_newlines_and_drops_the_endings() {
        let got = lines(b"a\r\nbb\n\nccc");
        let text: Vec<&[u8]> = got.iter().map(|(b, _)| b.as_slice()).collect();
        assert_eq!(text, [&b"a"[..], b"bb", b"", b"ccc"]);
        assert!(got.iter().all(|(_, l)| *l == Line::Whole));
        assert!(lines(b"").is_empty());
    }

    #[test]
    fn an_overlong_line_is_flagged_and_the_next_one_read_whole() {
        let mut data = vec![b'x'; MAX_LINE_BYTES + 10];
        data.extend_from_slice(b"\nnext\n");
        let got = lines(&data);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1, Line::TooLong(MAX_LINE_BYTES as u64 + 11));
        assert_eq!(got[0].0.len(), MAX_LINE_BYTES);
        assert_eq!(got[1], (b"next".to_vec(), Line::Whole));
        // Exactly at the bound is still a line.
        let mut data = vec![b'y'; MAX_LINE_BYTES];
        data.push(b'\n');
        assert_eq!(lines(&data)[0].1, Line::Whole);
    }
}
