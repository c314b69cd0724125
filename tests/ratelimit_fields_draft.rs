//! Conformance to draft-ietf-httpapi-ratelimit-headers-11, read by an independent parser of
//! structured fields (RFC 9651, the `sfv` crate) rather than by our own writer's logic: for
//! random policies, names and decisions, `RateLimit-Policy` and `RateLimit` parse as the draft's
//! lists with the parameters its §3.1 and §4.1 require, `Retry-After` is never earlier than any
//! effective window (§6), and a denial's problem body has the draft's problem type (§5.1 quota
//! exceeded, 429; §5.2 temporary reduced capacity, 503) and `violated-policies` member.

use edgelimit::http::{Answer, LimitReport, QUOTA_EXCEEDED, TEMPORARY_REDUCED_CAPACITY};
use edgelimit::{Algorithm, Decision, Policy, Reason, RETRY_NEVER};
use proptest::prelude::*;
use sfv::{BareItem, ListEntry, Parameters, Parser};

/// The draft's registered quota units (§10.3).
const REGISTERED_UNITS: [&str; 3] = ["requests", "content-bytes", "concurrent-requests"];

fn param<'p>(params: &'p Parameters, key: &str) -> Option<&'p BareItem> {
    params
        .iter()
        .find(|(k, _)| k.as_str() == key)
        .map(|(_, v)| v)
}

fn non_negative_integer(params: &Parameters, key: &str) -> Option<i64> {
    param(params, key).map(|v| {
        let n = v
            .as_integer()
            .unwrap_or_else(|| panic!("`{key}` is not an Integer: {v:?}"));
        let n = i64::from(n);
        assert!(n >= 0, "`{key}` is negative: {n}");
        n
    })
}

/// Parses a field as the draft's List of Items whose bare item is a String; returns each item's
/// name and parameters.
fn items(field: &str, value: &str) -> Vec<(String, Parameters)> {
    let list: Vec<ListEntry> = Parser::new(value)
        .parse_list()
        .unwrap_or_else(|e| panic!("{field}: `{value}` is no structured-field List: {e}"));
    assert!(!list.is_empty(), "{field} is a non-empty List");
    list.into_iter()
        .map(|entry| match entry {
            ListEntry::Item(item) => {
                let name = item
                    .bare_item
                    .as_string()
                    .unwrap_or_else(|| panic!("{field}: item `{:?}` is no String", item.bare_item))
                    .as_str()
                    .to_string();
                (name, item.params)
            }
            ListEntry::InnerList(_) => panic!("{field}: an inner list in `{value}`"),
        })
        .collect()
}

fn policy() -> impl Strategy<Value = Policy> {
    let rate = (0..5usize, 1u64..=5_000, 1u64..=86_400_000, 0u64..=3).prop_filter_map(
        "a valid policy",
        |(a, limit, window, burst_factor)| {
            let algorithm = Algorithm::ALL[a];
            let burst = algorithm
                .takes_burst()
                .then_some(limit * burst_factor.max(1));
            Policy::new(algorithm, limit, window, burst).ok()
        },
    );
    let concurrency = (1u64..=100, 1_000u64..=60_000)
        .prop_filter_map("a valid concurrency policy", |(n, timeout)| {
            Policy::new(Algorithm::Concurrency, n, timeout, None).ok()
        });
    prop_oneof![4 => rate, 1 => concurrency]
}

fn name() -> impl Strategy<Value = String> {
    "[A-Za-z0-9._-]{1,16}"
}

#[derive(Debug, Clone)]
struct Case {
    name: String,
    policy: Policy,
    decision: Decision,
    unit: Option<&'static str>,
}

fn case(now_ms: u64) -> impl Strategy<Value = Case> {
    (
        name(),
        policy(),
        any::<bool>(),
        0u64..=1_000_000,
        0u64..=86_400_000,
        prop_oneof![
            Just(Reason::OverLimit),
            Just(Reason::FailedClosed),
            Just(Reason::MisconfiguredClosed),
            Just(Reason::CostExceedsCapacity),
            Just(Reason::Blocked),
        ],
        prop_oneof![
            Just(None),
            Just(Some("requests")),
            Just(Some("content-bytes"))
        ],
    )
        .prop_map(
            move |(name, policy, allowed, remaining, wait, denial, unit)| {
                let capacity = policy.capacity();
                let decision = if allowed {
                    Decision {
                        allowed,
                        limit: capacity,
                        remaining: remaining.min(capacity),
                        reset_at_ms: now_ms + wait,
                        retry_after_ms: 0,
                        reason: Reason::Admitted,
                    }
                } else {
                    let never = denial == Reason::CostExceedsCapacity;
                    Decision {
                        allowed,
                        limit: capacity,
                        remaining: 0,
                        reset_at_ms: now_ms + wait,
                        retry_after_ms: if never { RETRY_NEVER } else { wait.max(1) },
                        reason: denial,
                    }
                };
                Case {
                    name,
                    policy,
                    decision,
                    unit,
                }
            },
        )
}

