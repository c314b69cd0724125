//! Decisions → HTTP: the `RateLimit-Policy` and `RateLimit` fields of
//! draft-ietf-httpapi-ratelimit-headers (structured-field lists of named policies), the
//! `X-RateLimit-*` trio most clients still read, `Retry-After`, and an RFC 9457
//! `application/problem+json` body for denials. Pure: the caller passes "now".
//!
//! How each policy is described (the draft has no burst parameter, so a bucket is reported as
//! the quota it really grants):
//!
//! | policy | `q` | `w` (seconds, rounded up, ≥ 1) |
//! |---|---|---|
//! | fixed / sliding-log / sliding-counter `L/W` | `L` | `W` |
//! | token-bucket / gcra `L/W burst B` | `B` | `B·W/L`, the time to refill `B` |
//!
//! `r` is the decision's remaining quota. `t` is, for an admitted request, the seconds until the
//! quota is whole again; for a denied one, the seconds until this request would be admitted — so
//! `Retry-After` (the longest such wait among the denials) is never earlier than any `t`.

use serde::Serialize;

use crate::decision::{Decision, Reason, RETRY_NEVER};
use crate::policy::Policy;

/// The media type of [`Problem`] bodies.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// One limit's outcome, as the HTTP layer reports it.
#[derive(Debug, Clone, Copy)]
pub struct LimitReport<'a> {
    /// The limit's name: the policy name in the `RateLimit` fields.
    pub name: &'a str,
    /// Its policy.
    pub policy: &'a Policy,
    /// Its decision for this request.
    pub decision: &'a Decision,
}

impl LimitReport<'_> {
    /// The quota `q` the policy grants per [`LimitReport::window_seconds`].
    pub fn quota(&self) -> u64 {
        self.policy.capacity()
    }

    /// The window `w` in whole seconds (rounded up, at least 1).
    pub fn window_seconds(&self) -> u64 {
        let p = self.policy;
        // capacity·W/L ≤ 2^50·(366 days) / 1 fits u128 easily; the policy bounds keep it sane.
        let ms =
            (u128::from(p.capacity()) * u128::from(p.window_ms())).div_ceil(u128::from(p.limit()));
        u64::try_from(ms.div_ceil(1000)).unwrap_or(u64::MAX).max(1)
    }

    /// `t`: seconds until the quota is whole again (admitted), or until this request would be
    /// admitted (denied). `None` for a denial no wait can lift.
    pub fn reset_seconds(&self, now_ms: u64) -> Option<u64> {
        let d = self.decision;
        if d.allowed {
            Some(seconds_ceil(d.reset_at_ms.saturating_sub(now_ms)))
        } else if d.retry_after_ms == RETRY_NEVER {
            None
        } else {
            Some(seconds_ceil(d.retry_after_ms).max(1))
        }
    }
}

fn seconds_ceil(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// A structured-field string: `"` and `\` escaped; other characters outside printable ASCII are
/// replaced, since sf-strings cannot carry them (limit names are validated to avoid this).
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
    out
}

/// The limit the `X-RateLimit-*` trio describes: the denial with the longest wait, else the
/// limit with the least remaining quota.
pub fn binding_limit<'r, 'a>(reports: &'r [LimitReport<'a>]) -> Option<&'r LimitReport<'a>> {
    let denied = reports
        .iter()
        .filter(|r| !r.decision.allowed)
        .max_by_key(|r| r.decision.retry_after_ms);
    denied.or_else(|| {
        reports.iter().min_by_key(|r| {
            (
                r.decision.remaining,
                std::cmp::Reverse(r.decision.reset_at_ms),
            )
        })
    })
}

