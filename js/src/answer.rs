//! The limiter's verdicts → what `limit()` resolves to: the binding limit's numbers, the
//! `RateLimit` headers and, when denied, the RFC 9457 problem body — all from the library's
//! [`edgelimit::http`], so the JavaScript side writes no header and no body of its own.

use edgelimit::http::{Answer, HeaderFields, LimitReport, PROBLEM_CONTENT_TYPE};
use edgelimit::{CheckItem, Checked, Decision, Limit, Policy, Reason, Verdict, RETRY_NEVER};
use serde::ser::{SerializeMap, Serializer};
use serde::Serialize;

use edgelimit_engine::rules::Exceed;

use crate::json::JsonText;
use crate::options::Setup;
use crate::request::LimitCall;

/// One limit's decision, as `result.decisions[i]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionOut {
    /// The limit's name.
    pub name: String,
    /// Whether this limit admitted the request (a shadow limit's denial is reported here only).
    pub success: bool,
    /// The deciding policy's capacity (a tier's or an override's when one decided).
    pub limit: u64,
    /// What could still be admitted now.
    pub remaining: u64,
    /// When the quota is whole again (epoch ms, on the deciding clock).
    pub reset: u64,
    /// For a denial, in how many ms the same request would be admitted — exact; `null` when
    /// admitted or when no wait helps.
    pub retry_after_ms: Option<u64>,
    /// Why, in the library's words (`admitted`, `over_limit`, `cached_denial`, `failed_open`, …).
    pub reason: &'static str,
    /// Whether the limit was decided in shadow for this call (a shadow limit, a `soft` one, or
    /// a staged one not enforced for this identifier): reported, never enforced.
    pub shadow: bool,
}

impl DecisionOut {
    /// `decision` of the limit named `name`.
    pub fn new(name: &str, decision: &Decision, shadow: bool) -> DecisionOut {
        DecisionOut {
            name: name.to_string(),
            success: decision.allowed,
            limit: decision.limit,
            remaining: decision.remaining,
            reset: decision.reset_at_ms,
            retry_after_ms: (!decision.allowed && decision.retry_after_ms != RETRY_NEVER)
                .then_some(decision.retry_after_ms),
            reason: decision.reason.as_str(),
            shadow,
        }
    }

    /// The decision as JSON: what `serde_json` makes of it, written by hand (crate::json).
    pub fn to_json(&self) -> String {
        let mut out = JsonText::with_capacity(192);
        self.write_json(&mut out);
        out.into_string()
    }

    fn write_json(&self, out: &mut JsonText) {
        out.raw("{\"name\":");
        out.string(&self.name);
        out.raw(",");
        out.standing(self.success, self.limit, self.remaining, self.reset);
        out.raw(",\"retryAfterMs\":");
        out.number_or_null(self.retry_after_ms);
        out.raw(",\"reason\":");
        out.string(self.reason);
        out.raw(",\"shadow\":");
        out.boolean(self.shadow);
        out.raw("}");
    }
}

/// A denial's problem body, ready to send.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProblemOut {
    /// 429, or 503 when every denial is a limit failing closed.
    pub status: u16,
    /// `application/problem+json`.
    pub content_type: &'static str,
    /// The body: the library's `http::Problem` as JSON.
    pub body: String,
}

/// What `limit()` resolves to.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LimitResult {
    /// Whether every enforced limit admitted the request.
    pub success: bool,
    /// The binding limit's capacity (the denial with the longest wait, else the tightest).
    pub limit: u64,
    /// The binding limit's remaining quota.
    pub remaining: u64,
    /// When the binding limit's quota is whole again (epoch ms).
    pub reset: u64,
    /// `Retry-After` in seconds when denied; `null` when admitted or when no wait helps.
    pub retry_after: Option<u64>,
    /// The binding limit's reason.
    pub reason: &'static str,
    /// The response header fields: `RateLimit-Policy`, `RateLimit`, `X-RateLimit-*`, and
    /// `Retry-After` when denied.
    #[serde(serialize_with = "as_map")]
    pub headers: HeaderFields,
    /// One decision per limit, in configuration order, shadow limits included.
    pub decisions: Vec<DecisionOut>,
    /// The problem body when denied.
    pub problem: Option<ProblemOut>,
    /// When the enforced limits were decided (epoch ms, on the deciding clock).
    pub decided_at: u64,
    /// How long the request waits before it may proceed (ms): the longest wait of the limits
    /// that admitted it after a wait (`exceed: "delay …"`, reason `delayed`); 0 when none did.
    /// The wrapper resolves `limit()` only after it.
    pub delay_ms: u64,
    /// The `soft` limits the request is over, in configuration order (the names the Worker
    /// sends its origin in `EdgeLimit-Exceeded`).
    pub exceeded: Vec<String>,
}

