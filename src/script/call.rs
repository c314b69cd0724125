//! One script call, its keys and arguments packed into one buffer.

use std::fmt;
use std::iter::FusedIterator;
use std::ops::Index;

use super::source::Script;
use crate::store::key::hash_slot;

/// One script call: `EVALSHA <script.sha1()> <number of keys> <keys…> <args…>`.
///
/// Its keys and arguments (`KEYS` and `ARGV`) are held in one buffer, one after the other, with
/// where each ends — not as a `String` each: a three-limit check has some forty of them, and a
/// request's plan would otherwise make that many allocations only for a transport to copy them
/// out again. Each is handed out as a `&str` ([`Invocation::keys`], [`Invocation::args`]) to be
/// written where it goes: a JSON body, a RESP command.
#[derive(Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The script to run.
    pub script: &'static Script,
    // Every key, then every argument, back to back.
    text: String,
    // Where each part ends in `text`, keys first (u32: a call's text is far below 4 GiB, and the
    // offsets take half the room of `usize` natively).
    ends: Vec<u32>,
    // How many of `ends` are keys.
    keys: usize,
}

impl Invocation {
    /// A call of `script` with no key or argument yet: add them with [`Invocation::push_key`],
    /// then [`Invocation::push_arg`].
    pub fn new(script: &'static Script) -> Invocation {
        Invocation::with_capacity(script, 0, 0)
    }

    /// A call of `script` with room for `parts` keys and arguments of `bytes` bytes in all, so
    /// that filling it allocates twice at most (once for the text, once for where parts end).
    pub fn with_capacity(script: &'static Script, parts: usize, bytes: usize) -> Invocation {
        Invocation {
            script,
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(parts),
            keys: 0,
        }
    }

    /// A call of `script` with these keys and arguments: for calls made by hand and tests,
    /// where a part's own allocation does not matter.
    pub fn from_parts<K, A>(
        script: &'static Script,
        keys: impl IntoIterator<Item = K>,
        args: impl IntoIterator<Item = A>,
    ) -> Invocation
    where
        K: AsRef<str>,
        A: AsRef<str>,
    {
        let mut invocation = Invocation::new(script);
        for key in keys {
            invocation.push_key(key.as_ref());
        }
        for arg in args {
            invocation.push_arg(arg.as_ref());
        }
        invocation
    }

    /// Adds a key (the next of `KEYS`).
    ///
    /// # Panics
    ///
    /// When an argument was added already: keys come first in the call and in the buffer, so a
    /// key after an argument would be a caller's mistake, not something to reorder silently.
    pub fn push_key(&mut self, key: &str) {
        self.write_key(|text| text.push_str(key));
    }

    /// Adds an argument (the next of `ARGV`).
    pub fn push_arg(&mut self, arg: &str) {
        self.write_arg(|text| text.push_str(arg));
    }

    /// Adds an integer argument, written in decimal straight into the buffer (no `String` of its
    /// own, unlike `to_string()`).
    pub fn push_int_arg(&mut self, n: impl itoa::Integer) {
        let mut digits = itoa::Buffer::new();
        self.push_arg(digits.format(n));
    }

    /// Adds a key that `write` appends to the buffer (a key of [`crate::store::key`], written in
    /// place rather than made as a `String` and copied).
    pub(crate) fn write_key(&mut self, write: impl FnOnce(&mut String)) {
        assert_eq!(
            self.keys,
            self.ends.len(),
            "a script call's keys come before its arguments"
        );
        write(&mut self.text);
        self.end_part();
        self.keys += 1;
    }

    /// Adds an argument that `write` appends to the buffer.
    pub(crate) fn write_arg(&mut self, write: impl FnOnce(&mut String)) {
        write(&mut self.text);
        self.end_part();
    }

    fn end_part(&mut self) {
        let end = u32::try_from(self.text.len()).expect("a script call's text is below 4 GiB");
        self.ends.push(end);
    }

    /// Its `KEYS`, in order.
    pub fn keys(&self) -> Parts<'_> {
        Parts {
            text: &self.text,
            start: 0,
            ends: &self.ends[..self.keys],
        }
    }

    /// Its `ARGV`, in order.
    pub fn args(&self) -> Parts<'_> {
        Parts {
            text: &self.text,
            start: self.keys.checked_sub(1).map_or(0, |i| self.ends[i]),
            ends: &self.ends[self.keys..],
        }
    }

    /// The bytes of every key and argument together: what a transport reserves room for before
    /// writing them out.
    pub fn text_len(&self) -> usize {
        self.text.len()
    }

    /// The Cluster slot of the first key (every key of an invocation shares it on a Cluster).
    pub fn slot(&self) -> Option<u16> {
        self.keys().first().map(hash_slot)
    }
}

impl fmt::Debug for Invocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Invocation")
            .field("script", &self.script)
            .field("keys", &self.keys())
            .field("args", &self.args())
            .finish()
    }
}

/// The keys or the arguments of an [`Invocation`]: a view into its buffer that reads each part
/// as a `&str` where it lies, indexable and iterable like the `Vec<String>` it stands for.
#[derive(Clone, Copy)]
pub struct Parts<'a> {
    text: &'a str,
    // Where the first part starts.
    start: u32,
    ends: &'a [u32],
}

