//! Where everything replay keeps per client lives: which states a client has (every policy, then
//! the distinct exact references), where each sits in the client's record, and which policies
//! share a reference window (and so one ring of admissions).

use edgelimit::algorithm::Words;
use edgelimit::algorithm::{FixedWindowState, GcraState, SlidingCounterState, TokenBucketState};
use edgelimit::{Algorithm, Policy};

use crate::error::SimError;
use crate::exact::reference::reference;

/// The word of a client's request count in its record.
pub(super) const REQUESTS_WORD: usize = 0;

/// Where one state lives: a word offset in the client's record (the fixed-size states, in their
/// library word form), or its index among the client's sliding logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Slot {
    Fixed(usize),
    Counter(usize),
    Bucket(usize),
    Gcra(usize),
    Log(usize),
}

/// One policy under replay.
#[derive(Debug)]
pub(super) struct Run {
    pub(super) policy: Policy,
    pub(super) reference: Policy,
    /// The reference's slot, or `None` when the policy *is* its own reference (the sliding log),
    /// whose decisions are then the ground truth itself.
    pub(super) reference_slot: Option<usize>,
    /// Its reference window's group, and its bit in that group's ring entries.
    pub(super) group: usize,
    pub(super) bit: u32,
    /// The word holding its admitted cost in the trailing reference window.
    pub(super) sum_word: usize,
    /// Its sliding log's index among the client's logs, if it is one.
    pub(super) log: Option<usize>,
}

/// Policies held against the same reference window (at most 32, one bit each), sharing a ring.
#[derive(Debug)]
pub(super) struct Group {
    pub(super) window_ms: u64,
    /// The sum word of each member, by bit.
    pub(super) sum_words: Vec<usize>,
}

/// The layout of a replay of some policies.
#[derive(Debug)]
pub(super) struct Layout {
    /// One per policy, in order.
    pub(super) runs: Vec<Run>,
    /// Every state a client has: the policies' (slot `k` is policy `k`'s), then the references
    /// no policy provides.
    pub(super) slots: Vec<(Policy, Slot)>,
    pub(super) groups: Vec<Group>,
    /// Words in a client's record: the request count, the fixed-size states, the sums.
    pub(super) words: usize,
    /// Sliding logs per client.
    pub(super) logs: usize,
}

impl Layout {
    /// Lays out the rate `policies` (none at all when only concurrency policies are replayed:
    /// the record then holds the request count alone).
    pub(super) fn new(policies: &[Policy]) -> Result<Layout, SimError> {
        let mut slot_policies: Vec<Policy> = policies.to_vec();
        let mut references = Vec::new();
        for policy in policies {
            let reference = reference(policy)?;
            // The ground truth reuses an identical slot when there is one — a listed
            // `sliding-log` policy is its own reference — so no log is stepped twice.
            let reference_slot = if reference == *policy {
                None
            } else {
                Some(match slot_policies.iter().position(|p| *p == reference) {
                    Some(k) => k,
                    None => {
                        slot_policies.push(reference);
                        slot_policies.len() - 1
                    }
                })
            };
            references.push((reference, reference_slot));
        }
        let mut next_word = REQUESTS_WORD + 1;
        let mut logs = 0;
        let mut take = |n: usize| {
            next_word += n;
            next_word - n
        };
        let mut slots = Vec::new();
        for policy in slot_policies {
            let slot = match policy.algorithm() {
                Algorithm::FixedWindow => Slot::Fixed(take(FixedWindowState::WORDS)),
                Algorithm::SlidingCounter => Slot::Counter(take(SlidingCounterState::WORDS)),
                Algorithm::TokenBucket => Slot::Bucket(take(TokenBucketState::WORDS)),
                Algorithm::Gcra => Slot::Gcra(take(GcraState::WORDS)),
                Algorithm::SlidingLog => {
                    logs += 1;
                    Slot::Log(logs - 1)
                }
                Algorithm::Concurrency => {
                    // `Replay` hands concurrency policies to `inflight`, never here.
                    return Err(SimError::Usage(format!(
                        "`{policy}` is a concurrency limit: it has no place in a client's \
                         record of rate states (exact::inflight replays it)"
                    )));
                }
            };
            slots.push((policy, slot));
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut runs = Vec::new();
        for (k, (policy, (reference, reference_slot))) in
            policies.iter().zip(references).enumerate()
        {
            let sum_word = take(1);
            let window_ms = reference.window_ms();
            let group = match groups
                .iter()
                .position(|g| g.window_ms == window_ms && g.sum_words.len() < 32)
            {
                Some(g) => g,
                None => {
                    groups.push(Group {
                        window_ms,
                        sum_words: Vec::new(),
                    });
                    groups.len() - 1
                }
            };
            let bit = 1u32 << groups[group].sum_words.len();
            groups[group].sum_words.push(sum_word);
            let log = match slots[k].1 {
                Slot::Log(l) => Some(l),
                _ => None,
            };
            runs.push(Run {
                policy: *policy,
                reference,
                reference_slot,
                group,
                bit,
                sum_word,
                log,
            });
        }
        Ok(Layout {
            runs,
            slots,
            groups,
            words: next_word,
            logs,
        })
    }
}
