//! Tiers and overrides: which policy decides for one identifier on one limit.
//!
//! A [`Limit`] may name [`Tiers`] — alternative policies of its own algorithm, e.g. `free` and
//! `pro` — its own policy being the default. An identifier holds at most one tier and at most one
//! explicit override policy, each an [`Assignment`] with an optional `until`: a temporary
//! override on a `pro` customer lapses back to `pro`. Stores keep them beside the identifier's
//! state (one Redis key in the same hash tag, [`crate::store::key::control_key`], holding one
//! [`Assignment::encode`] line per kind) and read them in the very script and round trip that
//! decides, so assignments cost no extra round trip.
//!
//! **The effective policy** of (limit, identifier) at `now` ([`effective_policy`]): an unlapsed
//! override's policy if it has the limit's algorithm (an override of another algorithm is
//! ignored: the state would mean nothing to it); else an unlapsed tier the limit knows; else the
//! limit's own policy. An assignment lapses at its `until` (epoch ms; lapsed when `now ≥ until`)
//! — expiry is data compared with now, never a Redis TTL. What happens to the identifier's state
//! when its policy changes is defined per algorithm in docs/design.md §2, "Policy changes".

use std::fmt;
use std::sync::Arc;

use crate::policy::{Algorithm, Policy};
use crate::store::Limit;

/// The longest tier name, in bytes.
pub const MAX_TIER_NAME_LEN: usize = 64;

/// Whether `name` is a valid tier name: 1–64 of `A-Za-z0-9-_.` (so it needs no escaping in a
/// stored assignment or in the scripts' tier table).
pub fn valid_tier_name(name: &str) -> bool {
    (1..=MAX_TIER_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The two kinds of assignment an identifier may hold at once, one of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AssignmentKind {
    /// [`Assignment::Tier`].
    Tier,
    /// [`Assignment::Override`].
    Override,
}

impl AssignmentKind {
    /// The letter naming the kind in the stored text: `t` or `o`.
    pub const fn letter(self) -> &'static str {
        match self {
            AssignmentKind::Tier => "t",
            AssignmentKind::Override => "o",
        }
    }
}

/// What an identifier is assigned on a limit: one of the limit's tiers by name, or a policy of
/// its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Assignment {
    /// A tier of the limit. A name the limit does not know decides with the limit's own policy
    /// (a tier removed from the configuration falls back to the default, it does not fail).
    Tier(Arc<str>),
    /// An explicit policy. Honoured only when it has the limit's algorithm.
    Override(Policy),
}

impl Assignment {
    /// Which kind it is.
    pub const fn kind(&self) -> AssignmentKind {
        match self {
            Assignment::Tier(_) => AssignmentKind::Tier,
            Assignment::Override(_) => AssignmentKind::Override,
        }
    }

    /// The text stored at the control key, one line per kind held: `"<until_ms> t <tier>"` or
    /// `"<until_ms> o <algorithm code> <limit> <window> <capacity>"`, the window in ms or a
    /// calendar's code ([`Policy::script_window`]) (the codes of the
    /// multi-limit script: 1 fixed, 2 sliding-log, 3 sliding-counter, 4 token-bucket, 5 gcra,
    /// 6 concurrency). `until` 0 means it never lapses; `Some(0)` is stored as 1 (lapsed from
    /// the first millisecond after the epoch), so it cannot read back as "never".
    pub fn encode(&self, until_ms: Option<u64>) -> String {
        let until = until_ms.map_or(0, |u| u.max(1));
        match self {
            Assignment::Tier(name) => format!("{until} t {name}"),
            Assignment::Override(p) => format!(
                "{until} o {} {} {} {}",
                algorithm_code(p.algorithm()),
                p.limit(),
                p.script_window(),
                p.capacity()
            ),
        }
    }

    /// Reads every line of a control key's text (each written by [`Assignment::encode`]), the
    /// override first. The error names the line and field that are wrong.
    pub fn decode_all(text: &str) -> Result<Vec<(Assignment, Option<u64>)>, String> {
        let mut all = text
            .split('\n')
            .map(Assignment::decode)
            .collect::<Result<Vec<_>, _>>()?;
        all.sort_by_key(|(a, _)| a.kind() == AssignmentKind::Tier);
        Ok(all)
    }

