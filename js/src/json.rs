//! JSON text written by hand for what crosses to the wrapper once per call (a `limit()` result,
//! a decision): the keys are fixed text, so only the values are escaped and the text is sized
//! once — about a third of what `serde_json` spends on the same object. Byte for byte what
//! `serde_json` writes (the tests of `answer` compare the two).

/// A JSON text being written.
#[derive(Debug, Default)]
pub(crate) struct JsonText(String);

impl JsonText {
    /// An empty text with room for `bytes`.
    pub(crate) fn with_capacity(bytes: usize) -> JsonText {
        JsonText(String::with_capacity(bytes))
    }

    /// Fixed JSON: punctuation and keys, written as they are.
    pub(crate) fn raw(&mut self, json: &str) {
        self.0.push_str(json);
    }

    /// A string value, escaped as `serde_json` escapes it: `"`, `\` and the control characters
    /// below U+0020, nothing else.
    pub(crate) fn string(&mut self, value: &str) {
        let out = &mut self.0;
        out.reserve(value.len() + 2);
        out.push('"');
        let bytes = value.as_bytes();
        let mut plain = 0;
        while let Some(at) = next_to_escape(bytes, plain) {
            // Only ASCII bytes are escaped, so every slice falls on character boundaries.
            out.push_str(&value[plain..at]);
            let byte = bytes[at];
            match byte {
                b'"' => out.push_str("\\\""),
                b'\\' => out.push_str("\\\\"),
                b'\n' => out.push_str("\\n"),
                b'\r' => out.push_str("\\r"),
                b'\t' => out.push_str("\\t"),
                0x08 => out.push_str("\\b"),
                0x0c => out.push_str("\\f"),
                _ => {
                    const HEX: &[u8; 16] = b"0123456789abcdef";
                    out.push_str("\\u00");
                    out.push(HEX[usize::from(byte >> 4)] as char);
                    out.push(HEX[usize::from(byte & 0xf)] as char);
                }
            }
            plain = at + 1;
        }
        out.push_str(&value[plain..]);
        out.push('"');
    }

    /// An unsigned integer value.
    pub(crate) fn number(&mut self, value: u64) {
        self.0.push_str(itoa::Buffer::new().format(value));
    }

    /// An integer value or `null`.
    pub(crate) fn number_or_null(&mut self, value: Option<u64>) {
        match value {
            Some(n) => self.number(n),
            None => self.raw("null"),
        }
    }

    /// A boolean value.
    pub(crate) fn boolean(&mut self, value: bool) {
        self.raw(if value { "true" } else { "false" });
    }

    /// The text written.
    pub(crate) fn into_string(self) -> String {
        self.0
    }
}

/// Where the first byte JSON must escape (`"`, `\`, below 0x20) is in `bytes`, from `from` on:
/// eight bytes a step, since most strings here escape nothing or a few quotes.
fn next_to_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    // The high bit of each byte of `word` below `n` (n <= 0x80); a byte above a flagged one may
    // be flagged falsely, never one below, so the lowest flag is exact.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS;
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
        let hits = below(word, 0x20)
            | below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1);
        if hits != 0 {
            return Some(at + (hits.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    bytes
        .get(at..)?
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
        .map(|p| at + p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let mut every_ascii: String = (0u8..0x80).map(char::from).collect();
        every_ascii.push_str("é \u{2028} 😀 \"quoted\" back\\slash");
        for value in [
            "",
            "plain",
            "\"a\";r=1;t=40",
            "\u{7f}",
            every_ascii.as_str(),
        ] {
            let mut text = JsonText::default();
            text.string(value);
            assert_eq!(
                text.into_string(),
                serde_json::to_string(value).unwrap(),
                "{value:?}"
            );
        }
    }

    #[test]
    fn an_escape_is_found_wherever_it_falls_in_a_word() {
        for len in 0..20 {
            for special in ['"', '\\', '\n', '\u{1}', '\u{1f}', ' ', '~', 'é', '\u{80}'] {
                for at in 0..len {
                    let value: String = (0..len)
                        .map(|i| if i == at { special } else { 'a' })
                        .collect();
                    let mut text = JsonText::default();
                    text.string(&value);
                    assert_eq!(
                        text.into_string(),
                        serde_json::to_string(&value).unwrap(),
                        "{value:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn numbers_and_booleans_are_json() {
        let mut text = JsonText::default();
        for n in [0, 7, u64::MAX] {
            text.number(n);
            text.raw(",");
        }
        text.number_or_null(None);
        text.raw(",");
        text.boolean(true);
        text.boolean(false);
        assert_eq!(
            text.into_string(),
            format!("0,7,{},null,truefalse", u64::MAX)
        );
    }
}
