//! The request path end to end over `MemoryStore`: plans, rulings, responses, log lines, lists
//! and the buffers the path keeps between requests.

use std::sync::Arc;

use edgelimit::control::list::{Gate, ListEntry};
use edgelimit::http::PROBLEM_CONTENT_TYPE;
use edgelimit::{Checked, Control, Identifier, ManualClock, MemoryStore};
use serde_json::json;

use super::*;
use crate::identify::OwnedRequest;
use crate::lists::{self, Denial};
use crate::ruling::{Action, SHADOW_HEADER};

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

fn listed_config() -> Config {
    Config::from_value(json!({
        "deny": ["ip 192.0.2.0/24"],
        "allow": ["header:x-partner-key s3cret"],
        "rules": [
            { "name": "api", "path_prefix": "/api/",
              "deny": ["country KP"], "allow": ["header:x-user friend"],
              "limits": [
                { "name": "per-user", "policy": "fixed 2/1m", "identifier": "header:x-user" }
            ]},
            { "name": "watch", "shadow": true, "deny": ["country CN"], "limits": [
                { "name": "shadow-user", "policy": "fixed 100/1m", "identifier": "header:x-user" }
            ]}
        ]
    }))
    .unwrap()
}

/// `config` with `X-EdgeLimit-Shadow` on.
fn with_shadow_header(mut config: Config) -> Config {
    config.shadow_header = true;
    config
}

/// A request path over a `MemoryStore`, both on one manual clock.
struct Path {
    edge: Edge<MemoryStore>,
    clock: Arc<ManualClock>,
}

impl Path {
    fn new(config: Config) -> Path {
        let clock = Arc::new(ManualClock::at(0));
        let store = MemoryStore::new().with_clock(clock.clone());
        Path {
            edge: Edge::new(config, store).with_clock(clock.clone()),
            clock,
        }
    }

    fn store(&self) -> &MemoryStore {
        self.edge.limiter().store()
    }

    /// Handles `request` at `now` and keeps what the tests read.
    fn run(&self, request: &OwnedRequest, now: u64) -> Ran {
        self.clock.set(now);
        let handled = ready(self.edge.handle(request, now));
        let response = handled.response(request);
        // The ruling is what the response is written from: they never disagree.
        assert_eq!(handled.outcome().status, response.status());
        Ran {
            outcome: handled.outcome().clone(),
            response,
            line: handled.log_line(request, None),
        }
    }

    fn add(&self, list: &str, entry: &str) {
        let entry: ListEntry = entry.parse().unwrap();
        ready(self.store().list_add(list, &entry, None, 0)).unwrap();
    }
}

/// What one request was answered.
struct Ran {
    outcome: Outcome,
    response: Response,
    line: LogLine,
}

impl Ran {
    fn allowed(&self) -> bool {
        self.outcome.allowed()
    }

    fn status(&self) -> u16 {
        self.outcome.status
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.response.header(name)
    }

    fn problem(&self) -> serde_json::Value {
        match &self.response.action {
            Action::Respond { body, .. } => serde_json::from_str(body).unwrap(),
            Action::Forward => panic!("forwarded, not answered"),
        }
    }
}

/// Polls a future that must be ready at once (the memory store never waits).
fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = std::task::Waker::noop();
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(waker))
    {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("the memory store did not answer at once"),
    }
}

fn names(plan: &Plan<'_>) -> Vec<String> {
    plan.rules.iter().map(|r| r.name.clone()).collect()
}

fn from(ip: &str, user: &str) -> OwnedRequest {
    OwnedRequest::get("h", "/api/x")
        .with_header("cf-connecting-ip", ip)
        .with_header("x-user", user)
}

#[test]
fn rules_apply_by_path_and_method() {
    let c = config();
    let req = OwnedRequest::get("h", "/api/x")
        .with_header("cf-connecting-ip", "1.1.1.1")
        .with_header("x-api-key", "k");
    let plan = c.plan(&req);
    assert_eq!(names(&plan), ["api", "watch"]);
    assert_eq!(plan.enforced().unwrap().items().len(), 2);
    assert_eq!(plan.shadow().unwrap().items().len(), 1);
    assert_eq!(plan.checks().len(), 2);
    let post = OwnedRequest::new("POST", "h", "/other").with_header("x-user", "u");
    assert_eq!(names(&c.plan(&post)), ["watch", "writes"]);
}

/// A request that gives its own identifiers (a replayed log line) and its own matched rules.
struct Given<'a> {
    request: &'a OwnedRequest,
    identifier: &'a dyn Fn(&RuleLimit) -> Option<Identifier>,
    rules: Option<&'a [usize]>,
}

impl RequestView for Given<'_> {
    fn method(&self) -> &str {
        self.request.method()
    }
    fn host(&self) -> &str {
        self.request.host()
    }
    fn path(&self) -> &str {
        self.request.path()
    }
    fn query(&self, name: &str) -> Option<String> {
        self.request.query(name)
    }
    fn query_values(&self, name: &str) -> crate::reading::FieldValues<'_> {
        self.request.query_values(name)
    }
    fn header(&self, name: &str) -> Option<String> {
        self.request.header(name)
    }
    fn header_values(&self, name: &str) -> crate::reading::FieldValues<'_> {
        self.request.header_values(name)
    }
}

impl Incoming for Given<'_> {
    fn identifier(
        &self,
        limit: &RuleLimit,
        _: &crate::reading::Reading<'_, Self>,
    ) -> Option<Identifier> {
        (self.identifier)(limit)
    }

    fn matching<'c>(
        &self,
        config: &'c Config,
        read: &crate::reading::Reading<'_, Self>,
    ) -> crate::plan::MatchedRules<'c> {
        match self.rules {
            Some(rules) => rules.iter().map(|&i| &config.rules[i]).collect(),
            None => config.matching(read),
        }
    }
}