impl<'a> Parts<'a> {
    /// How many parts there are (the number of keys a call names, for one).
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Part `i`, if there are that many.
    pub fn get(&self, i: usize) -> Option<&'a str> {
        let end = *self.ends.get(i)?;
        let start = match i {
            0 => self.start,
            _ => self.ends[i - 1],
        };
        Some(&self.text[start as usize..end as usize])
    }

    /// The first part, if any.
    pub fn first(&self) -> Option<&'a str> {
        self.get(0)
    }

    /// Each part in order.
    pub fn iter(&self) -> PartsIter<'a> {
        PartsIter {
            parts: *self,
            next: 0,
            end: self.len(),
        }
    }
}

impl<'a> Index<usize> for Parts<'a> {
    type Output = str;

    /// Part `i`; panics past the last, as a slice does.
    fn index(&self, i: usize) -> &str {
        match self.get(i) {
            Some(part) => part,
            None => panic!("part {i} of {}", self.len()),
        }
    }
}

impl<'a> IntoIterator for Parts<'a> {
    type Item = &'a str;
    type IntoIter = PartsIter<'a>;

    fn into_iter(self) -> PartsIter<'a> {
        self.iter()
    }
}

impl<'a> IntoIterator for &Parts<'a> {
    type Item = &'a str;
    type IntoIter = PartsIter<'a>;

    fn into_iter(self) -> PartsIter<'a> {
        self.iter()
    }
}

impl fmt::Debug for Parts<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<S: AsRef<str>> PartialEq<[S]> for Parts<'_> {
    fn eq(&self, other: &[S]) -> bool {
        self.len() == other.len() && self.iter().zip(other).all(|(a, b)| a == b.as_ref())
    }
}

impl<S: AsRef<str>, const N: usize> PartialEq<[S; N]> for Parts<'_> {
    fn eq(&self, other: &[S; N]) -> bool {
        *self == other[..]
    }
}

impl<S: AsRef<str>> PartialEq<Vec<S>> for Parts<'_> {
    fn eq(&self, other: &Vec<S>) -> bool {
        *self == other[..]
    }
}

/// The parts of [`Parts`], in order.
#[derive(Debug, Clone)]
pub struct PartsIter<'a> {
    parts: Parts<'a>,
    // The parts left are `next..end`.
    next: usize,
    end: usize,
}

impl<'a> Iterator for PartsIter<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        if self.next == self.end {
            return None;
        }
        self.next += 1;
        self.parts.get(self.next - 1)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.end - self.next;
        (left, Some(left))
    }
}

impl<'a> DoubleEndedIterator for PartsIter<'a> {
    fn next_back(&mut self) -> Option<&'a str> {
        if self.next == self.end {
            return None;
        }
        self.end -= 1;
        self.parts.get(self.end)
    }
}

impl ExactSizeIterator for PartsIter<'_> {}

impl FusedIterator for PartsIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Algorithm;

    #[test]
    fn keys_and_arguments_read_back_as_pushed() {
        let script = Script::single(Algorithm::Gcra);
        let none = Invocation::new(script);
        assert!(none.keys().is_empty() && none.args().is_empty());
        assert_eq!(none.slot(), None);
        let mut call = Invocation::new(script);
        call.push_key("{a}:x");
        call.push_key("");
        call.push_arg("");
        call.push_int_arg(-42i64);
        call.push_arg("é\n\"");
        assert_eq!(call.keys(), ["{a}:x", ""]);
        assert_eq!(call.args(), ["", "-42", "é\n\""]);
        assert_eq!(call.args().len(), 3);
        assert_eq!(&call.args()[1], "-42");
        assert_eq!(call.args().get(3), None);
        assert_eq!(call.slot(), Some(hash_slot("{a}:x")));
        assert_eq!(call.args().iter().next_back(), Some("é\n\""));
        assert_eq!(
            call.args().iter().rev().collect::<Vec<_>>(),
            ["é\n\"", "-42", ""]
        );
        assert_eq!(
            call,
            Invocation::from_parts(script, ["{a}:x", ""], ["", "-42", "é\n\""])
        );
        // Where one part ends and the next begins is part of equality.
        assert_ne!(
            Invocation::from_parts(script, ["ab"], [""; 0]),
            Invocation::from_parts(script, ["a", "b"], [""; 0])
        );
        assert_ne!(
            Invocation::from_parts(script, ["a"], ["b"]),
            Invocation::from_parts(script, ["a", "b"], [""; 0])
        );
        let args_only = Invocation::from_parts(script, [""; 0], ["1", "2"]);
        assert_eq!(args_only.args(), ["1", "2"]);
        assert!(args_only.keys().is_empty());
        let debug = format!("{call:?}");
        assert!(
            debug.ends_with(r#"keys: ["{a}:x", ""], args: ["", "-42", "é\n\""] }"#),
            "{debug}"
        );
    }

    #[test]
    #[should_panic(expected = "keys come before its arguments")]
    fn a_key_after_an_argument_is_refused() {
        let mut call = Invocation::new(Script::multi());
        call.push_arg("1");
        call.push_key("k");
    }
}