fn as_map<S: Serializer>(fields: &HeaderFields, s: S) -> Result<S::Ok, S::Error> {
    let mut map = s.serialize_map(Some(fields.len()))?;
    for (name, value) in fields {
        map.serialize_entry(name, value)?;
    }
    map.end()
}

/// The policy to advertise for `decision` of `limit`: a tier's or an override's when one decided
/// (`Limit::advertised_policy`, as the Worker advertises it).
fn advertised(limit: &Limit, decision: &Decision) -> Policy {
    limit.advertised_policy(decision)
}

impl LimitResult {
    /// The outcome of `call` from the limiter's answer.
    pub fn new(setup: &Setup, call: &LimitCall, checked: &Checked) -> LimitResult {
        let enforced = &checked.verdicts[0];
        let shadow = checked.verdicts.get(1);
        // A limit the denial cache never consulted decided nothing, and an allow-listed one
        // counted nothing: neither is advertised (as the Worker answers).
        let decided: Vec<(&CheckItem, &Decision)> = call.checks[0]
            .items()
            .iter()
            .zip(&enforced.decisions)
            .filter(|(_, d)| !matches!(d.reason, Reason::Skipped | Reason::Allowlisted))
            .collect();
        let policies: Vec<Policy> = decided
            .iter()
            .map(|(item, d)| advertised(&item.limit, d))
            .collect();
        let reports: Vec<LimitReport<'_>> = decided
            .iter()
            .zip(&policies)
            .map(|((item, decision), policy)| LimitReport {
                name: &item.limit.name,
                policy,
                decision,
                unit: None,
            })
            .collect();
        let answer = Answer::new(&reports).with_fields(setup.headers);
        let binding = answer.binding().map(|b| *b.decision);
        let decisions = decisions_in_order(setup, call, enforced, shadow);
        let problem = answer
            .problem(call.instance.as_deref())
            .map(|p| ProblemOut {
                status: p.status,
                content_type: PROBLEM_CONTENT_TYPE,
                body: p.to_json(),
            });
        // Every limit decided in shadow this call (soft, or staged out): the shadow check's time.
        let decided_at = match shadow {
            Some(verdict) if call.checks[0].items().is_empty() => verdict.decided_at_ms,
            _ => enforced.decided_at_ms,
        };
        let delay_ms = enforced
            .decisions
            .iter()
            .filter(|d| d.allowed && d.reason == Reason::Delayed)
            .map(|d| d.retry_after_ms)
            .max()
            .unwrap_or(0);
        let exceeded = setup
            .limits
            .iter()
            .zip(&decisions)
            .filter(|(configured, d)| configured.exceed == Exceed::Soft && !d.success)
            .map(|(_, d)| d.name.clone())
            .collect();
        LimitResult {
            success: answer.allowed(),
            limit: binding.map_or(0, |d| d.limit),
            remaining: binding.map_or(0, |d| d.remaining),
            reset: binding.map_or(decided_at, |d| d.reset_at_ms),
            retry_after: answer.retry_after_seconds(),
            reason: binding.map_or("admitted", |d| d.reason.as_str()),
            headers: answer.header_fields(decided_at),
            decisions,
            problem,
            decided_at,
            delay_ms: if answer.allowed() { delay_ms } else { 0 },
            exceeded,
        }
    }