use crate::rules::RuleLimit;

#[test]
fn an_incoming_request_may_give_its_identifiers_and_rules() {
    let c = config();
    // No header at all: the identifiers come from the request's own answer.
    let req = OwnedRequest::get("h", "/api/x");
    let given = |_: &RuleLimit| Some(Identifier::from("given"));
    let plan = c.plan(&Given {
        request: &req,
        identifier: &given,
        rules: None,
    });
    let items = plan.enforced().unwrap().items();
    assert_eq!(items.len(), 2);
    assert!(items
        .iter()
        .all(|i| i.identifier == Identifier::from("given")));
    // `None` is a missing identifier, handled by the limit's `missing` setting.
    let all_but_key =
        |l: &RuleLimit| (&*l.limit.name != "per-key").then(|| Identifier::from("given"));
    let plan = c.plan(&Given {
        request: &req,
        identifier: &all_but_key,
        rules: None,
    });
    let Some(crate::plan::Refusal::Missing(absent)) = plan.refusal() else {
        panic!("refused for the missing key")
    };
    assert_eq!(&*absent.limit.limit.name, "per-key");
    // The default reads the request, as `plan` does.
    let req = OwnedRequest::get("h", "/api/x").with_header("cf-connecting-ip", "1.2.3.4");
    let extract = |l: &RuleLimit| l.source.extract(&req);
    assert_eq!(
        c.plan(&req),
        c.plan(&Given {
            request: &req,
            identifier: &extract,
            rules: None,
        })
    );
    // Rules given ahead are taken as they are.
    let only_writes = c.plan(&Given {
        request: &req,
        identifier: &extract,
        rules: Some(&[2]),
    });
    assert_eq!(names(&only_writes), ["writes"]);
}

#[test]
fn a_missing_identifier_is_handled_as_configured() {
    let c = config();
    let path = Path::new(config());
    let no_key = OwnedRequest::get("h", "/api/x").with_header("cf-connecting-ip", "1.1.1.1");
    let ran = path.run(&no_key, 0);
    match &ran.response.action {
        Action::Respond { status, body, .. } => {
            assert_eq!(*status, 400);
            assert_eq!(ran.header("Cache-Control"), Some("no-store"));
            assert!(body.contains("x-api-key"), "{body}");
        }
        other => panic!("expected a 400, got {other:?}"),
    }
    let post = OwnedRequest::new("POST", "h", "/other");
    let plan = c.plan(&post);
    assert!(plan.enforced().is_none(), "missing = allow skips the limit");
    assert_eq!(plan.absent.len(), 2, "both absent identifiers are recorded");
    let no_ip = OwnedRequest::get("h", "/other");
    assert_eq!(
        c.plan(&no_ip).shadow().unwrap().items()[0].identifier,
        Identifier::from("")
    );
}

/// The header field names of a response, in order.
fn field_names(ran: &Ran) -> Vec<&'static str> {
    ran.response.headers.iter().map(|(name, _)| name).collect()
}

#[test]
fn the_configured_header_sets_are_the_only_rate_limit_fields_answered() {
    let req = OwnedRequest::get("h", "/api/x")
        .with_header("cf-connecting-ip", "1.1.1.1")
        .with_header("x-api-key", "k");
    let run = |headers: serde_json::Value| {
        let mut v = json!({
            "headers": headers,
            "rules": [{ "name": "api", "path_prefix": "/api/", "limits": [
                { "name": "per-ip", "policy": "fixed 1/1m", "identifier": "ip" }
            ]}]
        });
        if v["headers"].is_null() {
            v.as_object_mut().unwrap().remove("headers");
        }
        let path = Path::new(Config::from_value(v).unwrap());
        let admitted = path.run(&req, 0);
        let denied = path.run(&req, 1_000);
        assert_eq!((admitted.status(), denied.status()), (200, 429));
        (field_names(&admitted), field_names(&denied))
    };
    let draft = ["RateLimit-Policy", "RateLimit"];
    let legacy = [
        "X-RateLimit-Limit",
        "X-RateLimit-Remaining",
        "X-RateLimit-Reset",
    ];
    let both: Vec<&str> = draft.iter().chain(&legacy).copied().collect();
    let with = |fields: &[&'static str], extra: &[&'static str]| -> Vec<&'static str> {
        fields.iter().chain(extra).copied().collect()
    };
    let denial = ["Retry-After", "Cache-Control"];
    assert_eq!(
        run(serde_json::Value::Null),
        (both.clone(), with(&both, &denial)),
        "both sets unless configured"
    );
    assert_eq!(
        run(json!(["ratelimit", "x-ratelimit"])),
        (both.clone(), with(&both, &denial))
    );
    assert_eq!(
        run(json!(["ratelimit"])),
        (draft.to_vec(), with(&draft, &denial))
    );
    assert_eq!(
        run(json!(["X-RateLimit"])),
        (legacy.to_vec(), with(&legacy, &denial))
    );
    // Neither set: a denial still says when to come back.
    assert_eq!(run(json!([])), (vec![], denial.to_vec()));
}

