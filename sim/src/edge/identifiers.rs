//! Identifiers by dense id, shared by the replay's store and its truths: an identifier is looked
//! up by its bytes once per request, and every state of it — each limit's state in the store,
//! each limit's exact log in the truth — is then found by indexing with its id, not by hashing
//! again.

use std::collections::HashMap;

use edgelimit::Identifier;
use rustc_hash::FxBuildHasher;

use super::inline_id::InlineId;

/// The identifiers seen so far, each with a dense id (0, 1, 2, … in order of first sight).
#[derive(Debug, Default)]
pub struct Identifiers {
    ids: HashMap<InlineId, u32, FxBuildHasher>,
    names: Vec<Identifier>,
    /// The ones looked up in this request: its limits mostly share one or two identifiers, and
    /// these are found by their bytes without touching the map.
    recent: Vec<(Identifier, u32)>,
}

impl Identifiers {
    /// Forgets the per-request memory (call before each request).
    pub fn next_request(&mut self) {
        self.recent.clear();
    }

    /// The dense id of `identifier`.
    pub fn id(&mut self, identifier: &Identifier) -> u32 {
        let bytes = identifier.as_bytes();
        if let Some((_, id)) = self.recent.iter().find(|(i, _)| i.as_bytes() == bytes) {
            return *id;
        }
        let key = InlineId::of(identifier);
        let id = match self.ids.get(&key) {
            Some(&id) => id,
            None => {
                let id = u32::try_from(self.names.len()).expect("fewer than 2^32 identifiers");
                self.ids.insert(key, id);
                self.names.push(identifier.clone());
                id
            }
        };
        self.recent.push((identifier.clone(), id));
        id
    }

    /// The identifier of a dense id.
    pub fn name(&self, id: u32) -> &Identifier {
        &self.names[id as usize]
    }

    /// How many identifiers have an id.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether none has.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_get_one_dense_id_each() {
        let mut ids = Identifiers::default();
        let a = ids.id(&Identifier::from("a"));
        let b = ids.id(&Identifier::from("b"));
        assert_eq!(ids.id(&Identifier::from("a")), a);
        ids.next_request();
        assert_eq!(
            (
                ids.id(&Identifier::from("a")),
                ids.id(&Identifier::from("b"))
            ),
            (a, b)
        );
        assert_ne!(a, b);
        assert_eq!(ids.name(b), &Identifier::from("b"));
        assert_eq!(ids.len(), 2);
        // Long identifiers (a hashed API key) are keyed by their bytes too.
        let long = "k".repeat(64);
        let l = ids.id(&Identifier::from(long.as_str()));
        ids.next_request();
        assert_eq!(ids.id(&Identifier::from(long.as_str())), l);
        assert_ne!(ids.id(&Identifier::from("k".repeat(65).as_str())), l);
    }
}