/// `Retry-After` in whole seconds for a set of decisions: the longest wait among the denials,
/// rounded up. `None` when nothing is denied or a denial can never be lifted.
pub fn retry_after_seconds(reports: &[LimitReport<'_>]) -> Option<u64> {
    let longest = reports
        .iter()
        .filter(|r| !r.decision.allowed)
        .map(|r| r.decision.retry_after_ms)
        .max()?;
    (longest != RETRY_NEVER).then(|| seconds_ceil(longest).max(1))
}

/// The response header fields for `reports` at `now_ms`, in a stable order: `RateLimit-Policy`,
/// `RateLimit`, `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (seconds, like
/// `t`), and `Retry-After` when denied. Empty when there is nothing to report.
pub fn rate_limit_headers(reports: &[LimitReport<'_>], now_ms: u64) -> Vec<(&'static str, String)> {
    let Some(binding) = binding_limit(reports) else {
        return Vec::new();
    };
    let policies = reports
        .iter()
        .map(|r| {
            format!(
                "{};q={};w={}",
                sf_string(r.name),
                r.quota(),
                r.window_seconds()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let states = reports
        .iter()
        .map(|r| {
            let mut item = format!("{};r={}", sf_string(r.name), r.decision.remaining);
            if let Some(t) = r.reset_seconds(now_ms) {
                item.push_str(&format!(";t={t}"));
            }
            item
        })
        .collect::<Vec<_>>()
        .join(", ");
    let mut headers = vec![
        ("RateLimit-Policy", policies),
        ("RateLimit", states),
        ("X-RateLimit-Limit", binding.quota().to_string()),
        (
            "X-RateLimit-Remaining",
            binding.decision.remaining.to_string(),
        ),
    ];
    if let Some(t) = binding.reset_seconds(now_ms) {
        headers.push(("X-RateLimit-Reset", t.to_string()));
    }
    if let Some(seconds) = retry_after_seconds(reports) {
        headers.push(("Retry-After", seconds.to_string()));
    }
    headers
}

/// An RFC 9457 problem body for a denied request. `type` is `about:blank`, so `title` is the
/// status phrase; the extension members name the violated policies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// `about:blank`.
    #[serde(rename = "type")]
    pub problem_type: &'static str,
    /// The HTTP status phrase.
    pub title: &'static str,
    /// The HTTP status code.
    pub status: u16,
    /// A sentence for humans naming the policy and the wait.
    pub detail: String,
    /// The request path, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The policy that denied (the one with the longest wait).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Every policy that denied.
    pub violated_policies: Vec<String>,
    /// Seconds to wait, as in `Retry-After`; absent when no wait helps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// Why, in the library's words (`over_limit`, `cached_denial`, `failed_closed`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

impl Problem {
    /// The problem for a request denied by `reports` (429), or by a store failure with fail-closed
    /// limits (503). `None` when nothing denied.
    pub fn for_denial(reports: &[LimitReport<'_>], instance: Option<&str>) -> Option<Problem> {
        let denied: Vec<&LimitReport<'_>> =
            reports.iter().filter(|r| !r.decision.allowed).collect();
        let binding = binding_limit(reports).filter(|r| !r.decision.allowed)?;
        let failed_closed = denied
            .iter()
            .all(|r| r.decision.reason == Reason::FailedClosed);
        let (status, title) = if failed_closed {
            (503, "Service Unavailable")
        } else {
            (429, "Too Many Requests")
        };
        let retry_after = retry_after_seconds(reports);
        let rate = binding.policy.to_string();
        let detail = match (failed_closed, retry_after) {
            (true, _) => format!(
                "The rate limiter's store is unreachable and policy \"{}\" fails closed; retry later.",
                binding.name
            ),
            (false, Some(s)) => format!(
                "Rate limit \"{}\" ({rate}) exceeded; retry in {s} s.",
                binding.name
            ),
            (false, None) => format!(
                "This request costs more than policy \"{}\" ({rate}) can ever admit.",
                binding.name
            ),
        };
        Some(Problem {
            problem_type: "about:blank",
            title,
            status,
            detail,
            instance: instance.map(str::to_string),
            policy: Some(binding.name.to_string()),
            violated_policies: denied.iter().map(|r| r.name.to_string()).collect(),
            retry_after,
            reason: Some(binding.decision.reason),
        })
    }

    /// The body as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(allowed: bool, remaining: u64, reset_at_ms: u64, retry_after_ms: u64) -> Decision {
        Decision {
            allowed,
            limit: 0,
            remaining,
            reset_at_ms,
            retry_after_ms,
            reason: if allowed {
                Reason::Admitted
            } else {
                Reason::OverLimit
            },
        }
    }

    #[test]
    fn buckets_report_the_quota_they_grant() {
        let gcra: Policy = "gcra 10/1s burst 25".parse().unwrap();
        let d = decision(true, 24, 2_600, 0);
        let r = LimitReport {
            name: "api",
            policy: &gcra,
            decision: &d,
        };
        assert_eq!((r.quota(), r.window_seconds()), (25, 3)); // 25 tokens refill in 2.5 s
        let fixed: Policy = "fixed 100/1m".parse().unwrap();
        let r = LimitReport {
            name: "api",
            policy: &fixed,
            decision: &d,
        };
        assert_eq!((r.quota(), r.window_seconds()), (100, 60));
        let short: Policy = "fixed 5/200ms".parse().unwrap();
        let r = LimitReport {
            name: "api",
            policy: &short,
            decision: &d,
        };
        assert_eq!(r.window_seconds(), 1);
    }

    #[test]
    fn retry_after_is_never_earlier_than_any_t() {
        let p: Policy = "gcra 1/10s burst 3".parse().unwrap();
        let a = decision(false, 0, 30_000, 9_001);
        let b = decision(false, 0, 12_000, 2_000);
        let c = decision(true, 2, 4_500, 0);
        let reports = [
            LimitReport {
                name: "a",
                policy: &p,
                decision: &a,
            },
            LimitReport {
                name: "b",
                policy: &p,
                decision: &b,
            },
            LimitReport {
                name: "c",
                policy: &p,
                decision: &c,
            },
        ];
        let headers = rate_limit_headers(&reports, 0);
        let get = |k: &str| {
            headers
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("Retry-After").as_deref(), Some("10"));
        assert_eq!(
            get("RateLimit").as_deref(),
            Some("\"a\";r=0;t=10, \"b\";r=0;t=2, \"c\";r=2;t=5")
        );
        assert_eq!(
            get("RateLimit-Policy").as_deref(),
            Some("\"a\";q=3;w=30, \"b\";q=3;w=30, \"c\";q=3;w=30")
        );
        assert_eq!(get("X-RateLimit-Remaining").as_deref(), Some("0"));
        assert_eq!(get("X-RateLimit-Reset").as_deref(), Some("10"));
    }

    #[test]
    fn admitted_requests_report_the_tightest_limit_and_no_retry_after() {
        let p: Policy = "fixed 10/1m".parse().unwrap();
        let loose = decision(true, 9, 60_000, 0);
        let tight = decision(true, 3, 60_000, 0);
        let reports = [
            LimitReport {
                name: "loose",
                policy: &p,
                decision: &loose,
            },
            LimitReport {
                name: "tight",
                policy: &p,
                decision: &tight,
            },
        ];
        let headers = rate_limit_headers(&reports, 1_500);
        assert!(headers.iter().all(|(n, _)| *n != "Retry-After"));
        assert!(headers.contains(&("X-RateLimit-Remaining", "3".to_string())));
        assert!(headers.contains(&("X-RateLimit-Reset", "59".to_string())));
        assert!(Problem::for_denial(&reports, None).is_none());
    }

    #[test]
    fn names_are_escaped_as_structured_field_strings() {
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(sf_string("é"), "\"?\"");
    }

    #[test]
    fn problem_names_the_policy_and_is_503_when_failing_closed() {
        let p: Policy = "fixed 10/1m".parse().unwrap();
        let over = decision(false, 0, 60_000, 42_100);
        let reports = [LimitReport {
            name: "per-ip",
            policy: &p,
            decision: &over,
        }];
        let problem = Problem::for_denial(&reports, Some("/x")).unwrap();
        assert_eq!((problem.status, problem.retry_after), (429, Some(43)));
        assert!(problem.detail.contains("\"per-ip\""), "{}", problem.detail);
        let json: serde_json::Value = serde_json::from_str(&problem.to_json()).unwrap();
        assert_eq!(json["violated_policies"][0], "per-ip");
        assert_eq!(json["reason"], "over_limit");

        let mut closed = over;
        closed.reason = Reason::FailedClosed;
        let reports = [LimitReport {
            name: "per-ip",
            policy: &p,
            decision: &closed,
        }];
        assert_eq!(Problem::for_denial(&reports, None).unwrap().status, 503);
    }

    #[test]
    fn a_denial_no_wait_lifts_has_no_retry_after() {
        let p: Policy = "fixed 10/1m".parse().unwrap();
        let never = decision(false, 10, 0, RETRY_NEVER);
        let reports = [LimitReport {
            name: "big",
            policy: &p,
            decision: &never,
        }];
        let headers = rate_limit_headers(&reports, 0);
        assert!(headers.iter().all(|(n, _)| *n != "Retry-After"));
        assert_eq!(
            Problem::for_denial(&reports, None).unwrap().retry_after,
            None
        );
    }
}