#[test]
fn denials_answer_429_with_headers_and_a_problem_naming_the_policy() {
    let path = Path::new(config());
    let req = OwnedRequest::get("h", "/api/x")
        .with_header("cf-connecting-ip", "1.1.1.1")
        .with_header("x-api-key", "k");
    // One request a second: the key's GCRA (2/s) keeps up, per-ip (3/min) runs out.
    let spaced: Vec<Ran> = (0..4).map(|i| path.run(&req, 60_000 + i * 1_000)).collect();
    assert_eq!(
        spaced.iter().map(Ran::status).collect::<Vec<_>>(),
        [200, 200, 200, 429]
    );
    let out = &spaced[3];
    let Action::Respond {
        body, content_type, ..
    } = &out.response.action
    else {
        unreachable!()
    };
    assert_eq!(*content_type, PROBLEM_CONTENT_TYPE);
    let problem: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(problem["policy"], "per-ip");
    assert_eq!(problem["instance"], "/api/x");
    // The window ends at 120 000; the request came at 63 000.
    assert_eq!(out.header("Retry-After"), Some("57"));
    assert_eq!(out.header("X-RateLimit-Remaining"), Some("0"));
    assert_eq!(out.header("Cache-Control"), Some("no-store"));
    assert_eq!(
        spaced[0].header("Cache-Control"),
        None,
        "the origin decides for admitted requests"
    );
    assert!(out
        .header("RateLimit")
        .unwrap()
        .contains("\"per-ip\";r=0;t=57"));
    assert!(spaced[0]
        .header("RateLimit-Policy")
        .unwrap()
        .contains("\"per-key\";q=2;w=1"));

    // A burst from another client: the key's GCRA denies the third at once.
    let other = OwnedRequest::get("h", "/api/x")
        .with_header("cf-connecting-ip", "2.2.2.2")
        .with_header("x-api-key", "k2");
    let burst: Vec<u16> = (0..3)
        .map(|i| path.run(&other, 200_000 + i).status())
        .collect();
    assert_eq!(burst, [200, 200, 429]);
}

#[test]
fn a_denial_from_the_isolates_cache_tells_the_client_what_the_stores_would() {
    let path = Path::new(config());
    let req = OwnedRequest::get("h", "/api/x")
        .with_header("cf-connecting-ip", "3.3.3.3")
        .with_header("x-api-key", "k3");
    let statuses: Vec<u16> = (0..5).map(|i| path.run(&req, 1_000 + i).status()).collect();
    assert_eq!(statuses, [200, 200, 429, 429, 429]);
    let first = path.run(&req, 1_010);
    let cached = path.run(&req, 1_011);
    assert_eq!(
        cached.line.limits[1].reason, "cached_denial",
        "the log says how it was found"
    );
    assert_eq!(first.problem()["reason"], "over_limit");
    assert_eq!(
        cached.problem()["reason"],
        "over_limit",
        "the client is told what happened, not how the limiter knew"
    );
}

#[test]
fn shadow_rules_report_but_never_block_and_stay_unannounced_by_default() {
    for announced in [false, true] {
        let c = if announced {
            with_shadow_header(config())
        } else {
            config()
        };
        let path = Path::new(c);
        let req = OwnedRequest::get("h", "/public").with_header("cf-connecting-ip", "9.9.9.9");
        let first = path.run(&req, 0);
        assert!(first.allowed());
        let second = path.run(&req, 1);
        assert!(second.allowed(), "shadow mode must never block");
        assert_eq!(&*second.outcome.shadow_denied[0], "shadow-ip");
        assert!(
            second.header("RateLimit").is_none(),
            "shadow limits are not advertised"
        );
        if announced {
            assert_eq!(first.header(SHADOW_HEADER), Some("allow"));
            assert_eq!(
                second.header(SHADOW_HEADER),
                Some("deny; policies=\"shadow-ip\"")
            );
        } else {
            assert_eq!(first.header(SHADOW_HEADER), None);
            assert_eq!(second.header(SHADOW_HEADER), None, "clients are not told");
        }
        let line = &second.line;
        assert_eq!(line.shadow_denied, ["shadow-ip"]);
        assert_eq!(line.shadow_time_ms, Some(1), "the shadow check's own time");
        assert!(line.allowed);
        assert!(line.limits[0].shadow);
        assert_eq!(line.limits[0].reason, "over_limit");
    }
}

#[test]
fn the_log_line_carries_what_a_replay_needs() {
    let c = config();
    let store = MemoryStore::new();
    let req = OwnedRequest::get("api.example.com", "/api/items")
        .with_header("cf-connecting-ip", "2001:db8::7")
        .with_header("x-api-key", "secret");
    let plan = c.plan(&req);
    let verdicts = store.direct().check(plan.checks(), 1_700_000_000_123);
    let outcome = plan.rule(&verdicts);
    let metrics = edgelimit::metrics::Metrics::default().snapshot();
    let checked = Checked {
        verdicts,
        local_ms: 1_700_000_000_100,
        store_ms: Some(2.0),
    };
    let text = LogLine::of(&plan, &checked, &outcome, &req, Some(&metrics)).to_json();
    let line: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(line["edgelimit"], "decision");
    assert_eq!(line["time_ms"], 1_700_000_000_123u64);
    assert_eq!(line["local_ms"], 1_700_000_000_100u64);
    assert_eq!(
        (&line["method"], &line["host"], &line["path"]),
        (
            &json!("GET"),
            &json!("api.example.com"),
            &json!("/api/items")
        )
    );
    assert_eq!(line["rules"], json!(["api", "watch"]));
    let limits = line["limits"].as_array().unwrap();
    assert_eq!(limits.len(), 3);
    assert_eq!(limits[0]["name"], "per-ip");
    assert_eq!(
        limits[0]["identifier"], "2001%3Adb8%3A%3A%2F64",
        "as keyed in Redis: the client's /64"
    );
    assert_eq!(limits[0]["cost"], 1);
    assert_eq!(limits[0]["reason"], "admitted");
    let key = limits[1]["identifier"].as_str().unwrap();
    assert_eq!(key.len(), 64, "API keys are logged hashed: {key}");
    assert!(!key.contains("secret"));
    assert_eq!(limits[2]["shadow"], true);
    assert_eq!(line["isolate"]["allowed"], 0);
    assert_eq!(line["store_ms"], 2.0);
    // One type both ways: the line reads back as written.
    let back: LogLine = serde_json::from_str(&text).unwrap();
    assert_eq!(back.to_json(), text);
    assert_eq!(
        back.identifier("per-ip"),
        Some(Identifier::from("2001:db8::/64"))
    );
}

