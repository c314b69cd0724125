//! Script replies in a transport-neutral form, and reading them back into decisions.

use crate::decision::{Decision, Reason, RETRY_NEVER};
use crate::global::take::Taken;
use crate::store::StoreError;

/// A Redis reply as any transport delivers it (RESP, or Upstash REST's JSON), reduced to what the
/// limiter scripts return. Status replies may be given as [`Reply::Bulk`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A nil reply.
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk (or status) string.
    Bulk(Vec<u8>),
    /// An array.
    Array(Vec<Reply>),
    /// An error reply, with its message (e.g. `NOSCRIPT No matching script…`).
    Error(String),
}

/// Whether an error reply says the script is not in the server's cache, so the call must be
/// repeated with `EVAL` and the source (nothing was executed).
pub fn is_noscript(message: &str) -> bool {
    message.starts_with("NOSCRIPT")
}

/// Fields per decision in a script reply: allowed, limit, remaining, reset_at_ms,
/// retry_after_ms (-1 for never), reason.
const FIELDS: usize = 6;

/// A script reply read back: the overall verdict, the time the script decided at, the decisions.
pub(super) struct Parsed {
    pub(super) allowed: bool,
    pub(super) decided_at_ms: u64,
    pub(super) decisions: Vec<Decision>,
}

/// Values before the decisions: `allowed` and the time decided at.
const HEAD: usize = 2;

/// Reads a script reply: `allowed`, the time decided at, then [`FIELDS`] integers per decision,
/// checking there are exactly `items` decisions.
pub(super) fn parse(reply: &Reply, items: usize) -> Result<Parsed, StoreError> {
    let parsed = parse_unchecked(reply, items)?;
    // The scripts admit only when every limit admits. A reply saying otherwise was corrupted
    // on the way (or forged): trusting its flag could admit a request a limit denied.
    consistent(&parsed, false, reply)?;
    Ok(parsed)
}

/// Whether a reply's verdict is what its decisions (and, gated, a deny list's match) make it.
fn consistent(parsed: &Parsed, denied_by_list: bool, reply: &Reply) -> Result<(), StoreError> {
    let expected = !denied_by_list && parsed.decisions.iter().all(|d| d.allowed);
    if parsed.allowed != expected {
        return Err(protocol(format!(
            "the verdict ({}) disagrees with its decisions: {reply:?}",
            parsed.allowed
        )));
    }
    Ok(())
}

/// [`parse`] without the verdict's consistency check.
fn parse_unchecked(reply: &Reply, items: usize) -> Result<Parsed, StoreError> {
    let values = match reply {
        Reply::Array(values) => values,
        Reply::Error(message) => return Err(StoreError::from_error_reply(message)),
        other => return Err(protocol(format!("expected an array, got {other:?}"))),
    };
    if values.len() != HEAD + FIELDS * items {
        return Err(protocol(format!(
            "expected {} values for {items} decision(s), got {}",
            HEAD + FIELDS * items,
            values.len()
        )));
    }
    let ints = values.iter().map(int).collect::<Result<Vec<i64>, _>>()?;
    let allowed = flag(ints[0])?;
    let decided_at_ms = u64::try_from(ints[1])
        .map_err(|_| protocol(format!("negative decision time {}", ints[1])))?;
    let decisions = ints[HEAD..]
        .chunks_exact(FIELDS)
        .map(decision)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Parsed {
        allowed,
        decided_at_ms,
        decisions,
    })
}

/// Values per gate at the end of a gated reply: kind (0 none, 1 denied, 2 allowed), the
/// 1-based position of the matching list among the gate's deny (or allow) lists, the member.
const GATE_FIELDS: usize = 3;

/// What one gate found, as a gated reply says it: (kind, list position, member).
pub(super) type GateFound = (u8, usize, String);

