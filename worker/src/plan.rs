//! Per request: which limits apply with which identifiers (the [`Plan`]), and what to answer once
//! the store has decided (the [`Outcome`]). Pure, so the whole request → limits → headers path is
//! tested natively and under wasm32 without a runtime.

use edgelimit::http::{rate_limit_headers, LimitReport, Problem, PROBLEM_CONTENT_TYPE};
use edgelimit::{Check, Identifier, Limit, LimiterStats, Reason, Verdict};
use serde::Serialize;

use crate::config::{Config, Missing};
use crate::identify::RequestView;

/// The header that reports shadow-mode decisions: `allow`, or `deny; policies="a, b"`.
pub const SHADOW_HEADER: &str = "X-EdgeLimit-Shadow";

/// `Cache-Control` of the answers the Worker gives itself (denials, missing identifiers).
pub const NO_STORE: &str = "no-store";

/// One limit to decide for this request.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The rule that applies it.
    pub rule: String,
    /// The limit.
    pub limit: Limit,
    /// Whose quota.
    pub identifier: Identifier,
    /// How much this request takes.
    pub cost: i64,
}

/// A limit whose identifier the request lacks, configured to deny.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingIdentifier {
    /// The rule.
    pub rule: String,
    /// The limit.
    pub limit: String,
    /// The source that was empty, described.
    pub source: String,
}

/// What one request is checked against.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Plan {
    /// The names of the rules that matched.
    pub rules: Vec<String>,
    /// Limits of enforcing rules: decided all or nothing as one check.
    pub enforced: Vec<Planned>,
    /// Limits of shadow rules: decided as a second check, never blocking.
    pub shadow: Vec<Planned>,
    /// An enforcing limit whose identifier is missing and whose rule says deny.
    pub missing: Option<MissingIdentifier>,
    /// Shadow limits whose identifier is missing and whose rule says deny (reported only).
    pub shadow_missing: Vec<String>,
}

/// What to do with the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Admit it: forward to the origin (or the configured response).
    Forward,
    /// Answer it here.
    Respond {
        /// The status.
        status: u16,
        /// The body.
        body: String,
        /// Its `Content-Type`.
        content_type: &'static str,
    },
}

/// One limit's result in the log line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitLog {
    /// The limit's name.
    pub name: String,
    /// Whether it admitted.
    pub allowed: bool,
    /// Quota left.
    pub remaining: u64,
    /// Why.
    pub reason: Reason,
    /// Whether it belongs to a shadow rule.
    pub shadow: bool,
}

/// The answer for one request, and what to log about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Forward or answer.
    pub action: Action,
    /// Header fields to add to the response either way.
    pub headers: Vec<(String, String)>,
    /// Shadow limits that would have denied.
    pub shadow_denied: Vec<String>,
    /// Every decided limit, for the log line and analytics.
    pub limits: Vec<LimitLog>,
    /// Whether all-or-nothing held for the enforced limits (false only across shards).
    pub atomic: bool,
}

impl Config {
    /// The limits that apply to `request`, with their identifiers.
    pub fn plan(&self, request: &dyn RequestView) -> Plan {
        let mut plan = Plan::default();
        for rule in self.rules.iter().filter(|r| r.matches(request)) {
            plan.rules.push(rule.name.clone());
            for applied in &rule.limits {
                let identifier = match applied.source.extract(request) {
                    Some(id) => id,
                    None => match applied.missing {
                        Missing::Allow => continue,
                        Missing::Shared => Identifier::from(""),
                        Missing::Deny if rule.shadow => {
                            plan.shadow_missing.push(applied.limit.name.to_string());
                            continue;
                        }
                        Missing::Deny => {
                            plan.missing.get_or_insert_with(|| MissingIdentifier {
                                rule: rule.name.clone(),
                                limit: applied.limit.name.to_string(),
                                source: applied.source.describe(),
                            });
                            continue;
                        }
                    },
                };
                let planned = Planned {
                    rule: rule.name.clone(),
                    limit: applied.limit.clone(),
                    identifier,
                    cost: applied.cost,
                };
                if rule.shadow {
                    plan.shadow.push(planned);
                } else {
                    plan.enforced.push(planned);
                }
            }
        }
        plan
    }
}