/// The path keeps one request's buffers for the next: what it answers request after request is
/// what a plan and a ruling made afresh answer, whatever the last request sent — both checks,
/// one, none (refused for a missing key, denied by a static entry, exempted by a static allow
/// entry) — and whether the response is written along with the ruling or asked for after.
#[test]
fn buffers_kept_between_requests_change_no_answer() {
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for (c, written) in [
        (config(), true),
        (listed_config(), true),
        (config(), false),
        (listed_config(), false),
    ] {
        // The reference decides on a store of its own, plans and rules afresh, without a cache.
        let reference = MemoryStore::new();
        let mut c_uncached = c.clone();
        c_uncached.denial_cache = 0;
        let mut path = Path::new(c_uncached);
        if !written {
            path.edge = path.edge.without_responses();
        }
        let mut sent = [0usize; 3];
        let (mut refused, mut shadow_denied) = (0, 0);
        for i in 0..400 {
            let method = if next(3) == 0 { "POST" } else { "GET" };
            let target = if next(4) == 0 {
                "/static/a.css"
            } else {
                "/api/x"
            };
            let mut request = OwnedRequest::new(method, "h", target)
                .with_header("cf-connecting-ip", &format!("192.0.{}.9", next(3)))
                .with_country(["KP", "CN", "SE"][next(3) as usize]);
            for (name, values) in [
                ("x-api-key", ["k1", "k2"]),
                ("x-user", ["friend", "u"]),
                ("x-partner-key", ["s3cret", "other"]),
            ] {
                if next(2) == 0 {
                    request = request.with_header(name, values[next(2) as usize]);
                }
            }
            let now = i * 50;
            let fresh = c.plan(&request);
            let verdicts = reference.direct().check(fresh.checks(), now);
            let outcome = fresh.rule(&verdicts);
            path.clock.set(now);
            let handled = ready(path.edge.handle(&request, now));
            assert_eq!(handled.plan().checks(), fresh.checks(), "request {i}");
            assert_eq!(handled.plan().denied(), fresh.denied(), "request {i}");
            assert_eq!(handled.checked().verdicts, verdicts, "request {i}");
            assert_eq!(*handled.outcome(), outcome, "request {i}");
            assert_eq!(
                handled.response(&request),
                fresh.response(&verdicts, &outcome, request.path()),
                "request {i}"
            );
            refused += u64::from(outcome.status == 429);
            shadow_denied += u64::from(!outcome.shadow_denied.is_empty());
            sent[fresh.checks().len()] += 1;
        }
        assert!(
            sent.iter().all(|&n| n > 0),
            "{sent:?} plans of 0, 1, 2 checks"
        );
        assert!(
            refused > 0 && shadow_denied > 0,
            "{refused} 429s, {shadow_denied} shadow denials"
        );
    }
}

#[test]
fn a_static_deny_is_a_403_without_any_check() {
    let c = listed_config();
    let path = Path::new(listed_config());
    let plan = c.plan(&from("192.0.2.9", "u"));
    assert!(plan.checks().is_empty(), "no store call");
    let denial = plan.denied().unwrap();
    assert_eq!(
        (denial.list.as_str(), denial.entry.as_str(), denial.via),
        ("deny", "ip 192.0.2.0/24", Via::Static)
    );
    let ran = path.run(&from("192.0.2.9", "u"), 0);
    assert_eq!(ran.status(), 403);
    assert_eq!(ran.header("Cache-Control"), Some("no-store"));
    let problem = ran.problem();
    assert_eq!(
        (problem["reason"].as_str(), problem["list"].as_str()),
        (Some("denied"), Some("deny"))
    );
    assert_eq!(plan.rule(&[]).denied.unwrap().list, "deny");
    // A rule's own static entry, by country: that rule's list.
    let from_kp = from("203.0.113.1", "u").with_country("KP");
    let ran = path.run(&from_kp, 1);
    assert_eq!(ran.problem()["list"], "deny:api");
    // The log line says why.
    assert_eq!(
        (ran.line.status, ran.line.reason.as_deref()),
        (403, Some("denied"))
    );
    assert_eq!(
        (ran.line.list.as_deref(), ran.line.via.as_deref()),
        (Some("deny:api"), Some("static"))
    );
}

#[test]
fn a_shadow_rules_static_deny_only_reports() {
    let c = listed_config();
    let path = Path::new(with_shadow_header(listed_config()));
    let req = from("203.0.113.1", "u").with_country("CN");
    let plan = c.plan(&req);
    assert!(plan.denied().is_none());
    assert!(
        plan.shadow().is_none(),
        "the shadow rule's limits are not charged"
    );
    let ran = path.run(&req, 0);
    assert!(ran.allowed());
    assert_eq!(ran.outcome.shadow_listed[0].list, "deny:watch");
    assert_eq!(&*ran.outcome.shadow_denied[0], "shadow-user");
    assert_eq!(
        ran.header(SHADOW_HEADER),
        Some("deny; policies=\"shadow-user\"")
    );
}