/// Reads a gated multi-limit reply: as [`parse`] for `items` decisions, then [`GATE_FIELDS`]
/// values for each of `gates` gates.
pub(super) fn parse_gated(
    reply: &Reply,
    items: usize,
    gates: usize,
) -> Result<(Parsed, Vec<GateFound>), StoreError> {
    let values = match reply {
        Reply::Array(values) => values,
        Reply::Error(message) => return Err(StoreError::from_error_reply(message)),
        other => return Err(protocol(format!("expected an array, got {other:?}"))),
    };
    let tail = GATE_FIELDS * gates;
    if values.len() < tail {
        return Err(protocol(format!(
            "expected {tail} gate values, got {} values in all",
            values.len()
        )));
    }
    let (head, found) = values.split_at(values.len() - tail);
    let parsed = parse_unchecked(&Reply::Array(head.to_vec()), items)?;
    let found = found
        .chunks_exact(GATE_FIELDS)
        .map(|g| {
            let kind = match int(&g[0])? {
                k @ 0..=2 => k as u8,
                other => return Err(protocol(format!("unknown gate kind {other}"))),
            };
            let position = usize::try_from(int(&g[1])?)
                .map_err(|_| protocol(format!("negative list position {:?}", g[1])))?;
            let member = match &g[2] {
                Reply::Bulk(bytes) => String::from_utf8(bytes.clone())
                    .map_err(|_| protocol("a list member is not UTF-8".to_string()))?,
                other => return Err(protocol(format!("expected a member, got {other:?}"))),
            };
            Ok((kind, position, member))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    // A deny match refuses the check even when it has no item to show for it; a denylisted
    // decision only comes with one.
    let denied_by_list = found.iter().any(|f| f.0 == 1);
    if denied_by_list
        != parsed
            .decisions
            .iter()
            .any(|d| d.reason == Reason::Denylisted)
        && !parsed.decisions.is_empty()
    {
        return Err(protocol(format!(
            "a deny list match and denylisted decisions disagree: {reply:?}"
        )));
    }
    consistent(&parsed, denied_by_list, reply)?;
    Ok((parsed, found))
}

/// Reads a take script's reply (take.lua): the time decided at, then per take the units taken
/// and [`FIELDS`] integers of its decision, checking there are exactly `takes`.
pub(super) fn parse_taken(reply: &Reply, takes: usize) -> Result<Vec<Taken>, StoreError> {
    let values = match reply {
        Reply::Array(values) => values,
        Reply::Error(message) => return Err(StoreError::from_error_reply(message)),
        other => return Err(protocol(format!("expected an array, got {other:?}"))),
    };
    if values.len() != 1 + (1 + FIELDS) * takes {
        return Err(protocol(format!(
            "expected {} values for {takes} take(s), got {}",
            1 + (1 + FIELDS) * takes,
            values.len()
        )));
    }
    let ints = values.iter().map(int).collect::<Result<Vec<i64>, _>>()?;
    ints[1..]
        .chunks_exact(1 + FIELDS)
        .map(|f| {
            let granted = u64::try_from(f[0])
                .map_err(|_| protocol(format!("a take granted {} units", f[0])))?;
            Ok(Taken {
                granted,
                decision: decision(&f[1..])?,
            })
        })
        .collect()
}

fn decision(f: &[i64]) -> Result<Decision, StoreError> {
    let unsigned = |v: i64| u64::try_from(v).map_err(|_| protocol(format!("negative field {v}")));
    let allowed = flag(f[0])?;
    // A script admits with reason 0 (4: allowlisted, 5: from a capacity lease, 7: after a
    // wait) and denies with 1, 2 (3: denylisted, 6: blocked), never otherwise.
    if allowed != matches!(f[5], 0 | 4 | 5 | 7) {
        return Err(protocol(format!(
            "allowed {} with reason code {}",
            f[0], f[5]
        )));
    }
    Ok(Decision {
        allowed,
        limit: unsigned(f[1])?,
        remaining: unsigned(f[2])?,
        reset_at_ms: unsigned(f[3])?,
        // RETRY_NEVER (u64::MAX) is no Lua number: the scripts send -1.
        retry_after_ms: if f[4] == -1 {
            RETRY_NEVER
        } else {
            unsigned(f[4])?
        },
        reason: match f[5] {
            0 => Reason::Admitted,
            1 => Reason::OverLimit,
            2 => Reason::CostExceedsCapacity,
            3 => Reason::Denylisted,
            4 => Reason::Allowlisted,
            5 => Reason::Leased,
            6 => Reason::Blocked,
            7 => Reason::Delayed,
            other => return Err(protocol(format!("unknown reason code {other}"))),
        },
    })
}

pub(super) fn int(value: &Reply) -> Result<i64, StoreError> {
    match value {
        Reply::Int(v) => Ok(*v),
        // Some transports hand integers over as text.
        Reply::Bulk(text) => std::str::from_utf8(text)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| protocol(format!("expected an integer, got {value:?}"))),
        other => Err(protocol(format!("expected an integer, got {other:?}"))),
    }
}

fn flag(v: i64) -> Result<bool, StoreError> {
    match v {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(protocol(format!("expected 0 or 1, got {other}"))),
    }
}

pub(super) fn protocol(message: String) -> StoreError {
    StoreError::Protocol(format!("limiter script reply: {message}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(values: &[i64]) -> Reply {
        Reply::Array(values.iter().map(|&v| Reply::Int(v)).collect())
    }

    #[test]
    fn a_deny_list_refuses_even_a_check_without_items() {
        // Found by the lists differential: a denied gated check with no item was read as a
        // contradiction (no decision denies it).
        let gated = |allowed: i64, kind: i64| {
            Reply::Array(vec![
                Reply::Int(allowed),
                Reply::Int(5),
                Reply::Int(kind),
                Reply::Int(1),
                Reply::Bulk(b"ip 203.0.113.7".to_vec()),
            ])
        };
        let (parsed, found) = parse_gated(&gated(0, 1), 0, 1).unwrap();
        assert!(!parsed.allowed);
        assert_eq!(found, [(1, 1, "ip 203.0.113.7".to_string())]);
        assert!(parse_gated(&gated(1, 1), 0, 1).is_err());
        assert!(parse_gated(&gated(0, 2), 0, 1).is_err());
        assert!(parse_gated(&gated(1, 2), 0, 1).unwrap().0.allowed);
    }

    #[test]
    fn replies_that_contradict_themselves_are_refused() {
        // Found by the script_reply fuzz target: these were read as verdicts. A flag saying
        // "allowed" over a denying decision would admit a request the limit refused.
        // Each reply: allowed, the time decided at, then six fields per decision.
        for contradiction in [
            // Denied, with reason "admitted".
            ints(&[0, 5, 0, 0, 0, 0, 2, 0]),
            // Admitted, with reason "over limit".
            ints(&[1, 5, 1, 10, 9, 1000, 0, 1]),
            // The overall flag admits, the decision denies.
            ints(&[1, 5, 0, 10, 0, 1000, 500, 1]),
            // The overall flag denies, every decision admits.
            ints(&[0, 5, 1, 10, 9, 1000, 0, 0]),
            // Denied, with reason "admitted from a lease".
            ints(&[0, 5, 0, 10, 0, 1000, 500, 5]),
        ] {
            assert!(
                matches!(parse(&contradiction, 1), Err(StoreError::Protocol(_))),
                "{contradiction:?}"
            );
        }
        // What the scripts really send still reads: a denial, and a multi-limit denial where
        // one limit would have admitted alone.
        assert!(
            !parse(&ints(&[0, 5, 0, 10, 0, 1000, 500, 1]), 1)
                .unwrap()
                .allowed
        );
        let leased = parse(&ints(&[1, 5, 1, 10, 70, 1000, 0, 5]), 1).unwrap();
        assert_eq!(leased.decisions[0].reason, Reason::Leased);
        assert_eq!(leased.decisions[0].remaining, 70);
        let Parsed {
            allowed, decisions, ..
        } = parse(
            &ints(&[0, 5, 1, 10, 9, 1000, 0, 0, 0, 5, 0, 60_000, 100, 1]),
            2,
        )
        .unwrap();
        assert!(!allowed && decisions[0].allowed && !decisions[1].allowed);
    }
}