    /// Reads the text [`Assignment::encode`] writes. The error names the field that is wrong and
    /// quotes the text.
    pub fn decode(text: &str) -> Result<(Assignment, Option<u64>), String> {
        let bad = |what: String| format!("unreadable assignment `{text}`: {what}");
        let mut words = text.split(' ');
        let until = words.next().unwrap_or("");
        let until: u64 = number(until).ok_or_else(|| {
            bad(format!(
                "the until time `{until}` is not a whole number of ms"
            ))
        })?;
        let until = (until != 0).then_some(until);
        let assignment = match words.next() {
            Some("t") => {
                let name = words.next().unwrap_or("");
                if !valid_tier_name(name) {
                    return Err(bad(format!(
                        "the tier name `{name}` is not 1–{MAX_TIER_NAME_LEN} of A-Za-z0-9-_."
                    )));
                }
                Assignment::Tier(name.into())
            }
            Some("o") => {
                let mut field = |what: &str| {
                    let word = words.next().unwrap_or("");
                    number(word).ok_or_else(|| bad(format!("the {what} `{word}` is not a number")))
                };
                let code = field("algorithm code")?;
                let (limit, window, capacity) =
                    (field("limit")?, field("window")?, field("capacity")?);
                let algorithm = u8::try_from(code)
                    .ok()
                    .and_then(algorithm_of_code)
                    .ok_or_else(|| bad(format!("the algorithm code `{code}` is not 1–6")))?;
                let burst = algorithm.takes_burst().then_some(capacity);
                let policy = Policy::from_script_parts(algorithm, limit, window, burst)
                    .map_err(|e| bad(format!("the override policy: {e}")))?;
                if policy.capacity() != capacity {
                    return Err(bad(format!(
                        "the capacity `{capacity}` differs from the limit `{limit}` of a `{algorithm}` policy"
                    )));
                }
                Assignment::Override(policy)
            }
            Some(other) => {
                return Err(bad(format!(
                    "the kind `{other}` is neither `t` (tier) nor `o` (override)"
                )))
            }
            None => return Err(bad("no kind (`t` or `o`) after the until time".into())),
        };
        if let Some(extra) = words.next() {
            return Err(bad(format!("unexpected `{extra}` at the end")));
        }
        Ok((assignment, until))
    }
}

impl fmt::Display for Assignment {
    /// `tier <name>` or `override <policy spec>`, for people.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Assignment::Tier(name) => write!(f, "tier {name}"),
            Assignment::Override(policy) => write!(f, "override {policy}"),
        }
    }
}

/// A whole decimal number with no sign and no leading `+`.
fn number(word: &str) -> Option<u64> {
    if word.is_empty() || !word.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    word.parse().ok()
}

/// The named policies of a limit besides its own (the default). Cheap to clone; `Default` is
/// none. Every tier has the limit's algorithm, so an identifier moving between tiers keeps its
/// state (docs/design.md §2, "Policy changes").
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Tiers {
    inner: Option<Arc<TierTable>>,
}

#[derive(PartialEq, Eq, Hash)]
struct TierTable {
    tiers: Vec<(Arc<str>, Policy)>,
    // The scripts' form, built once: `name=limit,window,capacity;…`.
    script: String,
}

impl Tiers {
    /// The tiers of a limit whose policies have `algorithm`. Errors name the offending tier: a
    /// name that is not 1–64 of `A-Za-z0-9-_.`, a name given twice, or a policy of another
    /// algorithm.
    pub fn new<N: Into<Arc<str>>>(
        algorithm: Algorithm,
        tiers: impl IntoIterator<Item = (N, Policy)>,
    ) -> Result<Tiers, String> {
        let mut table: Vec<(Arc<str>, Policy)> = Vec::new();
        for (name, policy) in tiers {
            let name: Arc<str> = name.into();
            if !valid_tier_name(&name) {
                return Err(format!(
                    "tier `{name}`: a tier name is 1–{MAX_TIER_NAME_LEN} of A-Za-z0-9-_."
                ));
            }
            if table.iter().any(|(n, _)| *n == name) {
                return Err(format!("tier `{name}` is named twice"));
            }
            if policy.algorithm() != algorithm {
                return Err(format!(
                    "tier `{name}`: its policy `{policy}` is not `{algorithm}`, the limit's \
                     algorithm (an identifier changing tier keeps its state, which only the same \
                     algorithm can read)"
                ));
            }
            table.push((name, policy));
        }
        if table.is_empty() {
            return Ok(Tiers::default());
        }
        let script = table
            .iter()
            .map(|(n, p)| format!("{n}={},{},{}", p.limit(), p.script_window(), p.capacity()))
            .collect::<Vec<_>>()
            .join(";");
        Ok(Tiers {
            inner: Some(Arc::new(TierTable {
                tiers: table,
                script,
            })),
        })
    }