fn check_of(planned: &[Planned]) -> Check {
    planned.iter().fold(Check::new(), |check, p| {
        check.with(&p.limit, p.identifier.clone(), p.cost)
    })
}

impl Plan {
    /// The checks to send in one batch: the enforced limits first, then the shadow ones (each
    /// only when present). Nothing when the request is refused for a missing identifier.
    pub fn checks(&self) -> Vec<Check> {
        if self.missing.is_some() {
            return Vec::new();
        }
        [&self.enforced, &self.shadow]
            .into_iter()
            .filter(|p| !p.is_empty())
            .map(|p| check_of(p))
            .collect()
    }

    /// The answer, given the verdicts for [`Plan::checks`] (in order), the time the decision was
    /// made (epoch ms) and the request path.
    pub fn decide(&self, verdicts: &[Verdict], now_ms: u64, path: &str) -> Outcome {
        if let Some(missing) = &self.missing {
            let problem = serde_json::json!({
                "type": "about:blank",
                "title": "Bad Request",
                "status": 400,
                "detail": format!(
                    "Rule \"{}\" limits requests by {} (limit \"{}\"), and this request has none.",
                    missing.rule, missing.source, missing.limit
                ),
                "instance": path,
                "policy": missing.limit,
            });
            return Outcome {
                action: Action::Respond {
                    status: 400,
                    body: problem.to_string(),
                    content_type: PROBLEM_CONTENT_TYPE,
                },
                headers: vec![("Cache-Control".to_string(), NO_STORE.to_string())],
                shadow_denied: Vec::new(),
                limits: Vec::new(),
                atomic: true,
            };
        }
        let mut verdicts = verdicts.iter();
        let enforced_check = (!self.enforced.is_empty()).then(|| check_of(&self.enforced));
        // Verdicts come in the order of `checks()`: enforced (if any), then shadow (if any).
        let enforced = enforced_check
            .as_ref()
            .and_then(|c| verdicts.next().map(|v| (c, v)));
        let shadow_check = (!self.shadow.is_empty()).then(|| check_of(&self.shadow));
        let shadow = shadow_check
            .as_ref()
            .and_then(|c| verdicts.next().map(|v| (c, v)));

        let mut limits = Vec::new();
        let mut headers = Vec::new();
        let mut action = Action::Forward;
        let mut atomic = true;
        if let Some((check, verdict)) = enforced {
            atomic = verdict.atomic;
            let reports: Vec<LimitReport<'_>> = check
                .items()
                .iter()
                .zip(&verdict.decisions)
                .map(|(item, decision)| LimitReport {
                    name: &item.limit.name,
                    policy: &item.limit.policy,
                    decision,
                })
                .collect();
            headers.extend(
                rate_limit_headers(&reports, now_ms)
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v)),
            );
            if let Some(problem) = Problem::for_denial(&reports, Some(path)) {
                // A denial is about this client at this moment: no cache may replay it.
                headers.push(("Cache-Control".to_string(), NO_STORE.to_string()));
                action = Action::Respond {
                    status: problem.status,
                    body: problem.to_json(),
                    content_type: PROBLEM_CONTENT_TYPE,
                };
            }
            limits.extend(reports.iter().map(|r| LimitLog {
                name: r.name.to_string(),
                allowed: r.decision.allowed,
                remaining: r.decision.remaining,
                reason: r.decision.reason,
                shadow: false,
            }));
        }
        let mut shadow_denied = self.shadow_missing.clone();
        if let Some((check, verdict)) = shadow {
            for (item, decision) in check.items().iter().zip(&verdict.decisions) {
                if !decision.allowed {
                    shadow_denied.push(item.limit.name.to_string());
                }
                limits.push(LimitLog {
                    name: item.limit.name.to_string(),
                    allowed: decision.allowed,
                    remaining: decision.remaining,
                    reason: decision.reason,
                    shadow: true,
                });
            }
        }
        if !self.shadow.is_empty() || !self.shadow_missing.is_empty() {
            let value = if shadow_denied.is_empty() {
                "allow".to_string()
            } else {
                format!("deny; policies=\"{}\"", shadow_denied.join(", "))
            };
            headers.push((SHADOW_HEADER.to_string(), value));
        }
        Outcome {
            action,
            headers,
            shadow_denied,
            limits,
            atomic,
        }
    }
}