#[test]
fn a_static_allow_exempts_its_rules_limits_but_not_from_deny_lookups() {
    let c = listed_config();
    let path = Path::new(listed_config());
    let partner = from("203.0.113.1", "p").with_header("x-partner-key", "s3cret");
    for now in 0..5 {
        let ran = path.run(&partner, now);
        assert!(ran.allowed());
        assert!(ran.header("RateLimit").is_none(), "not advertised");
    }
    let plan = c.plan(&partner);
    assert_eq!(
        plan.allowed.len(),
        2,
        "both rules, by the configuration-wide allow"
    );
    let enforced = plan.enforced().expect("a check looks up the deny lists");
    assert!(enforced.items().is_empty() && enforced.is_gated());
    // A rule's own allow entry exempts that rule only.
    let friend = from("203.0.113.1", "friend");
    let plan = c.plan(&friend);
    assert_eq!(plan.allowed.len(), 1);
    assert_eq!(plan.shadow().unwrap().items().len(), 1);
    // Deny beats allow: a listed partner is refused.
    path.add("deny", "ip 203.0.113.1");
    assert_eq!(path.run(&partner, 10).status(), 403);
    // Without the dynamic lists, an exempted request asks nothing.
    let mut off = listed_config();
    off.dynamic_lists = false;
    assert!(off.plan(&partner).checks().is_empty());
}

#[test]
fn dynamic_lists_are_gates_of_the_check() {
    let c = listed_config();
    let plan = c.plan(&from("203.0.113.1", "u"));
    let enforced = plan.enforced().unwrap();
    assert_eq!(
        enforced.gates(),
        [Gate::new(
            vec!["deny".to_string(), "deny:api".to_string()],
            vec!["allow".to_string(), "allow:api".to_string()],
        )]
    );
    assert_eq!(enforced.items()[0].gate, Some(0));
    assert_eq!(
        plan.deny_scope(),
        ["deny", "deny:api"],
        "not the shadow rule's"
    );
    assert!(plan.candidates().contains("ip 203.0.113.0/24"));
    assert!(plan.candidates().contains("header:x-user u"));
    let mut off = listed_config();
    off.dynamic_lists = false;
    let plan = off.plan(&from("203.0.113.1", "u"));
    assert!(!plan.enforced().unwrap().is_gated());
    assert!(plan.deny_scope().is_empty());
    // No rule matched: nothing is looked up.
    let only_api = Config::from_value(json!({"rules": [{"name": "api", "path_prefix": "/api/",
        "limits": [{"name": "l", "policy": "fixed 1/1m", "identifier": "ip"}]}]}))
    .unwrap();
    let plan =
        only_api.plan(&OwnedRequest::get("h", "/x").with_header("cf-connecting-ip", "1.2.3.4"));
    assert!(plan.checks().is_empty() && plan.candidates().is_empty());
}

#[test]
fn a_dynamic_deny_is_a_403_and_is_remembered_by_the_isolate() {
    let path = Path::new(listed_config());
    let req = from("198.51.100.7", "m");
    assert!(path.run(&req, 0).allowed());
    path.add("deny", "ip 198.51.100.0/24");
    let ran = path.run(&req, 1);
    assert_eq!(ran.status(), 403);
    let denial = ran.outcome.denied.clone().unwrap();
    assert_eq!(
        (denial.list.as_str(), denial.entry.as_str(), denial.via),
        ("deny", "ip 198.51.100.0/24", Via::Store)
    );
    assert_eq!(ran.problem()["list"], "deny");
    // Remembered by the isolate: the next request from the range asks nothing.
    let next = from("198.51.100.99", "n");
    path.clock.set(2);
    let handled = ready(path.edge.handle(&next, 2));
    assert!(handled.plan().checks().is_empty());
    assert_eq!(handled.outcome().denied.as_ref().unwrap().via, Via::Cache);
    assert!(
        path.edge
            .metrics_text()
            .contains("edgelimit_list_denied_total{list=\"deny\",via=\"cache\"} 1"),
        "{}",
        path.edge.metrics_text()
    );
    drop(handled);
    // Nothing was charged while denied: once unlisted (and forgotten), `m` has one of two left.
    let entry: ListEntry = "ip 198.51.100.0/24".parse().unwrap();
    assert!(ready(path.store().list_remove("deny", &entry)).unwrap());
    let later = 2 + crate::config::DEFAULT_LIST_CACHE_MS;
    assert_eq!(path.run(&req, later).status(), 200);
    assert_eq!(path.run(&req, later + 1).status(), 429);
}

#[test]
fn the_isolates_memory_of_a_denial_lapses() {
    let mut cache = lists::DenyCache::new(10_000);
    let denial = Denial {
        list: "deny".to_string(),
        entry: "ip 198.51.100.0/24".to_string(),
        via: Via::Store,
    };
    cache.remember_denial(&denial, 1);
    let c = listed_config();
    let next = from("198.51.100.99", "n");
    let mut plan = c.plan(&next);
    plan.deny_if_remembered(&mut cache, 2);
    assert!(plan.checks().is_empty());
    assert_eq!(plan.rule(&[]).denied.unwrap().via, Via::Cache);
    let mut plan = c.plan(&next);
    plan.deny_if_remembered(&mut cache, 10_002);
    assert_eq!(plan.checks().len(), 2, "forgotten after list_cache_ms");
}

#[test]
fn a_dynamic_allow_is_forwarded_uncounted_and_unadvertised() {
    let path = Path::new(listed_config());
    path.add("allow:api", "header:x-user vip");
    let vip = from("203.0.113.1", "vip");
    for now in 0..5 {
        let ran = path.run(&vip, now);
        assert!(ran.allowed(), "{now}");
        assert!(ran.header("RateLimit").is_none());
    }
    // The configuration-wide deny list refuses even a request only shadow rules limit.
    path.add("deny", "country RU");
    let shadow_only = OwnedRequest::get("h", "/other")
        .with_header("x-user", "z")
        .with_country("ru");
    let ran = path.run(&shadow_only, 10);
    assert_eq!(ran.status(), 403);
    assert_eq!(ran.outcome.denied.unwrap().list, "deny");
}

