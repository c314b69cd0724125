//! The fixed-size states as a few `u64` words, for callers that keep many states side by side in
//! flat arrays rather than as [`State`](super::State) values (the simulator keeps each client's
//! states of every policy together in a cache line or two).
//!
//! A state declares its word form where it is defined, by wrapping its struct in `word_state!`:
//! every field is one `u64` word, in declaration order, so a new field is one edit and can never
//! be left out of the encoding. The sliding log and the concurrency leases grow with their
//! entries and have no word form.

/// A state that is a fixed number of `u64` words. `Default` (no state yet) is all zeros.
pub trait Words: Copy + Default + PartialEq {
    /// How many words the state takes.
    const WORDS: usize;

    /// Reads the state from the first [`Words::WORDS`] words.
    ///
    /// # Panics
    ///
    /// If `words` is shorter than that (a caller's layout error, not an input error).
    fn from_words(words: &[u64]) -> Self;

    /// Writes the state into the first [`Words::WORDS`] words.
    ///
    /// # Panics
    ///
    /// If `words` is shorter than that.
    fn to_words(&self, words: &mut [u64]);
}

/// Defines a state struct whose fields are all `u64`, and its [`Words`] form: field `i` is word
/// `i`.
macro_rules! word_state {
    (
        $(#[$attr:meta])*
        pub struct $name:ident {
            $( $(#[$field_attr:meta])* pub $field:ident: u64, )+
        }
    ) => {
        $(#[$attr])*
        pub struct $name {
            $( $(#[$field_attr])* pub $field: u64, )+
        }

        impl $crate::algorithm::Words for $name {
            const WORDS: usize = [$(stringify!($field)),+].len();

            #[inline]
            fn from_words(words: &[u64]) -> Self {
                let mut words = words[..Self::WORDS].iter();
                $name { $( $field: *words.next().expect("sliced to WORDS"), )+ }
            }

            #[inline]
            fn to_words(&self, words: &mut [u64]) {
                let mut words = words[..Self::WORDS].iter_mut();
                $( *words.next().expect("sliced to WORDS") = self.$field; )+
            }
        }
    };
}

pub(crate) use word_state;

#[cfg(test)]
mod tests {
    use super::super::{FixedWindowState, GcraState, SlidingCounterState, TokenBucketState};
    use super::Words;

    fn round_trip<S: Words + std::fmt::Debug>(state: S, words: &[u64]) {
        let mut out = vec![u64::MAX; S::WORDS + 1];
        state.to_words(&mut out);
        assert_eq!(&out[..S::WORDS], words);
        assert_eq!(out[S::WORDS], u64::MAX, "wrote past its words");
        assert_eq!(S::from_words(&out), state);
        assert_eq!(S::from_words(&vec![0; S::WORDS]), S::default());
    }

    #[test]
    fn each_field_is_one_word_in_declaration_order() {
        round_trip(
            FixedWindowState {
                seen_ms: 1,
                count: 2,
            },
            &[1, 2],
        );
        round_trip(
            SlidingCounterState {
                seen_ms: 1,
                previous: 2,
                current: 3,
            },
            &[1, 2, 3],
        );
        round_trip(
            TokenBucketState {
                seen_ms: 1,
                deficit: 2,
                capacity: 3,
            },
            &[1, 2, 3],
        );
        round_trip(
            GcraState {
                tat_ms: 1,
                tat_rem: 2,
                seen_ms: 3,
            },
            &[1, 2, 3],
        );
    }
}