    /// The policy of the tier named `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Policy> {
        self.iter().find(|(n, _)| *n == name).map(|(_, p)| p)
    }

    /// The tiers in the order given.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Policy)> {
        self.inner
            .iter()
            .flat_map(|t| t.tiers.iter().map(|(n, p)| (&**n, p)))
    }

    /// How many tiers there are.
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |t| t.tiers.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.inner.is_none()
    }

    /// The table the scripts' `ctl` option takes: `name=limit,window_ms,capacity` joined by `;`
    /// (empty when there are no tiers).
    pub fn script_table(&self) -> &str {
        self.inner.as_ref().map_or("", |t| t.script.as_str())
    }
}

impl fmt::Debug for Tiers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.iter().map(|(n, p)| (n, p.to_string())))
            .finish()
    }
}

/// The policy that decides for an identifier of `limit` holding `assigned` (its assignments,
/// each with when it lapses) at `now_ms`: an unlapsed override of the limit's algorithm, else an
/// unlapsed tier the limit knows, else the limit's own policy. The scripts' twin is `control` in
/// prelude.lua.
pub fn effective_policy<'a>(
    limit: &'a Limit,
    assigned: &'a [(Assignment, Option<u64>)],
    now_ms: u64,
) -> &'a Policy {
    let algorithm = limit.policy.algorithm();
    let live =
        |(a, until): &'a (Assignment, Option<u64>)| until.is_none_or(|u| now_ms < u).then_some(a);
    let over = assigned.iter().filter_map(live).find_map(|a| match a {
        Assignment::Override(p) if p.algorithm() == algorithm => Some(p),
        _ => None,
    });
    let tier = || {
        assigned.iter().filter_map(live).find_map(|a| match a {
            Assignment::Tier(name) => limit.tiers.get(name),
            _ => None,
        })
    };
    over.or_else(tier).unwrap_or(&limit.policy)
}

/// How long past its latest `until`, on Redis's clock, a control key is kept before Redis may
/// collect it: a day, so callers whose clock lags (or replays on a virtual clock) still find it.
/// Only garbage collection: whether an assignment holds is decided by comparing `until` with now.
pub const ASSIGNMENT_GRACE_MS: u64 = 24 * 60 * 60 * 1000;