#[test]
fn tiers_decide_from_the_store_and_the_deciding_policy_is_advertised() {
    use edgelimit::control::Assignment;
    let c = Config::from_value(json!({"rules": [{"name": "api", "limits": [{
        "name": "per-user", "policy": "fixed 2/1m", "identifier": "header:x-user",
        "tiers": {"pro": "fixed 5/1m"}
    }]}]}))
    .unwrap();
    let path = Path::new(c.clone());
    let limit = &c.rules[0].limits[0].limit;
    let user = |u: &str| OwnedRequest::get("h", "/x").with_header("x-user", u);
    let pro = Assignment::Tier(Arc::from("pro"));
    ready(
        path.store()
            .assign(limit, &Identifier::from("p"), Some(&pro), None),
    )
    .unwrap();
    let ran: Vec<Ran> = (0..6).map(|i| path.run(&user("p"), i)).collect();
    let statuses: Vec<u16> = ran.iter().map(Ran::status).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
    assert!(ran[0]
        .header("RateLimit-Policy")
        .unwrap()
        .contains("\"per-user\";q=5;w=60"));
    let free = path.run(&user("f"), 10);
    assert!(free
        .header("RateLimit-Policy")
        .unwrap()
        .contains("\"per-user\";q=2;w=60"));
    // An override: advertised with its capacity.
    let strict = Assignment::Override("fixed 1/1m".parse().unwrap());
    ready(
        path.store()
            .assign(limit, &Identifier::from("o"), Some(&strict), None),
    )
    .unwrap();
    let first = path.run(&user("o"), 20);
    assert!(first
        .header("RateLimit-Policy")
        .unwrap()
        .contains("\"per-user\";q=1;w=60"));
    assert_eq!(path.run(&user("o"), 21).status(), 429);
}

#[test]
fn what_a_request_settles_outlives_it() {
    let c = Config::from_value(json!({"rules": [{"name": "llm", "limits": [
        { "name": "tokens", "policy": "fixed 10000/1h", "identifier": "ip",
          "cost": { "reserve": 1000, "from": "response-header:X-Tokens-Used" } },
        { "name": "inflight", "policy": "concurrency 1 timeout 30s", "identifier": "ip" }
    ]}]}))
    .unwrap();
    let path = Path::new(c);
    let req = OwnedRequest::get("h", "/x").with_header("cf-connecting-ip", "192.0.2.1");
    let handled = ready(path.edge.handle(&req, 0));
    assert!(handled.outcome().allowed());
    let settlement = handled
        .settlement(|name| (name == "x-tokens-used").then(|| "10".to_string()))
        .expect("a lease and a cost to settle");
    drop(handled);
    // The lease is held until the settlement is sent.
    assert_eq!(path.run(&req, 1).status(), 429);
    let settled = ready(path.edge.settle(settlement));
    assert_eq!((settled.committed, settled.failed.len()), (1, 0));
    let ran = path.run(&req, 2);
    assert!(ran.allowed());
    assert!(
        ran.header("RateLimit")
            .unwrap()
            .contains("\"tokens\";r=8990"),
        "the estimate was replaced by the real cost: {:?}",
        ran.header("RateLimit")
    );
}

/// A native service can share one path across threads and await it on a multi-threaded
/// runtime: the path is `Sync` and, over a `Send` store and request, so is what `handle` returns.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn the_path_is_shared_across_threads() {
    fn sync<T: Sync + Send>(_: &T) {}
    fn send<T: Send>(_: T) {}
    let path = Path::new(config());
    sync(&path.edge);
    let request = OwnedRequest::get("h", "/api/x");
    send(path.edge.handle(&request, 0));
}

/// The value of a Prometheus sample `series` in `text`, when present.
fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn a_soft_limit_admits_tells_the_origin_and_counts() {
    let c = Config::from_value(json!({"rules": [{ "name": "api", "limits": [
        { "name": "per-ip", "policy": "fixed 10/1m", "identifier": "ip" },
        { "name": "per-user", "policy": "fixed 1/1m", "identifier": "header:x-user", "exceed": "soft" }
    ]}]}))
    .unwrap();
    assert!(c.tells_origin());
    let path = Path::new(c);
    let req = from("192.0.2.1", "ann");
    let first = path.run(&req, 0);
    assert!(first.allowed());
    assert_eq!(first.outcome.exceeded_header(), None);
    assert!(first.outcome.soft_exceeded.is_empty());
    for (i, now) in [1, 2].into_iter().enumerate() {
        let over = path.run(&req, now);
        assert!(over.allowed(), "a soft limit never refuses");
        assert_eq!(
            over.outcome.soft_exceeded,
            vec![Arc::<str>::from("per-user")]
        );
        assert_eq!(
            over.outcome.exceeded_header().as_deref(),
            Some("\"per-user\"")
        );
        assert!(
            over.outcome.shadow_denied.is_empty(),
            "not a shadow rule's denial"
        );
        // The client sees the enforced limits' fields as always, and no problem.
        assert_eq!(over.response.action, Action::Forward);
        let ratelimit = over.header("RateLimit").unwrap();
        assert!(
            ratelimit.contains(&format!("\"per-ip\";r={}", 8 - i)),
            "{ratelimit}"
        );
        assert_eq!(over.line.soft_exceeded, vec!["per-user".to_string()]);
        let logged = over
            .line
            .limits
            .iter()
            .find(|l| l.name == "per-user")
            .unwrap();
        assert_eq!(
            (logged.shadow, logged.unenforced.as_deref()),
            (true, Some("soft"))
        );
        assert!(!logged.allowed);
    }
    // Another user is under its own limit: nothing to tell.
    let other = path.run(&from("192.0.2.1", "bob"), 3);
    assert_eq!(other.outcome.exceeded_header(), None);
    // No shadow rule decided anything: the shadow header, when on, stays away.
    let debugging = Path::new(with_shadow_header(path.edge.config().clone()));
    assert_eq!(debugging.run(&req, 0).header(SHADOW_HEADER), None);
    let metrics = path.edge.metrics_text();
    assert_eq!(
        sample(
            &metrics,
            "edgelimit_soft_exceeded_total{limit=\"per-user\"}"
        ),
        Some(2),
        "{metrics}"
    );
    // Two soft limits over: the origin is told both, as a structured-field list.
    let c = Config::from_value(json!({"rules": [{ "name": "api", "limits": [
        { "name": "a", "policy": "fixed 1/1m", "identifier": "ip", "exceed": "soft" },
        { "name": "b", "policy": "fixed 1/1m", "identifier": "ip", "exceed": "soft" }
    ]}]}))
    .unwrap();
    let path = Path::new(c);
    let req = from("192.0.2.1", "ann");
    path.run(&req, 0);
    let over = path.run(&req, 1);
    assert!(over.allowed());
    assert_eq!(
        over.outcome.exceeded_header().as_deref(),
        Some("\"a\", \"b\"")
    );
}

