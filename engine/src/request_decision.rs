//! What the path decided for one request, in one word every host writes the same way: the
//! `edgelimit.decision` attribute of its span, the `decision` of its log line and the sixth blob
//! of its Analytics Engine point (docs/observability.md, "One vocabulary"). Read from the
//! [`Outcome`] alone, so the word never disagrees with the answer.

use edgelimit::Reason;

use crate::ruling::Outcome;

/// One request's decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestDecision {
    /// Forwarded: every enforced limit admitted it (a fallback's admission included).
    Allowed,
    /// Answered 429: an enforced limit denied it (over its limit, blocked, from the denial
    /// cache, or a fallback's denial).
    Denied,
    /// Forwarded although a `soft` limit denied it; the origin was told (`EdgeLimit-Exceeded`).
    Soft,
    /// Forwarded after a wait (`exceed = "delay …"`).
    Delayed,
    /// Forwarded; a shadow limit (or a shadow rule's deny list) would have refused it.
    ShadowDenied,
    /// Forwarded because the store failed and the binding limit fails open.
    FailedOpen,
    /// Answered 503 because the store failed and a limit fails closed.
    FailedClosed,
    /// Answered 400 before any limit was decided: an identifier missing where its limit says
    /// deny, a field sent twice, a path or host the origin would read otherwise.
    Refused,
    /// Answered 403: a deny list matched.
    ListDenied,
}

impl RequestDecision {
    /// Every decision, in the order of the table in docs/observability.md.
    pub const ALL: [RequestDecision; 9] = [
        RequestDecision::Allowed,
        RequestDecision::Denied,
        RequestDecision::Soft,
        RequestDecision::Delayed,
        RequestDecision::ShadowDenied,
        RequestDecision::FailedOpen,
        RequestDecision::FailedClosed,
        RequestDecision::Refused,
        RequestDecision::ListDenied,
    ];

    /// The decision of a request ruled `outcome`. An answer the path gave itself comes first;
    /// of a forwarded request, what most needs an operator's eye: failing open, then a wait,
    /// then a `soft` exceedance, then a shadow denial.
    pub fn of(outcome: &Outcome) -> RequestDecision {
        let reason = outcome.binding.as_ref().map(|b| b.reason);
        match outcome.status {
            200 if reason == Some(Reason::FailedOpen) => RequestDecision::FailedOpen,
            200 if outcome.delay_ms > 0 => RequestDecision::Delayed,
            200 if !outcome.soft_exceeded.is_empty() => RequestDecision::Soft,
            200 if !outcome.shadow_denied.is_empty() || !outcome.shadow_listed.is_empty() => {
                RequestDecision::ShadowDenied
            }
            200 => RequestDecision::Allowed,
            400 => RequestDecision::Refused,
            403 => RequestDecision::ListDenied,
            503 => RequestDecision::FailedClosed,
            _ if reason == Some(Reason::FailedClosed) => RequestDecision::FailedClosed,
            _ => RequestDecision::Denied,
        }
    }

    /// The word: `allowed`, `denied`, `soft`, `delayed`, `shadow_denied`, `failed_open`,
    /// `failed_closed`, `refused` or `list_denied`.
    pub const fn as_str(self) -> &'static str {
        match self {
            RequestDecision::Allowed => "allowed",
            RequestDecision::Denied => "denied",
            RequestDecision::Soft => "soft",
            RequestDecision::Delayed => "delayed",
            RequestDecision::ShadowDenied => "shadow_denied",
            RequestDecision::FailedOpen => "failed_open",
            RequestDecision::FailedClosed => "failed_closed",
            RequestDecision::Refused => "refused",
            RequestDecision::ListDenied => "list_denied",
        }
    }
}