/// The script that changes a control key (sent with `EVAL`: assignments change rarely). KEYS\[1\]
/// the control key; ARGV\[1\] the kind replaced (`t`, `o`, or empty for both), ARGV\[2\] its new line
/// (empty: none), ARGV\[3\] the grace. One line per kind is kept; the key is deleted when none is
/// left, else written with a TTL a grace past the latest `until` on Redis's clock (none while a
/// line never lapses). A read-modify-write in one script, so two writers cannot lose a line.
// Public with the commands below: the Redis stores' transport-neutral contract, for any client.
pub const ASSIGN_SCRIPT: &str = r#"
local raw = redis.call('GET', KEYS[1])
local kept = {}
if raw and ARGV[1] ~= '' then
  for line in string.gmatch(raw, '[^\n]+') do
    if not string.match(line, '^%d+ ' .. ARGV[1] .. ' ') then
      kept[#kept + 1] = line
    end
  end
end
if ARGV[2] ~= '' then
  kept[#kept + 1] = ARGV[2]
end
if #kept == 0 then
  redis.call('DEL', KEYS[1])
  return 0
end
local latest = 0
for _, line in ipairs(kept) do
  local u = tonumber(string.match(line, '^(%d+) '))
  if u == 0 then
    latest = nil
    break
  end
  latest = math.max(latest, u)
end
local value = table.concat(kept, '\n')
if latest then
  local time = redis.call('TIME')
  local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  redis.call('SET', KEYS[1], value, 'PX', string.format('%d', math.max(latest - now, 0) + tonumber(ARGV[3])))
else
  redis.call('SET', KEYS[1], value)
end
return #kept
"#;

/// The `EVAL` command that stores `assignment` until `until_ms` at `key`, replacing the
/// identifier's assignment of its kind (`None`: clearing `clear` — both kinds when `None`).
pub fn assign_command(
    key: String,
    assignment: Option<&Assignment>,
    until_ms: Option<u64>,
    clear: Option<AssignmentKind>,
) -> Vec<String> {
    let (kind, line) = match assignment {
        Some(a) => (a.kind().letter(), a.encode(until_ms)),
        None => (clear.map_or("", AssignmentKind::letter), String::new()),
    };
    vec![
        "EVAL".into(),
        ASSIGN_SCRIPT.into(),
        "1".into(),
        key,
        kind.into(),
        line,
        ASSIGNMENT_GRACE_MS.to_string(),
    ]
}

/// The assignments in a `GET` reply of a control key, the override first (none for no key).
pub fn read_assignments(
    reply: crate::script::Reply,
    key: &str,
) -> Result<Vec<(Assignment, Option<u64>)>, crate::store::StoreError> {
    use crate::script::Reply;
    use crate::store::StoreError;
    match reply {
        Reply::Nil => Ok(Vec::new()),
        Reply::Bulk(bytes) => {
            let text = std::str::from_utf8(&bytes).map_err(|_| {
                StoreError::Protocol(format!("the assignment at `{key}` is not UTF-8"))
            })?;
            Assignment::decode_all(text).map_err(|e| StoreError::Protocol(format!("`{key}`: {e}")))
        }
        Reply::Error(e) => Err(StoreError::from_error_code(&e, format!("GET `{key}`: {e}"))),
        other => Err(StoreError::Protocol(format!(
            "GET `{key}` answered {other:?}, not a string"
        ))),
    }
}

/// The multi-limit script's algorithm codes (see `multi.lua`), also used in stored overrides.
pub(crate) fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::FixedWindow => 1,
        Algorithm::SlidingLog => 2,
        Algorithm::SlidingCounter => 3,
        Algorithm::TokenBucket => 4,
        Algorithm::Gcra => 5,
        Algorithm::Concurrency => 6,
    }
}

