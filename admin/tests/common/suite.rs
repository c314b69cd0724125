//! One test body per behaviour, run by every backend's suite (single Redis, Cluster, the REST
//! gateway): the CLI writes, the library (same store, namespace and configuration) reads.

use edgelimit::control::list::Gate;
use edgelimit::{Check, CheckItem, Reason, Store, TimeSource, Verdict};
use edgelimit_engine::identify::CLIENT_IP_HEADER;
use edgelimit_engine::lists::probe;
use edgelimit_engine::{OwnedRequest, RequestView};
use serde_json::{json, Value};
use tokio::runtime::Runtime;

use super::{assert_unchanged, config, limit, refuses_bad_input, Admin, Stored};

/// The shared behaviours as `#[test]`s, each run on the backend `$with_backend` (a
/// `fn(fn(&Backend<'_>))` that starts it and hands it over): every backend's suite invokes this
/// once, so a behaviour added to the list here runs on all of them. Each test is named after the
/// body in this module that it runs. An attribute after the backend (`#[ignore = "…"]`) goes on
/// every test.
#[macro_export]
macro_rules! shared_suite {
    ($with_backend:ident) => {
        // `cfg(all())` always holds: no attribute.
        $crate::shared_suite!($with_backend, #[cfg(all())]);
    };
    ($with_backend:ident, #[$attr:meta]) => {
        $crate::shared_suite!(
            $with_backend, #[$attr]:
            bad_input_writes_nothing,
            tiers_and_overrides_decide_the_librarys_checks,
            lists_gate_the_librarys_checks,
            peek_writes_nothing_and_reset_leaves_no_state_key,
            api_keys_are_keyed_as_the_worker_keys_them,
        );
    };
    ($with_backend:ident, #[$attr:meta]: $($behaviour:ident),+ $(,)?) => {
        $(
            #[test]
            #[$attr]
            fn $behaviour() {
                $with_backend(common::suite::$behaviour);
            }
        )+
    };
}

/// A backend: the CLI pointed at it, the library's store on it, and where its state is listed.
pub struct Backend<'a> {
    /// The CLI.
    pub admin: Admin,
    /// The library's store, under the configuration's namespace.
    pub store: Box<dyn Store>,
    /// Drives `store`.
    pub rt: &'a Runtime,
    /// Its Redis servers or its Worker's Durable Objects, to list what is stored.
    pub stored: Stored<'a>,
}

impl Backend<'_> {
    /// One request on `per-ip` from `ip`, through the configuration-wide lists and the `api`
    /// rule's, on Redis's clock (as the Worker decides).
    pub fn request(&self, ip: &str) -> Verdict {
        self.request_from(
            OwnedRequest::get("api.example", "/api/x").with_header(CLIENT_IP_HEADER, ip),
        )
    }

    /// One request on `per-ip` from `request`'s address, offering the lists what the Worker's
    /// probe takes from it (its own code, under the same configuration).
    pub fn request_from(&self, request: OwnedRequest) -> Verdict {
        let ip = request.header(CLIENT_IP_HEADER).expect("an address");
        let item = CheckItem::new(limit("per-ip"), ip.as_str(), 1).gated(0);
        let check = Check::new().with_item(item).gated(
            probe(&config().probe_sources, &request),
            vec![Gate::new(
                vec!["deny".into(), "deny:api".into()],
                vec!["allow".into(), "allow:api".into()],
            )],
        );
        self.rt
            .block_on(self.store.check(&[check], TimeSource::Server))
            .expect("the library's check")
            .remove(0)
    }

    fn keys(&self) -> Vec<String> {
        self.stored.keys()
    }
}

/// Bad input exits 2 naming the argument, and nothing is written.
pub fn bad_input_writes_nothing(b: &Backend<'_>) {
    refuses_bad_input(&b.admin);
    assert_eq!(b.keys(), Vec::<String>::new());
}