    /// The outcome as the JSON the wrapper parses: what `serde_json` makes of it, written by
    /// hand (crate::json).
    pub fn to_json(&self) -> String {
        let fields = self.headers.text().len() + 32 * self.headers.len();
        let problem = self.problem.as_ref().map_or(0, |p| p.body.len() * 2 + 96);
        let mut out = JsonText::with_capacity(256 + fields + problem + 192 * self.decisions.len());
        out.raw("{");
        out.standing(self.success, self.limit, self.remaining, self.reset);
        out.raw(",\"retryAfter\":");
        out.number_or_null(self.retry_after);
        out.raw(",\"reason\":");
        out.string(self.reason);
        out.raw(",\"headers\":{");
        for (i, (name, value)) in self.headers.iter().enumerate() {
            if i > 0 {
                out.raw(",");
            }
            out.string(name);
            out.raw(":");
            out.string(value);
        }
        out.raw("},\"decisions\":[");
        for (i, decision) in self.decisions.iter().enumerate() {
            if i > 0 {
                out.raw(",");
            }
            decision.write_json(&mut out);
        }
        out.raw("],\"problem\":");
        match &self.problem {
            None => out.raw("null"),
            Some(problem) => {
                out.raw("{\"status\":");
                out.number(u64::from(problem.status));
                out.raw(",\"contentType\":");
                out.string(problem.content_type);
                out.raw(",\"body\":");
                out.string(&problem.body);
                out.raw("}");
            }
        }
        out.raw(",\"decidedAt\":");
        out.number(self.decided_at);
        out.raw(",\"delayMs\":");
        out.number(self.delay_ms);
        out.raw(",\"exceeded\":[");
        for (i, name) in self.exceeded.iter().enumerate() {
            if i > 0 {
                out.raw(",");
            }
            out.string(name);
        }
        out.raw("]}");
        out.into_string()
    }
}