#[test]
fn staged_enforcement_enforces_a_stable_share_of_identifiers() {
    let config = || {
        Config::from_value(json!({"rules": [{ "name": "api", "limits": [
            { "name": "per-user", "policy": "fixed 1/1m", "identifier": "header:x-user",
              "enforce": "10%" }
        ]}]}))
        .unwrap()
    };
    let path = Path::new(config());
    let users = 10_000;
    let mut enforced = Vec::new();
    for i in 0..users {
        let req = from("192.0.2.1", &format!("user-{i}"));
        assert!(path.run(&req, 0).allowed());
        let second = path.run(&req, 1);
        if second.allowed() {
            assert_eq!(
                second.outcome.staged_denied,
                vec![Arc::<str>::from("per-user")]
            );
            assert_eq!(second.line.staged_denied, vec!["per-user".to_string()]);
            let logged = &second.line.limits[0];
            assert_eq!(
                (logged.shadow, logged.unenforced.as_deref()),
                (true, Some("staged"))
            );
        } else {
            assert_eq!(second.status(), 429);
            assert!(second.outcome.staged_denied.is_empty());
            let logged = &second.line.limits[0];
            assert_eq!((logged.shadow, logged.unenforced.as_deref()), (false, None));
            enforced.push(i);
        }
    }
    let share = enforced.len() as f64 / users as f64;
    assert!((0.085..=0.115).contains(&share), "{share}");
    // The same identifiers on another isolate (another host, `sim`): the hash, not chance.
    let again = Path::new(config());
    for i in (0..users).step_by(7) {
        let req = from("192.0.2.1", &format!("user-{i}"));
        again.run(&req, 0);
        let refused = !again.run(&req, 1).allowed();
        assert_eq!(refused, enforced.binary_search(&i).is_ok(), "user-{i}");
    }
    let metrics = path.edge.metrics_text();
    let counted = |enforced: &str| {
        sample(
            &metrics,
            &format!(
                "edgelimit_staged_denials_total{{limit=\"per-user\",enforced=\"{enforced}\"}}"
            ),
        )
    };
    assert_eq!(counted("true"), Some(enforced.len() as u64), "{metrics}");
    assert_eq!(counted("false"), Some((users - enforced.len()) as u64));
}

#[test]
fn count_status_refunds_the_responses_outside_the_set() {
    let c = Config::from_value(json!({"rules": [{ "name": "login", "limits": [
        { "name": "failed-logins", "policy": "fixed 2/1h", "identifier": "ip", "count_status": "401" }
    ]}]}))
    .unwrap();
    let path = Path::new(c);
    let req = OwnedRequest::get("h", "/login").with_header("cf-connecting-ip", "192.0.2.1");
    // Each request answered, then settled with its response's status.
    let answer = |now: u64, status: Option<u16>| -> u16 {
        let handled = ready(path.edge.handle(&req, now));
        let answered = handled.outcome().status;
        if answered == 200 {
            // Each reservation is named apart by its own id: a commit is remembered by it.
            let origin = status.map(|status| Origin { status });
            let work = handled.after_response(origin.as_ref().map(|o| o as &dyn ResponseView));
            // A counted status keeps the estimate: nothing to commit.
            let refunds = status != Some(401);
            assert_eq!(work.settlement().is_some(), refunds, "{status:?}");
            let done = ready(path.edge.run_after_response(work, now));
            assert_eq!(
                (done.committed, done.failures().count()),
                (usize::from(refunds), 0)
            );
        }
        answered
    };
    // Successful logins are refunded: any number of them.
    for now in 0..5 {
        assert_eq!(answer(now, Some(200)), 200);
    }
    // Two failed ones are kept: the quota is spent.
    assert_eq!(answer(10, Some(401)), 200);
    assert_eq!(answer(11, Some(401)), 200);
    assert_eq!(answer(12, Some(200)), 429);
    // An origin that failed states no status: the estimate stands.
    let path = Path::new(path.edge.config().clone());
    let handled = ready(path.edge.handle(&req, 0));
    let work = handled.after_response(None);
    assert!(work.is_empty(), "nothing to commit: the estimate stands");
}

/// A response as the work after it reads one: a status and no fields.
struct Origin {
    status: u16,
}

impl ResponseView for Origin {
    fn status(&self) -> u16 {
        self.status
    }
    fn header(&self, _: &str) -> Option<std::borrow::Cow<'_, str>> {
        None
    }
}