/// `tier set` → the library's next check runs on the tier; overrides replace tiers; clears.
pub fn tiers_and_overrides_decide_the_librarys_checks(b: &Backend<'_>) {
    let admin = &b.admin;
    let ip = "203.0.113.7";
    assert_eq!(b.request(ip).decisions[0].limit, 20);

    let set = admin.json(&["tier", "set", "per-ip", ip, "pro", "--ttl", "1h"]);
    assert_eq!(set["action"], "set");
    assert_eq!(set["limit"], "per-ip");
    assert_eq!(set["identifier"], ip);
    let pro = &set["changed"];
    assert_eq!(pro["kind"], "tier");
    assert_eq!(pro["tier"], "pro");
    assert_eq!(pro["policy"], "gcra 200/1h");
    assert_eq!(pro["in_force"], true);
    let until = pro["until_ms"].as_u64().unwrap();
    assert_eq!(until, set["now_ms"].as_u64().unwrap() + 3_600_000);
    assert_eq!(set["assignments"], json!([pro]));
    assert_eq!(set["policy"], "gcra 200/1h");
    let last = b.request(ip);
    assert_eq!(last.decisions[0].limit, 200);

    let get = admin.json(&["tier", "get", "per-ip", ip]);
    assert_eq!(get["assignments"], json!([pro]));
    assert_eq!(get.get("changed"), None);
    let peek = admin.json(&["peek", "per-ip", ip]);
    assert_eq!(peek["capacity"], 200);
    assert_eq!(peek["remaining"], last.decisions[0].remaining);
    assert_eq!(peek["policy"], "gcra 200/1h");
    assert_eq!(peek["assignments"], json!([pro]));

    // An override decides over the tier, which it keeps: clearing it falls back to the tier.
    let over = admin.json(&["override", "set", "per-ip", ip, "gcra 1/1s burst 3"]);
    assert_eq!(over["changed"]["kind"], "override");
    assert_eq!(over["changed"]["until_ms"], Value::Null);
    assert_eq!(over["assignments"][0]["kind"], "override");
    assert_eq!(over["assignments"][1]["tier"], "pro");
    assert_eq!(over["assignments"][1]["in_force"], false);
    assert_eq!(over["assignments"][1]["ignored"], "overridden");
    assert_eq!(b.request(ip).decisions[0].limit, 3);
    let table = admin.run(&["tier", "get", "per-ip", ip]);
    assert!(
        table
            .stdout
            .contains("override gcra 1/1s burst 3; tier pro (gcra 200/1h), until "),
        "{table:?}"
    );
    assert!(table.stdout.contains("[ignored: overridden]"), "{table:?}");
    let cleared = admin.json(&["override", "clear", "per-ip", ip]);
    assert_eq!(cleared["action"], "clear");
    assert_eq!(cleared["changed"]["kind"], "override");
    assert_eq!(cleared["changed"]["in_force"], true);
    assert_eq!(cleared["policy"], "gcra 200/1h");
    assert_eq!(b.request(ip).decisions[0].limit, 200);
    let again = admin.json(&["override", "clear", "per-ip", ip]);
    assert_eq!(again["changed"], Value::Null);
    let cleared = admin.json(&["tier", "clear", "per-ip", ip]);
    assert_eq!(cleared["changed"]["tier"], "pro");
    assert_eq!(cleared["assignments"], json!([]));
    assert_eq!(cleared["policy"], "gcra 20/1h");
    assert_eq!(b.request(ip).decisions[0].limit, 20);
    assert_eq!(
        admin.json(&["tier", "get", "per-ip", ip])["assignments"],
        json!([])
    );

    // The human table says the same.
    admin.json(&["tier", "set", "per-ip", ip, "free"]);
    let table = admin.run(&["tier", "get", "per-ip", ip]);
    assert_eq!(table.code, 0, "{table:?}");
    assert!(
        table.stdout.contains("tier free (gcra 5/1h)"),
        "{}",
        table.stdout
    );
    assert_eq!(b.request(ip).decisions[0].limit, 5);
}

