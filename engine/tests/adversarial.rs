//! The adversarial suite, at the request path every host drives: each attack a client can make
//! on what the limiter reads of its request (docs/security.md), sent as the attacker sends it,
//! and what the path admits — never more than the limit. The hosts' own suites send the same
//! attacks over their wire (tower/tests/adversarial.rs, worker/tests/e2e_adversarial.rs,
//! js/test/adversarial.test.mjs).
//!
//! Run with `--nocapture` to see each attack's count.

use std::sync::Arc;

use edgelimit::{ManualClock, MemoryStore};
use edgelimit_engine::{Config, Edge, OwnedRequest};
use futures::executor::block_on;

const T: u64 = 1_700_000_000_000;

/// The request path of `config` over a memory store, its clock at `T`.
fn edge(config: &str) -> Edge<MemoryStore> {
    let config = Config::from_json(config).expect("valid configuration");
    Edge::new(config, MemoryStore::new()).with_clock(Arc::new(ManualClock::at(T)))
}

/// The statuses `edge` answers `requests`, in order.
fn statuses(edge: &Edge<MemoryStore>, requests: &[OwnedRequest]) -> Vec<u16> {
    requests
        .iter()
        .enumerate()
        .map(|(i, request)| {
            let handled = block_on(edge.handle(request, T + i as u64));
            handled.outcome().status
        })
        .collect()
}

/// How many of `statuses` were admitted, printed with the attack's name.
fn admitted(attack: &str, statuses: &[u16]) -> usize {
    let admitted = statuses.iter().filter(|&&s| s == 200).count();
    println!(
        "{attack}: {admitted} of {} admitted ({statuses:?})",
        statuses.len()
    );
    admitted
}

fn from(ip: &str) -> OwnedRequest {
    OwnedRequest::get("api.example.com", "/api/items").with_header("cf-connecting-ip", ip)
}

const IDEMPOTENT_BESIDE_PLAIN: &str = r#"{"rules": [{"name": "api", "limits": [
    {"name": "retried", "policy": "fixed 3/1h", "identifier": "header:x-account", "idempotent": true},
    {"name": "plain", "policy": "fixed 5/1h", "identifier": "header:x-account"}]}]}"#;

#[test]
fn a_repeated_request_id_lifts_no_limit() {
    // Before: `cf-ray` was the request id by default; 12 of 12 admitted.
    let edge = edge(IDEMPOTENT_BESIDE_PLAIN);
    let request = from("198.51.100.1")
        .with_header("x-account", "acme")
        .with_header("cf-ray", "8f2a-AMS")
        .with_header("x-request-id", "8f2a-AMS");
    let requests = vec![request; 12];
    assert_eq!(
        admitted("repeated request id", &statuses(&edge, &requests)),
        3,
        "no header is a request id unless trusted: every request is new"
    );
    // A trusted header (the deployment's proxy sets it) that repeats: only the idempotent
    // limit answers from memory; the plain one decides every request.
    let trusted = IDEMPOTENT_BESIDE_PLAIN.replacen(
        "{\"rules\"",
        "{\"request_id_header\": \"x-request-id\", \"request_id_trusted\": true, \"rules\"",
        1,
    );
    let edge = self::edge(&trusted);
    assert_eq!(
        admitted("repeated trusted request id", &statuses(&edge, &requests)),
        5
    );
}

#[test]
fn a_settled_cost_is_charged_by_every_request_that_repeats_an_id() {
    // Before: every commit after the first with a repeated id was taken for a retry.
    let edge = edge(
        r#"{"rules": [{"name": "llm", "limits": [
        {"name": "tokens", "policy": "fixed 20000/1h", "identifier": "ip",
         "cost": {"reserve": 1, "from": "response-header:x-tokens-used"}}]}]}"#,
    );
    let request = from("198.51.100.2").with_header("cf-ray", "same");
    let mut admitted_count = 0;
    for i in 0..10 {
        let handled = block_on(edge.handle(&request, T + i));
        if handled.outcome().allowed() {
            admitted_count += 1;
            let settlement = handled
                .settlement(|field| (field == "x-tokens-used").then(|| "5000".to_string()))
                .expect("a cost to settle");
            block_on(edge.settle(settlement));
        }
    }
    println!("settled cost replayed: {admitted_count} of 10 admitted");
    // 5,000 a request against 20,000: the fifth finds the quota spent.
    assert_eq!(admitted_count, 4);
}

