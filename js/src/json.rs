//! JSON text written by hand for what crosses to the wrapper once per call (a `limit()` result,
//! a decision): the keys are fixed text, so only the string values go through `serde_json`'s
//! escaping, and the text is sized once — about a third of what deriving `Serialize` spends on
//! the same object. Byte for byte what `serde_json` writes (the tests of `answer` compare the
//! two).

/// A JSON text being written.
#[derive(Debug, Default)]
pub(crate) struct JsonText(Vec<u8>);

impl JsonText {
    /// An empty text with room for `bytes`.
    pub(crate) fn with_capacity(bytes: usize) -> JsonText {
        JsonText(Vec::with_capacity(bytes))
    }

    /// Fixed JSON: punctuation and keys, written as they are.
    pub(crate) fn raw(&mut self, json: &str) {
        self.0.extend_from_slice(json.as_bytes());
    }

    /// A string value, escaped by `serde_json`.
    pub(crate) fn string(&mut self, value: &str) {
        // Writing a `str` into a `Vec` cannot fail.
        let _ = serde_json::to_writer(&mut self.0, value);
    }

    /// An unsigned integer value.
    pub(crate) fn number(&mut self, value: u64) {
        self.raw(itoa::Buffer::new().format(value));
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

    /// The four fields a result and each of its decisions open with: `success`, `limit`,
    /// `remaining`, `reset`.
    pub(crate) fn standing(&mut self, success: bool, limit: u64, remaining: u64, reset: u64) {
        self.raw("\"success\":");
        self.boolean(success);
        self.raw(",\"limit\":");
        self.number(limit);
        self.raw(",\"remaining\":");
        self.number(remaining);
        self.raw(",\"reset\":");
        self.number(reset);
    }

    /// The text written.
    pub(crate) fn into_string(self) -> String {
        // Only `str`s and JSON punctuation went in.
        String::from_utf8(self.0).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