/// Every limit's decision in configuration order: the enforced check's and the shadow check's
/// items each keep that order, so the two are merged back by the `shadow` flag.
fn decisions_in_order(
    setup: &Setup,
    call: &LimitCall,
    enforced: &Verdict,
    shadow: Option<&Verdict>,
) -> Vec<DecisionOut> {
    let mut from_enforced = call.checks[0].items().iter().zip(&enforced.decisions);
    let mut from_shadow = call
        .checks
        .get(1)
        .zip(shadow)
        .into_iter()
        .flat_map(|(check, verdict)| check.items().iter().zip(&verdict.decisions));
    setup
        .limits
        .iter()
        .zip(&call.shadow)
        .filter_map(|(_, &in_shadow)| {
            let next = if in_shadow {
                from_shadow.next()
            } else {
                from_enforced.next()
            };
            next.map(|(item, d)| DecisionOut::new(&item.limit.name, d, in_shadow))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use edgelimit::MemoryStore;
    use edgelimit_engine::rules::Enforce;
    use serde_json::json;

    fn setup() -> Setup {
        Setup::from_json(
            &json!({
                "url": "http://127.0.0.1:1", "token": "t",
                "limits": [
                    { "name": "trial", "policy": "fixed 1/1m", "shadow": true },
                    { "name": "per-user", "policy": "fixed 2/1m" },
                    { "name": "per-team", "policy": "fixed 5/1m" },
                ],
            })
            .to_string(),
        )
        .unwrap()
    }

    const T0: u64 = 1_700_000_000_000;

    /// The result of `call`, whose JSON must be what serde_json writes for it, and the JSON of
    /// each of its decisions too.
    fn result(setup: &Setup, call: &LimitCall, checked: &Checked) -> LimitResult {
        let out = LimitResult::new(setup, call, checked);
        assert_eq!(out.to_json(), serde_json::to_string(&out).unwrap());
        for decision in &out.decisions {
            assert_eq!(decision.to_json(), serde_json::to_string(decision).unwrap());
        }
        out
    }

    /// Decides `call` in memory at `T0 + at`, as the limiter would.
    fn decide(store: &MemoryStore, call: &LimitCall, at: u64) -> Checked {
        Checked {
            verdicts: store.direct().check(&call.checks, T0 + at),
            local_ms: T0 + at,
            store_ms: Some(0.0),
        }
    }

    #[test]
    fn admitted_calls_report_the_tightest_limit_and_every_decision_in_order() {
        let setup = setup();
        let store = MemoryStore::new();
        let call = LimitCall::new(&setup, "\"u\"", "").unwrap();
        let out = result(&setup, &call, &decide(&store, &call, 0));
        assert!(out.success && out.problem.is_none() && out.retry_after.is_none());
        assert_eq!((out.limit, out.remaining, out.reason), (2, 1, "admitted"));
        assert_eq!(out.reset, T0 - T0 % 60_000 + 60_000);
        let names: Vec<_> = out
            .decisions
            .iter()
            .map(|d| (d.name.as_str(), d.shadow))
            .collect();
        assert_eq!(
            names,
            [("trial", true), ("per-user", false), ("per-team", false)]
        );
        let json: serde_json::Value = serde_json::from_str(&out.to_json()).unwrap();
        assert_eq!(
            json["headers"]["RateLimit"], "\"per-user\";r=1;t=40, \"per-team\";r=4;t=40",
            "only enforced limits are advertised"
        );
        assert_eq!(
            json["headers"]["RateLimit-Policy"],
            "\"per-user\";q=2;w=60, \"per-team\";q=5;w=60"
        );
        assert!(json["headers"].get("Retry-After").is_none());
        assert_eq!(
            json["decisions"][1]["retryAfterMs"],
            serde_json::Value::Null
        );
        assert_eq!(json["decidedAt"], T0);
    }

    #[test]
    fn a_denial_carries_retry_after_and_the_librarys_problem_body() {
        let setup = setup();
        let store = MemoryStore::new();
        let call = LimitCall::new(&setup, "\"u\"", "{\"instance\":\"/api\"}").unwrap();
        for at in 0..2 {
            assert!(result(&setup, &call, &decide(&store, &call, at)).success);
        }
        let out = result(&setup, &call, &decide(&store, &call, 2_000));
        assert!(!out.success);
        assert_eq!((out.reason, out.remaining), ("over_limit", 0));
        // Fixed windows align to the epoch: T0 is 20 s into its minute.
        assert_eq!(out.retry_after, Some(38));
        let problem = out.problem.as_ref().unwrap();
        assert_eq!(
            (problem.status, problem.content_type),
            (429, "application/problem+json")
        );
        let body: serde_json::Value = serde_json::from_str(&problem.body).unwrap();
        assert_eq!(body["violated-policies"], json!(["per-user"]));
        assert_eq!(
            (body["instance"].as_str(), body["retry_after"].as_u64()),
            (Some("/api"), Some(38))
        );
        assert_eq!(out.headers.get("Retry-After"), Some("38"));
        // The shadow limit denied too, and is reported, never enforced.
        let trial = &out.decisions[0];
        assert!(trial.shadow && !trial.success && trial.retry_after_ms == Some(38_000));
        // All or nothing: the team limit was not charged by the denied request.
        assert_eq!(out.decisions[2].remaining, 3);
    }

    #[test]
    fn a_problem_naming_any_path_crosses_as_serde_json_writes_it() {
        let setup = setup();
        let store = MemoryStore::new();
        let instance = "/a \"quoted\" back\\slash\nline\u{1}é😀";
        let options = json!({ "instance": instance }).to_string();
        let call = LimitCall::new(&setup, "\"u\"", &options).unwrap();
        for at in 0..2 {
            result(&setup, &call, &decide(&store, &call, at));
        }
        let out = result(&setup, &call, &decide(&store, &call, 2_000));
        let json: serde_json::Value = serde_json::from_str(&out.to_json()).unwrap();
        let body: serde_json::Value =
            serde_json::from_str(json["problem"]["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["instance"], instance);
    }

    #[test]
    fn a_limit_the_denial_cache_never_consulted_is_not_advertised() {
        let setup = setup();
        let call = LimitCall::new(&setup, "\"u\"", "").unwrap();
        let cached = Decision {
            allowed: false,
            limit: 2,
            remaining: 0,
            reset_at_ms: T0 + 60_000,
            retry_after_ms: 40_000,
            reason: Reason::CachedDenial,
        };
        let skipped = Decision {
            allowed: true,
            limit: 5,
            remaining: 5,
            reset_at_ms: T0,
            retry_after_ms: 0,
            reason: Reason::Skipped,
        };
        let verdict = |decisions: Vec<Decision>| Verdict {
            allowed: decisions.iter().all(|d| d.allowed),
            decisions,
            atomic: true,
            decided_at_ms: T0,
            listed: Vec::new(),
        };
        let checked = Checked {
            verdicts: vec![verdict(vec![cached, skipped]), verdict(vec![skipped])],
            local_ms: T0,
            store_ms: None,
        };
        let out = result(&setup, &call, &checked);
        assert_eq!(out.headers.get("RateLimit"), Some("\"per-user\";r=0;t=40"));
        assert_eq!(
            out.headers.get("RateLimit-Policy"),
            Some("\"per-user\";q=2;w=60")
        );
        assert_eq!(
            out.decisions[2].reason, "skipped",
            "still reported among the decisions"
        );
        assert_eq!((out.reason, out.retry_after), ("cached_denial", Some(40)));
    }

    fn setup_of(limits: serde_json::Value) -> Setup {
        Setup::from_json(
            &json!({ "url": "http://127.0.0.1:1", "token": "t", "limits": limits }).to_string(),
        )
        .unwrap()
    }

    #[test]
    fn a_soft_limit_over_admits_and_names_itself_in_exceeded() {
        let setup = setup_of(json!([
            { "name": "per-user", "policy": "fixed 5/1m" },
            { "name": "soft-cap", "policy": "fixed 1/1m", "exceed": "soft" },
        ]));
        let store = MemoryStore::new();
        let call = LimitCall::new(&setup, "\"u\"", "").unwrap();
        assert_eq!(call.shadow, [false, true]);
        let first = result(&setup, &call, &decide(&store, &call, 0));
        assert!(first.success && first.exceeded.is_empty());
        let second = result(&setup, &call, &decide(&store, &call, 1));
        assert!(second.success, "a soft limit never refuses");
        assert_eq!(second.exceeded, ["soft-cap"]);
        assert_eq!(second.decisions[1].reason, "over_limit");
        assert_eq!(
            second.decisions[0].remaining, 3,
            "the enforced limit was charged"
        );
    }

    #[test]
    fn a_staged_limit_enforces_exactly_the_identifiers_its_hash_picks() {
        let setup = setup_of(json!([
            { "name": "staged", "policy": "fixed 1/1m", "enforce": "30%" },
        ]));
        let share: Enforce = "30%".parse().unwrap();
        let store = MemoryStore::new();
        let mut enforced = 0;
        for i in 0..400 {
            let id = format!("client-{i}");
            let call = LimitCall::new(&setup, &format!("{id:?}"), "").unwrap();
            let picked = share.enforces("staged", id.as_bytes());
            assert_eq!(call.shadow, [!picked], "{id}");
            assert!(result(&setup, &call, &decide(&store, &call, 0)).success);
            let again = result(&setup, &call, &decide(&store, &call, 1));
            assert_eq!(again.success, !picked, "{id}'s second request");
            assert_eq!(again.decisions[0].shadow, !picked);
            enforced += usize::from(picked);
        }
        assert!((90..=150).contains(&enforced), "30% of 400: {enforced}");
    }

    #[test]
    fn a_delayed_admission_reports_its_wait() {
        let setup = setup_of(json!([
            { "name": "paced", "policy": "gcra 1/1s burst 1", "exceed": "delay 2s" },
        ]));
        let store = MemoryStore::new();
        let call = LimitCall::new(&setup, "\"u\"", "").unwrap();
        let first = result(&setup, &call, &decide(&store, &call, 0));
        assert_eq!((first.success, first.delay_ms), (true, 0));
        let second = result(&setup, &call, &decide(&store, &call, 100));
        assert_eq!((second.success, second.delay_ms), (true, 900));
        assert_eq!(second.decisions[0].reason, "delayed");
        let third = result(&setup, &call, &decide(&store, &call, 100));
        assert_eq!((third.success, third.delay_ms), (true, 1_900));
        let beyond = result(&setup, &call, &decide(&store, &call, 100));
        assert!(!beyond.success, "2.9 s is beyond the longest wait");
        assert_eq!(beyond.delay_ms, 0);
    }

    #[test]
    fn a_limit_failing_closed_is_a_503_problem() {
        let setup = setup();
        let call = LimitCall::new(&setup, "\"u\"", "").unwrap();
        let closed = Decision {
            allowed: false,
            limit: 2,
            remaining: 0,
            reset_at_ms: T0 + 1_000,
            retry_after_ms: 1_000,
            reason: Reason::FailedClosed,
        };
        let open = Decision {
            allowed: true,
            reason: Reason::FailedOpen,
            retry_after_ms: 0,
            remaining: 5,
            limit: 5,
            ..closed
        };
        let verdict = |decisions: Vec<Decision>| Verdict {
            allowed: decisions.iter().all(|d| d.allowed),
            decisions,
            atomic: false,
            decided_at_ms: T0,
            listed: Vec::new(),
        };
        let checked = Checked {
            verdicts: vec![verdict(vec![closed, open]), verdict(vec![open])],
            local_ms: T0,
            store_ms: Some(50.0),
        };
        let out = result(&setup, &call, &checked);
        assert_eq!(out.problem.as_ref().map(|p| p.status), Some(503));
        assert_eq!((out.reason, out.retry_after), ("failed_closed", Some(1)));
        assert_eq!(out.decisions[2].reason, "failed_open");
    }
}