#[test]
fn a_delayed_admission_carries_the_longest_wait() {
    let c = Config::from_value(json!({"rules": [{ "name": "api", "limits": [
        { "name": "fast", "policy": "gcra 1/1s burst 1", "identifier": "ip", "exceed": "delay 2s" },
        { "name": "slow", "policy": "gcra 1/1500ms burst 1", "identifier": "ip", "exceed": "delay 2s" }
    ]}]}))
    .unwrap();
    let plan_limit = &c.rules[0].limits[0].limit;
    assert_eq!(plan_limit.max_delay_ms, 2000);
    let clock = Arc::new(ManualClock::at(0));
    let edge = Edge::new(c, MemoryStore::new().with_clock(clock.clone())).with_clock(clock.clone());
    let req = from("192.0.2.1", "ann");
    let first = ready(edge.handle(&req, 0));
    assert_eq!((first.outcome().status, first.delay_ms()), (200, 0));
    drop(first);
    let second = ready(edge.handle(&req, 0));
    assert!(second.outcome().allowed());
    // Each limit's place is one interval after the first request's (1 s and 1.5 s, each with
    // a tolerance of one interval): the request waits for the later.
    assert_eq!(second.delay_ms(), 1500, "the longest of the limits' waits");
    assert_eq!(second.log_line(&req, None).delay_ms, 1500);
    drop(second);
    let metrics = edge.metrics_text();
    assert_eq!(
        sample(&metrics, "edgelimit_delayed_total"),
        Some(1),
        "{metrics}"
    );
}

#[test]
fn block_for_and_the_longest_wait_reach_the_checked_limit() {
    let c = Config::from_value(json!({"rules": [{ "name": "api", "limits": [
        { "name": "per-ip", "policy": "fixed 5/1m", "identifier": "ip", "block_for": "15m" },
        { "name": "per-user", "policy": "gcra 5/1m", "identifier": "header:x-user",
          "exceed": "delay 750ms" }
    ]}]}))
    .unwrap();
    let plan = c.plan(&from("192.0.2.1", "ann"));
    let items = plan.enforced().unwrap().items();
    assert_eq!(
        (items[0].limit.block_ms, items[0].limit.max_delay_ms),
        (900_000, 0)
    );
    assert_eq!(
        (items[1].limit.block_ms, items[1].limit.max_delay_ms),
        (0, 750)
    );
}

#[test]
fn a_rule_of_soft_limits_alone_still_answers_its_deny_list_and_its_allow_list() {
    let c = Config::from_value(json!({"rules": [{ "name": "api", "limits": [
        { "name": "per-user", "policy": "fixed 1/1m", "identifier": "header:x-user", "exceed": "soft" }
    ]}]}))
    .unwrap();
    let plan = c.plan(&from("203.0.113.1", "u"));
    // Decided in shadow behind the rule's gate; the enforced check looks the deny lists up.
    let shadow = plan.shadow().unwrap();
    assert_eq!(shadow.items()[0].gate, Some(0));
    assert_eq!(shadow.gates()[0].deny.as_ref(), ["deny", "deny:api"]);
    assert!(plan.enforced().unwrap().items().is_empty());
    assert_eq!(plan.unenforced(0), Some(crate::rules::Unenforced::Soft));
    drop(plan);
    let path = Path::new(c);
    let req = from("198.51.100.7", "m");
    path.add("deny:api", "header:x-user m");
    let ran = path.run(&req, 0);
    assert_eq!(ran.status(), 403, "the rule's deny list refuses");
    assert!(ran.outcome.soft_exceeded.is_empty());
    // An allow-listed user is never charged on the soft limit, so never reported over it.
    let friend = from("198.51.100.8", "friend");
    path.add("allow:api", "header:x-user friend");
    for now in 1..4 {
        let ran = path.run(&friend, now);
        assert!(
            ran.allowed() && ran.outcome.soft_exceeded.is_empty(),
            "{now}"
        );
    }
}

/// A memory store with work queued for after each response, counting the upkeep it was asked
/// for and failing it when told.
struct Upkept {
    store: MemoryStore,
    due: std::sync::atomic::AtomicBool,
    upkept_at: Mutex<Vec<u64>>,
    fails: bool,
}

#[async_trait::async_trait]
impl Store for Upkept {
    async fn check(
        &self,
        checks: &[Check],
        time: edgelimit::TimeSource,
    ) -> Result<Vec<edgelimit::Verdict>, edgelimit::StoreError> {
        self.store.check(checks, time).await
    }

    fn upkeep_due(&self) -> bool {
        self.due.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn upkeep(&self, now_ms: u64) -> Result<(), edgelimit::StoreError> {
        self.upkept_at.lock().unwrap().push(now_ms);
        if self.fails {
            return Err(edgelimit::StoreError::Unreachable("home away".into()));
        }
        Ok(())
    }
}

#[test]
fn the_work_after_the_response_holds_the_stores_upkeep() {
    for fails in [false, true] {
        let store = Upkept {
            store: MemoryStore::new(),
            due: std::sync::atomic::AtomicBool::new(false),
            upkept_at: Mutex::new(Vec::new()),
            fails,
        };
        let edge = Edge::new(config(), store);
        let req = OwnedRequest::get("h", "/api/x")
            .with_header("cf-connecting-ip", "192.0.2.1")
            .with_header("x-api-key", "k1");
        // Nothing queued, nothing to settle: nothing for the host to run.
        let handled = ready(edge.handle(&req, 0));
        assert!(handled.after_response(None).is_empty());
        drop(handled);
        // Work queued by the store once the request is decided: the host runs it, at its time.
        edge.limiter()
            .store()
            .due
            .store(true, std::sync::atomic::Ordering::Relaxed);
        let handled = ready(edge.handle(&req, 10));
        let work = handled.after_response(None);
        assert!(!work.is_empty() && work.settlement().is_none());
        drop(handled);
        assert!(edge.limiter().store().upkept_at.lock().unwrap().is_empty());
        let done = ready(edge.run_after_response(work, 25));
        assert_eq!(*edge.limiter().store().upkept_at.lock().unwrap(), [25]);
        assert_eq!(done.committed, 0);
        assert_eq!(done.upkeep_failed.is_some(), fails, "{done:?}");
        assert_eq!(done.failures().count(), usize::from(fails));
    }
}