impl Outcome {
    /// Whether the request is admitted.
    pub fn allowed(&self) -> bool {
        self.action == Action::Forward
    }

    /// The log line for this request (one JSON object), given the store's latency and, when
    /// known, the isolate's counters so far (denial-cache hits among them).
    pub fn log_line(
        &self,
        plan: &Plan,
        store_ms: Option<f64>,
        path: &str,
        isolate: Option<&LimiterStats>,
    ) -> String {
        #[derive(Serialize)]
        struct Isolate {
            allowed: u64,
            denied: u64,
            cache_hits: u64,
            failed_open: u64,
            failed_closed: u64,
            fallback: u64,
            store_errors: u64,
        }
        #[derive(Serialize)]
        struct Line<'a> {
            edgelimit: &'static str,
            path: &'a str,
            rules: &'a [String],
            allowed: bool,
            status: u16,
            limits: &'a [LimitLog],
            shadow_denied: &'a [String],
            atomic: bool,
            #[serde(skip_serializing_if = "Option::is_none")]
            store_ms: Option<f64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            isolate: Option<Isolate>,
        }
        let status = match &self.action {
            Action::Forward => 200,
            Action::Respond { status, .. } => *status,
        };
        serde_json::to_string(&Line {
            edgelimit: "decision",
            path,
            rules: &plan.rules,
            allowed: self.allowed(),
            status,
            limits: &self.limits,
            shadow_denied: &self.shadow_denied,
            atomic: self.atomic,
            store_ms,
            isolate: isolate.map(|s| Isolate {
                allowed: s.allowed,
                denied: s.denied,
                cache_hits: s.cache_hits,
                failed_open: s.failed_open,
                failed_closed: s.failed_closed,
                fallback: s.fallback,
                store_errors: s.store_errors,
            }),
        })
        .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::tests::FakeRequest;
    use edgelimit::MemoryStore;
    use serde_json::json;

    fn config() -> Config {
        Config::from_value(json!({
            "rules": [
                { "name": "api", "path_prefix": "/api/", "limits": [
                    { "name": "per-ip", "policy": "fixed 3/1m", "identifier": "ip" },
                    { "name": "per-key", "policy": "gcra 2/1s burst 2",
                      "identifier": "api-key:header:x-api-key", "missing": "deny" }
                ]},
                { "name": "watch", "shadow": true, "limits": [
                    { "name": "shadow-ip", "policy": "fixed 1/1m", "identifier": "ip" }
                ]},
                { "name": "writes", "methods": ["POST"], "limits": [
                    { "name": "per-user", "policy": "fixed 1/1h", "identifier": "header:x-user", "missing": "allow" }
                ]}
            ]
        }))
        .unwrap()
    }

    fn run(config: &Config, store: &MemoryStore, request: &FakeRequest, now: u64) -> Outcome {
        let plan = config.plan(request);
        let verdicts = store.check_now(&plan.checks(), now);
        plan.decide(&verdicts, now, request.path())
    }

