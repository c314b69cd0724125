//! The adversarial suite end to end: the built Worker under `wrangler dev`, on Redis (through the
//! gateway) and on its Durable Objects, and an attacker writing its requests byte for byte (raw
//! HTTP/1.1, so nothing re-encodes a path or folds a repeated header on the way). Each attack
//! counts what reached the origin and is never more than the limit (docs/security.md).
//!
//! `#[ignore]`d in a plain `cargo test`: `scripts/test.d/worker.sh` builds the Worker and runs
//! them. Run with `--nocapture` to see each attack's count.

#![cfg(not(target_arch = "wasm32"))]

use axum::http::HeaderMap;
use axum::response::IntoResponse;
use axum::Router;
use edgelimit_testkit::edge::{EdgeStore, Stack};
use edgelimit_testkit::on_every_store;
use edgelimit_testkit::origin::serve;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CONFIG: &str = r#"
namespace = "adversarial"
timeout_ms = 5000      # a loaded 2-core CI box

[[vars.EDGELIMIT_CONFIG.rules]]
name = "tenants"
path_prefix = "/tenants/"
limits = [{ name = "per-tenant", policy = "fixed 3/1h", identifier = "header:x-tenant" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "keys"
path_prefix = "/keys/"
limits = [{ name = "per-key", policy = "fixed 3/1h", identifier = "query:key" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "api"
path_prefix = "/api/"
limits = [{ name = "per-ip", policy = "fixed 2/1h", identifier = "ip" }]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "retried"
path_prefix = "/retried/"
limits = [
  { name = "remembered", policy = "fixed 3/1h", identifier = "ip", idempotent = true },
  { name = "plain", policy = "fixed 5/1h", identifier = "ip" },
]

[[vars.EDGELIMIT_CONFIG.rules]]
name = "llm"
path_prefix = "/llm/"
limits = [{ name = "tokens", policy = "fixed 20000/1h", identifier = "ip", cost = { reserve = 1, from = "response-header:x-tokens-used" } }]
"#;

on_every_store!(what_a_client_sends_never_lifts_a_limit);

/// The status the Worker answers one request written as `head` (request line and header lines,
/// without the blank line that ends them).
async fn status_of(stack: &Stack, head: &str) -> u16 {
    let address = stack.worker.url().trim_start_matches("http://").to_string();
    let mut stream = TcpStream::connect(&address).await.expect("connect");
    let request = format!("{head}\r\nhost: {address}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

/// How many of `heads` reached the origin (answered 200), printed with the attack's name.
async fn reached(attack: &str, stack: &Stack, heads: &[String]) -> usize {
    let mut statuses = Vec::with_capacity(heads.len());
    for head in heads {
        statuses.push(status_of(stack, head).await);
    }
    let reached = statuses.iter().filter(|&&s| s == 200).count();
    println!(
        "{}: {attack}: {reached} of {} reached the origin ({statuses:?})",
        stack.store.as_str(),
        heads.len()
    );
    reached
}

/// An origin answering 200 to everything, with `x-tokens-used: 5000`.
async fn origin() -> std::net::SocketAddr {
    async fn answer(_: HeaderMap) -> impl IntoResponse {
        ([("x-tokens-used", "5000")], "ok")
    }
    serve(Router::new().fallback(answer)).await
}

async fn what_a_client_sends_never_lifts_a_limit(store: EdgeStore) {
    let stack = Stack::start_with_on(store, CONFIG, origin().await, |g| g).await;
    let ip = |n: u8| format!("cf-connecting-ip: 198.51.100.{n}");

    // A header sent twice: the runtime joins the lines ("acme, r<i>"). Before: 10 of 10.
    let twice: Vec<String> = (0..10)
        .map(|i| {
            format!(
                "GET /tenants/x HTTP/1.1\r\n{}\r\nx-tenant: acme\r\nx-tenant: r{i}",
                ip(1)
            )
        })
        .collect();
    assert_eq!(reached("header sent twice", &stack, &twice).await, 0);

    // A query parameter sent twice.
    let queried: Vec<String> = (0..10)
        .map(|i| format!("GET /keys/x?key=r{i}&key=acme HTTP/1.1\r\n{}", ip(2)))
        .collect();
    assert_eq!(reached("query parameter twice", &stack, &queried).await, 0);

    // Spellings of one path. Before: 5 of 8 reached the origin on a 2-request limit.
    let spellings: Vec<String> = [
        "/api/x",
        "/%61pi/x",
        "//api/x",
        "/a%70i/x",
        "/api//x",
        "/x/../api/x",
        "/%2e/api/x",
        "/API/%2e%2e/api/x",
        "/api%2Fx",
        "/api/x;y",
    ]
    .iter()
    .map(|path| format!("GET {path} HTTP/1.1\r\n{}", ip(3)))
    .collect();
    assert_eq!(reached("path spellings", &stack, &spellings).await, 2);

    // A preflight header on an OPTIONS buys nothing.
    let preflights: Vec<String> = (0..5)
        .map(|_| {
            format!(
                "OPTIONS /api/x HTTP/1.1\r\n{}\r\naccess-control-request-method: POST",
                ip(4)
            )
        })
        .collect();
    assert_eq!(reached("preflight header", &stack, &preflights).await, 2);

    // The identifier left out: counted by the client's address, alone.
    let keyless: Vec<String> = (0..6)
        .map(|_| format!("GET /tenants/x HTTP/1.1\r\n{}", ip(5)))
        .collect();
    assert_eq!(reached("identifier left out", &stack, &keyless).await, 3);
    let other = [format!("GET /tenants/x HTTP/1.1\r\n{}", ip(6))];
    assert_eq!(
        reached("another client without it", &stack, &other).await,
        1
    );

    // A repeated request id (`cf-ray` is no request id unless trusted). Before: 12 of 12.
    let repeated: Vec<String> = (0..12)
        .map(|_| format!("GET /retried/x HTTP/1.1\r\n{}\r\ncf-ray: 8f2a-AMS", ip(7)))
        .collect();
    assert_eq!(reached("repeated request id", &stack, &repeated).await, 3);

    // A settled cost under a repeated request id is charged every time: 5,000 tokens a request
    // against 20,000. The settlement runs after the response (`waitUntil`): the first requests
    // are spaced until their commits land.
    let mut spent = Vec::new();
    for _ in 0..6 {
        let head = format!("GET /llm/x HTTP/1.1\r\n{}\r\ncf-ray: same", ip(8));
        spent.push(status_of(&stack, &head).await);
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    println!("{}: settled cost replayed: {spent:?}", stack.store.as_str());
    assert!(
        spent.iter().filter(|&&s| s == 200).count() <= 5,
        "20,000 tokens hold four requests of 5,000 and a fifth admitted as its commit lands: {spent:?}"
    );
    assert_eq!(*spent.last().unwrap(), 429, "{spent:?}");
}