const PER_TENANT: &str = r#"{"rules": [{"name": "api", "limits": [
    {"name": "per-tenant", "policy": "fixed 3/1h", "identifier": "header:x-tenant"}]}]}"#;

#[test]
fn an_identifier_sent_twice_is_refused_or_read_as_the_origin_reads_it() {
    // Before: the values were joined ("acme, r<i>"), a fresh bucket each time: 10 of 10. (The
    // Worker and Node hand repeated lines joined by a comma: their suites send those.)
    let requests: Vec<OwnedRequest> = (0..10)
        .map(|i| {
            from("198.51.100.3")
                .with_header("x-tenant", "acme")
                .with_header("x-tenant", &format!("r{i}"))
        })
        .collect();
    let refused = statuses(&edge(PER_TENANT), &requests);
    assert_eq!(admitted("header sent twice", &refused), 0);
    assert!(refused.iter().all(|&s| s == 400));
    // An origin known to read the first: the first is the tenant, and it is limited.
    let first = PER_TENANT.replacen("{\"rules\"", "{\"duplicates\": \"first\", \"rules\"", 1);
    assert_eq!(
        admitted(
            "header sent twice, first read",
            &statuses(&edge(&first), &requests)
        ),
        3
    );
    // A query parameter twice (PHP and Rails read the last, most others the first).
    let by_key = r#"{"rules": [{"name": "api", "limits": [
        {"name": "per-key", "policy": "fixed 3/1h", "identifier": "query:key"}]}]}"#;
    let queried: Vec<OwnedRequest> = (0..10)
        .map(|i| {
            from("198.51.100.3")
                .with_query("key", &format!("r{i}"))
                .with_query("key", "acme")
        })
        .collect();
    assert_eq!(
        admitted("query parameter twice", &statuses(&edge(by_key), &queried)),
        0
    );
}

#[test]
fn no_spelling_of_a_path_or_host_escapes_its_rule() {
    let edge = edge(
        r#"{"rules": [{"name": "api", "path_prefix": "/api/", "hosts": ["shop.example.com"],
        "limits": [{"name": "per-ip", "policy": "fixed 2/1h", "identifier": "ip"}]}]}"#,
    );
    // Before: 5 of 10 such spellings reached the origin unlimited past the first two.
    let spellings = [
        "/api/items",
        "/%61pi/items",
        "//api/items",
        "/a%70i/items",
        "/API/../api/items",
        "/./api/items",
        "/api//items",
        "/api/./items",
        "/x/../api/items",
        "/ap%69/items",
    ];
    let requests: Vec<OwnedRequest> = spellings
        .iter()
        .map(|path| {
            OwnedRequest::get("shop.example.com", path)
                .with_header("cf-connecting-ip", "198.51.100.4")
        })
        .collect();
    assert_eq!(admitted("path spellings", &statuses(&edge, &requests)), 2);
    // `%2561` is `%61` encoded again: nginx reads `/%61pi/`, another path that no rule
    // matches — unlimited, as the origin serves it a path that is not `/api/`.
    let other = OwnedRequest::get("shop.example.com", "/%2561pi/items")
        .with_header("cf-connecting-ip", "198.51.100.4");
    assert_eq!(statuses(&edge, &[other]), [200]);
    // Paths the origins read differently are refused.
    for path in [
        "/api%2Fitems",
        "/api\\items",
        "/api/items;x",
        "/%zz",
        "/../api/",
    ] {
        let request = OwnedRequest::get("shop.example.com", path)
            .with_header("cf-connecting-ip", "198.51.100.4");
        assert_eq!(statuses(&edge, &[request]), [400], "{path}");
    }
    // Host spellings: case, a trailing dot, a port.
    let edge = self::edge(
        r#"{"rules": [{"name": "shop", "hosts": ["shop.example.com"],
        "limits": [{"name": "per-ip", "policy": "fixed 2/1h", "identifier": "ip"}]}]}"#,
    );
    let hosts = [
        "shop.example.com.",
        "SHOP.example.com",
        "shop.example.com:443",
        "shop.example.com",
    ];
    let requests: Vec<OwnedRequest> = hosts
        .iter()
        .map(|host| {
            let mut request = OwnedRequest::get("x", "/");
            request.host = host.to_string();
            request.with_header("cf-connecting-ip", "198.51.100.5")
        })
        .collect();
    assert_eq!(admitted("host spellings", &statuses(&edge, &requests)), 2);
}