    fn header<'a>(outcome: &'a Outcome, name: &str) -> Option<&'a str> {
        outcome
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn rules_apply_by_path_and_method() {
        let c = config();
        let req = FakeRequest::get("h", "/api/x")
            .with_header("cf-connecting-ip", "1.1.1.1")
            .with_header("x-api-key", "k");
        let plan = c.plan(&req);
        assert_eq!(plan.rules, ["api", "watch"]);
        assert_eq!(plan.enforced.len(), 2);
        assert_eq!(plan.shadow.len(), 1);
        assert_eq!(plan.checks().len(), 2);
        let mut post = FakeRequest::get("h", "/other").with_header("x-user", "u");
        post.method = "POST".into();
        assert_eq!(c.plan(&post).rules, ["watch", "writes"]);
    }

    #[test]
    fn a_missing_identifier_is_handled_as_configured() {
        let c = config();
        let store = MemoryStore::new();
        let no_key = FakeRequest::get("h", "/api/x").with_header("cf-connecting-ip", "1.1.1.1");
        let outcome = run(&c, &store, &no_key, 0);
        match &outcome.action {
            Action::Respond { status, body, .. } => {
                assert_eq!(*status, 400);
                assert_eq!(header(&outcome, "Cache-Control"), Some("no-store"));
                assert!(body.contains("x-api-key"), "{body}");
            }
            other => panic!("expected a 400, got {other:?}"),
        }
        let mut post = FakeRequest::get("h", "/other");
        post.method = "POST".into();
        assert_eq!(
            c.plan(&post).enforced.len(),
            0,
            "missing = allow skips the limit"
        );
        let no_ip = FakeRequest::get("h", "/other");
        assert_eq!(c.plan(&no_ip).shadow[0].identifier, Identifier::from(""));
    }

    #[test]
    fn denials_answer_429_with_headers_and_a_problem_naming_the_policy() {
        let c = config();
        let store = MemoryStore::new();
        let req = FakeRequest::get("h", "/api/x")
            .with_header("cf-connecting-ip", "1.1.1.1")
            .with_header("x-api-key", "k");
        let status = |out: &Outcome| match &out.action {
            Action::Forward => 200,
            Action::Respond { status, .. } => *status,
        };
        // One request a second: the key's GCRA (2/s) keeps up, per-ip (3/min) runs out.
        let spaced: Vec<Outcome> = (0..4)
            .map(|i| run(&c, &store, &req, 60_000 + i * 1_000))
            .collect();
        assert_eq!(
            spaced.iter().map(status).collect::<Vec<_>>(),
            [200, 200, 200, 429]
        );
        let out = &spaced[3];
        let Action::Respond {
            body, content_type, ..
        } = &out.action
        else {
            unreachable!()
        };
        assert_eq!(*content_type, PROBLEM_CONTENT_TYPE);
        let problem: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(problem["policy"], "per-ip");
        assert_eq!(problem["instance"], "/api/x");
        // The window ends at 120 000; the request came at 63 000.
        assert_eq!(header(out, "Retry-After"), Some("57"));
        assert_eq!(header(out, "X-RateLimit-Remaining"), Some("0"));
        assert_eq!(header(out, "Cache-Control"), Some("no-store"));
        assert_eq!(
            header(&spaced[0], "Cache-Control"),
            None,
            "the origin decides for admitted requests"
        );
        assert!(header(out, "RateLimit")
            .unwrap()
            .contains("\"per-ip\";r=0;t=57"));
        assert!(header(&spaced[0], "RateLimit-Policy")
            .unwrap()
            .contains("\"per-key\";q=2;w=1"));

        // A burst from another client: the key's GCRA denies the third at once.
        let other = FakeRequest::get("h", "/api/x")
            .with_header("cf-connecting-ip", "2.2.2.2")
            .with_header("x-api-key", "k2");
        let burst: Vec<u16> = (0..3)
            .map(|i| status(&run(&c, &store, &other, 200_000 + i)))
            .collect();
        assert_eq!(burst, [200, 200, 429]);
    }

    #[test]
    fn shadow_rules_report_but_never_block() {
        let c = config();
        let store = MemoryStore::new();
        let req = FakeRequest::get("h", "/public").with_header("cf-connecting-ip", "9.9.9.9");
        let first = run(&c, &store, &req, 0);
        assert!(first.allowed());
        assert_eq!(header(&first, SHADOW_HEADER), Some("allow"));
        let second = run(&c, &store, &req, 1);
        assert!(second.allowed(), "shadow mode must never block");
        assert_eq!(
            header(&second, SHADOW_HEADER),
            Some("deny; policies=\"shadow-ip\"")
        );
        assert_eq!(second.shadow_denied, ["shadow-ip"]);
        assert!(
            header(&second, "RateLimit").is_none(),
            "shadow limits are not advertised"
        );
        let line: serde_json::Value =
            serde_json::from_str(&second.log_line(&c.plan(&req), Some(1.5), "/public", None))
                .unwrap();
        assert_eq!(line["shadow_denied"][0], "shadow-ip");
        assert_eq!(line["allowed"], true);
    }
}