/// `deny add` → a gated check is refused, until `deny remove`; a rule's allow list lets through.
pub fn lists_gate_the_librarys_checks(b: &Backend<'_>) {
    let admin = &b.admin;
    let ip = "203.0.113.7";

    let added = admin.json(&["deny", "add", "ip", "203.0.113.0/24", "--ttl", "1h"]);
    assert_eq!(added["list"], "deny");
    assert_eq!(added["action"], "add");
    assert_eq!(added["entry"], "ip 203.0.113.0/24");
    assert_eq!(
        added["until_ms"].as_u64().unwrap(),
        added["now_ms"].as_u64().unwrap() + 3_600_000
    );
    let verdict = b.request(ip);
    assert!(!verdict.allowed);
    assert_eq!(verdict.decisions[0].reason, Reason::Denylisted);
    assert!(b.request("198.51.100.1").allowed);

    let listed = admin.json(&["deny", "list"]);
    assert_eq!(listed["list"], "deny");
    assert_eq!(
        listed["entries"],
        json!([{ "entry": "ip 203.0.113.0/24", "until_ms": added["until_ms"] }])
    );
    let table = admin.run(&["deny", "list"]);
    assert!(table.stdout.starts_with("ENTRY"), "{table:?}");
    assert!(table.stdout.contains("ip 203.0.113.0/24"), "{table:?}");

    let removed = admin.json(&["deny", "remove", "ip 203.0.113.0/24"]);
    assert_eq!(removed["removed"], true);
    assert!(b.request(ip).allowed);
    assert_eq!(
        admin.json(&["deny", "remove", "ip 203.0.113.0/24"])["removed"],
        false
    );
    assert_eq!(admin.json(&["deny", "list"])["entries"], json!([]));

    // A rule's own allow list: the item is let through uncounted.
    let added = admin.json(&["allow", "add", "ip 203.0.113.7", "--rule", "api"]);
    assert_eq!(added["list"], "allow:api");
    assert_eq!(added["until_ms"], Value::Null);
    let verdict = b.request(ip);
    assert!(verdict.allowed);
    assert_eq!(verdict.decisions[0].reason, Reason::Allowlisted);
    assert_eq!(admin.json(&["allow", "list"])["entries"], json!([]));
    assert_eq!(
        admin.json(&["allow", "list", "--rule", "api"])["entries"],
        json!([{ "entry": "ip 203.0.113.7", "until_ms": null }])
    );
    // Deny beats allow.
    admin.json(&["deny", "add", "ip 203.0.113.7", "--rule", "api"]);
    assert_eq!(b.request(ip).decisions[0].reason, Reason::Denylisted);

    // An API key is listed by its SHA-256, as the Worker's probe offers it: never in the clear.
    let key = "Bearer sk-live-123";
    let added = admin.json(&["deny", "add", "api-key:header:authorization", key]);
    let hashed = config().rules[0].limits[1]
        .source
        .list_value(&OwnedRequest::get("h", "/").with_header("authorization", key))
        .unwrap();
    assert_eq!(
        added["entry"],
        format!("api-key:header:authorization {hashed}")
    );
    let from = |ip: &str, key: &str| {
        OwnedRequest::get("api.example", "/api/x")
            .with_header(CLIENT_IP_HEADER, ip)
            .with_header("authorization", key)
    };
    let verdict = b.request_from(from("198.51.100.7", key));
    assert_eq!(verdict.decisions[0].reason, Reason::Denylisted);
    assert!(b.request_from(from("198.51.100.7", "Bearer other")).allowed);
    assert!(!b.keys().iter().any(|k| k.contains("sk-live")));
    let removed = admin.json(&[
        "--raw-identifier",
        "deny",
        "remove",
        &format!("api-key:header:authorization {hashed}"),
    ]);
    assert_eq!(removed["removed"], true);
    assert!(b.request_from(from("198.51.100.7", key)).allowed);
}

/// `peek` writes nothing (not a value, not a TTL); `reset` deletes the state and keeps the tier.
pub fn peek_writes_nothing_and_reset_leaves_no_state_key(b: &Backend<'_>) {
    let admin = &b.admin;
    let ip = "203.0.113.9";
    admin.json(&["tier", "set", "per-ip", ip, "free"]);
    for _ in 0..3 {
        assert!(b.request(ip).allowed);
    }
    let before = b.stored.snapshot();
    let peek = admin.json(&["peek", "per-ip", ip]);
    assert_eq!(peek["remaining"], 2);
    assert_eq!(peek["capacity"], 5);
    assert_eq!(peek["allowed"], true);
    assert_eq!(peek["assignments"][0]["tier"], "free");
    let table = admin.run(&["peek", "per-ip", ip]);
    assert!(table.stdout.contains("2 of 5"), "{table:?}");
    assert_unchanged(&before, &b.stored.snapshot());

    let reset = admin.json(&["reset", "per-ip", ip]);
    assert_eq!(reset["existed"], true);
    let left = b.keys();
    assert_eq!(left.len(), 1, "only the assignment may stay: {left:?}");
    assert!(left[0].ends_with("}:ctl"), "{left:?}");
    assert_eq!(admin.json(&["peek", "per-ip", ip])["remaining"], 5);
    assert_eq!(admin.json(&["reset", "per-ip", ip])["existed"], false);
}

/// An `api-key:` limit's identifier is the key's SHA-256, exactly as the Worker keys it.
pub fn api_keys_are_keyed_as_the_worker_keys_them(b: &Backend<'_>) {
    let admin = &b.admin;
    let source = &config().rules[0].limits[1].source;
    let request = edgelimit_engine::OwnedRequest::get("api.example", "/api/x")
        .with_header("authorization", "Bearer sk-live-123");
    let worker_id = source.extract(&request).unwrap();
    b.rt.block_on(b.store.check(
        &[Check::single(limit("per-key"), worker_id.clone(), 7)],
        TimeSource::Server,
    ))
    .unwrap();

    let peek = admin.json(&["peek", "per-key", "Bearer sk-live-123"]);
    assert_eq!(peek["remaining"], 993);
    let hash = String::from_utf8(worker_id.as_bytes().to_vec()).unwrap();
    assert_eq!(peek["stored_identifier"], hash.as_str());
    assert!(!b.keys().iter().any(|k| k.contains("sk-live")));
    // --raw-identifier takes the identifier as stored.
    let raw = admin.json(&["--raw-identifier", "peek", "per-key", &hash]);
    assert_eq!(raw["remaining"], 993);
    assert_eq!(
        admin.json(&["reset", "per-key", "Bearer sk-live-123"])["existed"],
        true
    );
    assert_eq!(b.keys(), Vec::<String>::new());
}