impl std::fmt::Display for RequestDecision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::ruling::Binding;

    fn binding(reason: Reason) -> Option<Binding> {
        Some(Binding {
            name: Arc::from("per-ip"),
            reason,
            remaining: 0,
        })
    }

    #[test]
    fn each_answer_has_its_word() {
        let forwarded = Outcome {
            status: 200,
            binding: binding(Reason::Admitted),
            ..Outcome::default()
        };
        let cases = [
            (forwarded.clone(), RequestDecision::Allowed),
            (
                Outcome {
                    binding: binding(Reason::FailedOpen),
                    // Failing open is told before the shadow denial it also had.
                    shadow_denied: vec![Arc::from("watch")],
                    ..forwarded.clone()
                },
                RequestDecision::FailedOpen,
            ),
            (
                Outcome {
                    delay_ms: 40,
                    soft_exceeded: vec![Arc::from("soft")],
                    ..forwarded.clone()
                },
                RequestDecision::Delayed,
            ),
            (
                Outcome {
                    soft_exceeded: vec![Arc::from("soft")],
                    ..forwarded.clone()
                },
                RequestDecision::Soft,
            ),
            (
                Outcome {
                    shadow_denied: vec![Arc::from("watch")],
                    ..forwarded.clone()
                },
                RequestDecision::ShadowDenied,
            ),
            (
                Outcome {
                    status: 429,
                    binding: binding(Reason::CachedDenial),
                    ..Outcome::default()
                },
                RequestDecision::Denied,
            ),
            (
                Outcome {
                    status: 503,
                    binding: binding(Reason::FailedClosed),
                    ..Outcome::default()
                },
                RequestDecision::FailedClosed,
            ),
            (
                Outcome {
                    status: 400,
                    ..Outcome::default()
                },
                RequestDecision::Refused,
            ),
            (
                Outcome {
                    status: 403,
                    ..Outcome::default()
                },
                RequestDecision::ListDenied,
            ),
        ];
        for (outcome, expected) in cases {
            assert_eq!(RequestDecision::of(&outcome), expected, "{outcome:?}");
        }
        let words: std::collections::BTreeSet<&str> =
            RequestDecision::ALL.iter().map(|d| d.as_str()).collect();
        assert_eq!(words.len(), RequestDecision::ALL.len(), "{words:?}");
    }

    /// Polls a future that must be ready at once (the memory store never waits).
    fn ready<F: std::future::Future>(future: F) -> F::Output {
        let mut future = std::pin::pin!(future);
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        match future.as_mut().poll(&mut context) {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("the memory store did not answer at once"),
        }
    }

    #[test]
    fn the_log_line_and_the_analytics_point_carry_the_word_and_the_limit() {
        let config = crate::Config::from_value(serde_json::json!({
            "rules": [{ "name": "api", "path_prefix": "/api/", "limits": [
                { "name": "per-ip", "policy": "fixed 1/1h", "identifier": "ip" },
                { "name": "per-key", "policy": "fixed 100/1h",
                  "identifier": "api-key:header:x-api-key", "missing": "deny" }
            ]}]
        }))
        .unwrap();
        let edge = crate::Edge::new(config, edgelimit::MemoryStore::new());
        let request = crate::OwnedRequest::get("h", "/api/items")
            .with_header("cf-connecting-ip", "203.0.113.7")
            .with_header("x-api-key", "k1");
        let no_key = crate::OwnedRequest::get("h", "/api/items")
            .with_header("cf-connecting-ip", "192.0.2.1");
        let mut seen = Vec::new();
        for r in [&request, &request, &no_key] {
            let handled = ready(edge.handle(r, 0));
            let line = handled.log_line(r, None);
            let point = handled.analytics();
            seen.push((
                line.status,
                line.decision.clone(),
                line.limit.clone(),
                point.blobs[5].clone(),
                point.blobs[1].clone(),
                point.index.clone(),
            ));
        }
        let word = |w: &str| Some(w.to_string());
        assert_eq!(
            seen,
            [
                (
                    200,
                    word("allowed"),
                    word("per-ip"),
                    "allowed".into(),
                    "per-ip".into(),
                    "per-ip".into()
                ),
                (
                    429,
                    word("denied"),
                    word("per-ip"),
                    "denied".into(),
                    "per-ip".into(),
                    "per-ip".into()
                ),
                (
                    400,
                    word("refused"),
                    None,
                    "refused".into(),
                    String::new(),
                    String::new()
                ),
            ]
        );
    }
}