/// The algorithm of a code of [`algorithm_code`].
fn algorithm_of_code(code: u8) -> Option<Algorithm> {
    Algorithm::EVERY
        .into_iter()
        .find(|&a| algorithm_code(a) == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: &str) -> Policy {
        spec.parse().unwrap()
    }

    #[test]
    fn assignments_round_trip_through_their_text() {
        let cases = [
            (Assignment::Tier("pro".into()), None, "0 t pro"),
            (Assignment::Tier("a-b_c.d".into()), Some(17), "17 t a-b_c.d"),
            (
                Assignment::Override(policy("gcra 10/1s burst 20")),
                Some(5),
                "5 o 5 10 1000 20",
            ),
            (
                Assignment::Override(policy("fixed 100/1m")),
                None,
                "0 o 1 100 60000 100",
            ),
            (
                Assignment::Override(policy("concurrency 3 timeout 10s")),
                None,
                "0 o 6 3 10000 3",
            ),
            (
                Assignment::Override(policy("fixed 500/month anchor 15 utc+02:00")),
                None,
                "0 o 1 500 1020015001560 500",
            ),
        ];
        for (assignment, until, text) in cases {
            assert_eq!(assignment.encode(until), text);
            assert_eq!(Assignment::decode(text), Ok((assignment, until)));
        }
        // "Lapses at the epoch" cannot turn into "never".
        let tier = Assignment::Tier("x".into());
        assert_eq!(
            Assignment::decode(&tier.encode(Some(0))),
            Ok((tier, Some(1)))
        );
    }

    #[test]
    fn bad_text_names_the_field() {
        for (text, names) in [
            ("", "until time"),
            ("-1 t pro", "until time"),
            ("x t pro", "until time"),
            ("0", "no kind"),
            ("0 q pro", "kind `q`"),
            ("0 t", "tier name"),
            ("0 t a:b", "tier name `a:b`"),
            ("0 t pro extra", "unexpected `extra`"),
            ("0 o 9 1 1 1", "algorithm code `9`"),
            ("0 o 1 x 1000 1", "limit `x`"),
            ("0 o 1 10 1000", "capacity ``"),
            ("0 o 1 0 1000 0", "override policy"),
            ("0 o 1 10 1000 20", "capacity `20`"),
            ("0 o 5 10 1000 20 1", "unexpected `1`"),
        ] {
            let err = Assignment::decode(text).unwrap_err();
            assert!(err.contains(names), "{text}: {err}");
            assert!(err.contains(&format!("`{text}`")), "{text}: {err}");
        }
    }

    #[test]
    fn tiers_keep_the_limits_algorithm_and_valid_unique_names() {
        let tiers = Tiers::new(
            Algorithm::Gcra,
            [
                ("free", policy("gcra 10/1s burst 20")),
                ("pro", policy("gcra 100/1s burst 200")),
            ],
        )
        .unwrap();
        assert_eq!(tiers.len(), 2);
        assert_eq!(tiers.get("pro"), Some(&policy("gcra 100/1s burst 200")));
        assert_eq!(tiers.get("gold"), None);
        assert_eq!(tiers.script_table(), "free=10,1000,20;pro=100,1000,200");
        let monthly = Tiers::new(
            Algorithm::FixedWindow,
            [
                ("free", policy("fixed 1000/month")),
                ("burst", policy("fixed 10/1m")),
            ],
        )
        .unwrap();
        assert_eq!(
            monthly.script_table(),
            "free=1000,1020001001440,1000;burst=10,60000,10"
        );
        assert_eq!(Tiers::default().script_table(), "");
        let err = Tiers::new(Algorithm::Gcra, [("free", policy("fixed 10/1s"))]).unwrap_err();
        assert!(
            err.contains("tier `free`") && err.contains("fixed"),
            "{err}"
        );
        let err = Tiers::new(
            Algorithm::Gcra,
            [("a", policy("gcra 1/1s")), ("a", policy("gcra 2/1s"))],
        )
        .unwrap_err();
        assert!(err.contains("tier `a` is named twice"), "{err}");
        for bad in ["", "a b", "a;b", "a=b", &"x".repeat(65)] {
            let err = Tiers::new(Algorithm::Gcra, [(bad, policy("gcra 1/1s"))]).unwrap_err();
            assert!(err.contains(&format!("tier `{bad}`")), "{err}");
        }
    }

    #[test]
    fn the_effective_policy_prefers_an_unlapsed_override_then_a_known_tier() {
        let limit = Limit::new("l", policy("gcra 10/1s"))
            .with_tiers(vec![("pro", policy("gcra 100/1s"))])
            .unwrap();
        let pro = Assignment::Tier("pro".into());
        let gold = Assignment::Tier("gold".into());
        let mine = Assignment::Override(policy("gcra 5/1s"));
        let other = Assignment::Override(policy("fixed 5/1s"));
        let at = |a: &Assignment, until: Option<u64>, now: u64| {
            effective_policy(&limit, &[(a.clone(), until)], now).to_string()
        };
        assert_eq!(effective_policy(&limit, &[], 0), &limit.policy);
        assert_eq!(at(&pro, None, 7), "gcra 100/1s");
        assert_eq!(at(&pro, Some(8), 7), "gcra 100/1s");
        assert_eq!(at(&pro, Some(8), 8), "gcra 10/1s");
        assert_eq!(at(&gold, None, 7), "gcra 10/1s");
        assert_eq!(at(&mine, Some(10), 9), "gcra 5/1s");
        assert_eq!(at(&mine, Some(10), 10), "gcra 10/1s");
        assert_eq!(at(&other, None, 9), "gcra 10/1s");
        // Both held: the override while it lasts, then the tier.
        let both = [(mine.clone(), Some(10)), (pro.clone(), None)];
        assert_eq!(effective_policy(&limit, &both, 9).to_string(), "gcra 5/1s");
        assert_eq!(
            effective_policy(&limit, &both, 10).to_string(),
            "gcra 100/1s"
        );
        let both = [(other.clone(), None), (pro.clone(), Some(10))];
        assert_eq!(
            effective_policy(&limit, &both, 9).to_string(),
            "gcra 100/1s"
        );
        assert_eq!(
            effective_policy(&limit, &both, 10).to_string(),
            "gcra 10/1s"
        );
    }

    #[test]
    fn a_control_key_holds_one_line_per_kind_override_first() {
        let text = "0 t pro\n7 o 5 5 1000 5";
        assert_eq!(
            Assignment::decode_all(text),
            Ok(vec![
                (Assignment::Override(policy("gcra 5/1s")), Some(7)),
                (Assignment::Tier("pro".into()), None),
            ])
        );
        assert!(Assignment::decode_all("0 t pro\n0 q x")
            .unwrap_err()
            .contains("`0 q x`"));
    }
}