const NOW_MS: u64 = 1_767_225_600_000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn fields_and_problem_bodies_read_as_the_draft_says(
        cases in prop::collection::vec(case(NOW_MS), 1..6),
    ) {
        let reports: Vec<LimitReport<'_>> = cases
            .iter()
            .map(|c| LimitReport {
                name: &c.name,
                policy: &c.policy,
                decision: &c.decision,
                unit: c.unit,
            })
            .collect();
        let answer = Answer::new(&reports);
        let headers = answer.headers(NOW_MS);
        let field = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());

        // §3: RateLimit-Policy, one Quota Policy Item per limit, in order.
        let policies = items("RateLimit-Policy", &field("RateLimit-Policy").expect("RateLimit-Policy"));
        prop_assert_eq!(policies.len(), cases.len());
        for ((name, params), case) in policies.iter().zip(&cases) {
            prop_assert_eq!(name, &case.name);
            let q = non_negative_integer(params, "q").expect("`q` is REQUIRED");
            prop_assert_eq!(q as u64, case.policy.capacity());
            if let Some(w) = non_negative_integer(params, "w") {
                prop_assert!(w > 0, "`w` is non-zero");
            }
            if let Some(qu) = param(params, "qu") {
                let qu = qu.as_string().expect("`qu` is a String").as_str().to_string();
                prop_assert!(REGISTERED_UNITS.contains(&qu.as_str()), "unregistered qu {}", qu);
                prop_assert!(qu != "requests", "the default unit goes unsaid");
            }
            if case.policy.algorithm() == Algorithm::Concurrency {
                prop_assert!(param(params, "w").is_none(), "a concurrency limit has no window");
                prop_assert_eq!(
                    param(params, "qu").and_then(|v| v.as_string()).map(|s| s.as_str().to_string()),
                    Some("concurrent-requests".to_string())
                );
            }
            if let Some(pk) = param(params, "pk") {
                prop_assert!(pk.as_byte_sequence().is_some(), "`pk` is a Byte Sequence");
            }
        }

        // §4: RateLimit, one Service Limit Item per limit.
        let limits = items("RateLimit", &field("RateLimit").expect("RateLimit"));
        prop_assert_eq!(limits.len(), cases.len());
        for ((name, params), case) in limits.iter().zip(&cases) {
            prop_assert_eq!(name, &case.name);
            let r = non_negative_integer(params, "r").expect("`r` is REQUIRED");
            prop_assert_eq!(r as u64, case.decision.remaining);
            non_negative_integer(params, "t");
        }

        // §6: Retry-After on a denial a wait can lift (none when one denial is for good), never
        // earlier than the end of a denied limit's effective window.
        let denied = cases.iter().any(|c| !c.decision.allowed);
        let lifted_by_waiting = denied
            && cases
                .iter()
                .all(|c| c.decision.allowed || c.decision.retry_after_ms != RETRY_NEVER);
        let retry_after = field("Retry-After");
        prop_assert_eq!(retry_after.is_some(), lifted_by_waiting);
        if let Some(seconds) = retry_after {
            let seconds: i64 = seconds.parse().expect("Retry-After is delay-seconds");
            let denied_t = limits
                .iter()
                .zip(&cases)
                .filter(|(_, c)| !c.decision.allowed)
                .filter_map(|((_, p), _)| non_negative_integer(p, "t"))
                .max()
                .unwrap_or(0);
            prop_assert!(seconds >= denied_t, "Retry-After {} < t {}", seconds, denied_t);
        }

        // §5: the problem body of a denial.
        match answer.problem(Some("/api")) {
            None => prop_assert!(!denied),
            Some(problem) => {
                prop_assert!(denied);
                let body: serde_json::Value = serde_json::from_str(&problem.to_json()).unwrap();
                let closed = cases
                    .iter()
                    .filter(|c| !c.decision.allowed)
                    .all(|c| {
                        matches!(
                            c.decision.reason,
                            Reason::FailedClosed | Reason::MisconfiguredClosed
                        )
                    });
                let (status, kind) = if closed {
                    (503, TEMPORARY_REDUCED_CAPACITY)
                } else {
                    (429, QUOTA_EXCEEDED)
                };
                prop_assert_eq!(body["status"].as_u64(), Some(status));
                prop_assert_eq!(body["type"].as_str(), Some(kind));
                prop_assert!(body["title"].as_str().is_some_and(|t| !t.is_empty()));
                let violated: Vec<&str> = body["violated-policies"]
                    .as_array()
                    .expect("`violated-policies` is an array")
                    .iter()
                    .map(|v| v.as_str().expect("of strings"))
                    .collect();
                let expected: Vec<&str> = cases
                    .iter()
                    .filter(|c| !c.decision.allowed)
                    .map(|c| c.name.as_str())
                    .collect();
                prop_assert_eq!(violated, expected);
                prop_assert!(body.get("violated_policies").is_none());
            }
        }
    }
}