#[test]
fn a_preflight_header_buys_nothing() {
    let edge = edge(
        r#"{"rules": [{"name": "api", "limits": [
        {"name": "per-ip", "policy": "fixed 3/1h", "identifier": "ip"}]}]}"#,
    );
    let preflight = OwnedRequest::new("OPTIONS", "api.example.com", "/api/items")
        .with_header("cf-connecting-ip", "198.51.100.6")
        .with_header("access-control-request-method", "POST");
    assert_eq!(
        admitted("preflight header", &statuses(&edge, &vec![preflight; 10])),
        3
    );
}

#[test]
fn leaving_the_identifier_out_limits_the_client_alone() {
    // Before (`missing = "shared"` by default): one client without the header used up the one
    // bucket every such request shares, denying every other.
    let edge = edge(PER_TENANT);
    let attacker: Vec<OwnedRequest> = vec![from("198.51.100.7"); 10];
    assert_eq!(
        admitted("identifier left out", &statuses(&edge, &attacker)),
        3
    );
    let other = statuses(&edge, &[from("198.51.100.8")]);
    assert_eq!(
        other,
        [200],
        "another client without the header is not denied"
    );
    // Nor can a header name the bucket a client without one is counted in.
    let forged = from("198.51.100.9").with_header("x-tenant", "198.51.100.8");
    assert_eq!(
        admitted("forged fallback bucket", &statuses(&edge, &vec![forged; 3])),
        3
    );
    assert_eq!(statuses(&edge, &[from("198.51.100.8")]), [200]);
}

#[test]
fn every_spelling_of_an_ipv4_client_is_one_client() {
    // The spellings of express-rate-limit's advisory of 2026 (GHSA for `ipKeyGenerator`): a
    // mapped address is its IPv4 client however it is written.
    let edge = edge(
        r#"{"rules": [{"name": "api", "limits": [
        {"name": "per-ip", "policy": "fixed 3/1h", "identifier": "ip"}]}]}"#,
    );
    let spellings = [
        "1.2.3.4",
        "::ffff:1.2.3.4",
        "::ffff:102:304",
        "0:0:0:0:0:ffff:1.2.3.4",
        "::FFFF:1.2.3.4",
        "0000:0000:0000:0000:0000:ffff:0102:0304",
    ];
    let requests: Vec<OwnedRequest> = spellings.iter().map(|ip| from(ip)).collect();
    assert_eq!(
        admitted("IPv4-mapped spellings", &statuses(&edge, &requests)),
        3
    );
    // An ordinary IPv6 address ending in a dotted quad is that IPv6 network, not the IPv4
    // client it spells; nor is a NAT64 address.
    let others = statuses(
        &edge,
        &[
            from("2001:db8:1234:5678::1.2.3.4"),
            from("64:ff9b::1.2.3.4"),
        ],
    );
    assert_eq!(others, [200, 200]);
}
