//! The adversarial suite over the wire: an axum service behind the layer on a loopback port, and
//! an attacker writing its requests byte for byte (raw HTTP/1.1, so nothing re-encodes a path or
//! folds a repeated header on the way). Each attack counts what reached the service — any answer
//! but the limiter's own `400` and `429` — and it is never more than the limit
//! (docs/security.md lists each attack and what stops it).
//!
//! Run with `--nocapture` to see each attack's count.

mod common;

use std::net::SocketAddr;

use common::{serve, App, Req};
use edgelimit::MemoryStore;
use edgelimit_tower::{Builder, Config, ConfigBuilder, LimitBuilder, RuleBuilder};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The answer's status to `request`, written byte for byte on a connection of its own.
async fn status_of(addr: SocketAddr, request: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request).await.expect("send");
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.expect("read");
    let text = String::from_utf8_lossy(&answer);
    text.split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"))
}

/// How many of `heads` reached the service (anything but the limiter's 400 and 429), printed
/// with the attack's name.
async fn reached(attack: &str, addr: SocketAddr, heads: &[String]) -> usize {
    let requests: Vec<Vec<u8>> = heads
        .iter()
        .map(|head| {
            format!("{head}\r\nhost: api.example.com\r\nconnection: close\r\n\r\n").into_bytes()
        })
        .collect();
    reached_by(attack, addr, &requests).await.0
}

/// How many of `requests` (written byte for byte) reached the service, and each one's status,
/// printed with the attack's name.
async fn reached_by(attack: &str, addr: SocketAddr, requests: &[Vec<u8>]) -> (usize, Vec<u16>) {
    let mut statuses = Vec::with_capacity(requests.len());
    for request in requests {
        statuses.push(status_of(addr, request).await);
    }
    let reached = statuses.iter().filter(|&&s| s != 400 && s != 429).count();
    println!(
        "{attack}: {reached} of {} reached the service ({statuses:?})",
        requests.len()
    );
    (reached, statuses)
}

/// The example's limits: `/api/` per API key (hashed), ten at once, and per client address.
fn example() -> Config {
    api_limited([
        LimitBuilder::new("per-key", "gcra 5/1s burst 10").identifier("api-key:header:x-api-key"),
        LimitBuilder::new("per-ip", "fixed 1000/1h"),
    ])
}

/// One rule on `/api/` with `limits`.
fn api_limited(limits: impl IntoIterator<Item = LimitBuilder>) -> Config {
    let rule = limits.into_iter().fold(
        RuleBuilder::new("api").path_prefix("/api/"),
        RuleBuilder::limit,
    );
    ConfigBuilder::new().rule(rule).build().unwrap()
}

async fn listening(config: Config) -> SocketAddr {
    serve(Builder::new(config).build(MemoryStore::new()).unwrap()).await
}

#[tokio::test]
async fn an_api_key_sent_twice_is_refused() {
    // Before: the lines were joined ("k1, r<i>"), a fresh key each time: 40 of 40 reached it.
    let addr = listening(example()).await;
    let heads: Vec<String> = (0..40)
        .map(|i| format!("GET /api/hello HTTP/1.1\r\nx-api-key: k1\r\nx-api-key: r{i}"))
        .collect();
    assert_eq!(reached("x-api-key twice", addr, &heads).await, 0);
    let once: Vec<String> = (0..12)
        .map(|_| "GET /api/hello HTTP/1.1\r\nx-api-key: k1".to_string())
        .collect();
    assert_eq!(reached("x-api-key once", addr, &once).await, 10);
}

#[tokio::test]
async fn a_query_key_sent_twice_is_refused() {
    let config = api_limited([LimitBuilder::new("per-key", "fixed 3/1h").identifier("query:key")]);
    let addr = listening(config).await;
    let heads: Vec<String> = (0..10)
        .map(|i| format!("GET /api/hello?key=r{i}&key=acme HTTP/1.1"))
        .collect();
    assert_eq!(reached("query key twice", addr, &heads).await, 0);
}

#[tokio::test]
async fn no_spelling_of_a_path_escapes_its_rule() {
    let config = api_limited([LimitBuilder::new("per-ip", "fixed 2/1h")]);
    let addr = listening(config).await;
    let heads: Vec<String> = [
        "/api/hello",
        "/%61pi/hello",
        "//api/hello",
        "/a%70i/hello",
        "/./api/hello",
        "/x/../api/hello",
        "/api//hello",
        "/API/../api/hello",
        "/api%2Fhello",
        "/api/hello;x=1",
        "/%zz/api/hello",
    ]
    .iter()
    .map(|path| format!("GET {path} HTTP/1.1"))
    .collect();
    assert_eq!(reached("path spellings", addr, &heads).await, 2);
}

#[tokio::test]
async fn no_spelling_of_the_host_escapes_its_rule() {
    let config = ConfigBuilder::new()
        .rule(
            RuleBuilder::new("api")
                .hosts(["api.example.com"])
                .limit(LimitBuilder::new("per-ip", "fixed 2/1h")),
        )
        .build()
        .unwrap();
    let addr = listening(config).await;
    // A Host that is not text was read as no host, which matches no `hosts` rule.
    let hosts: [&[u8]; 6] = [
        b"api.example.com",
        b"API.Example.COM",
        b"api.example.com.",
        b"api.example.com:8080",
        b"api.example.com\xff",
        b"api.example.com\xc3\xa9",
    ];
    let requests: Vec<Vec<u8>> = hosts
        .iter()
        .map(|host| {
            [
                b"GET /hello HTTP/1.1\r\nhost: ",
                *host,
                b"\r\nconnection: close\r\n\r\n",
            ]
            .concat()
        })
        .collect();
    let (reached, statuses) = reached_by("host spellings", addr, &requests).await;
    assert_eq!(reached, 2);
    assert_eq!(&statuses[4..], [400, 400], "a Host not text is refused");
}

#[tokio::test]
async fn a_preflight_header_buys_nothing() {
    // Before: a CORS preflight passed uncounted, so `OPTIONS` with the header was free.
    let config = api_limited([LimitBuilder::new("per-ip", "fixed 3/1h")]);
    let addr = listening(config).await;
    let heads: Vec<String> = (0..10)
        .map(|_| "OPTIONS /api/hello HTTP/1.1\r\naccess-control-request-method: POST".to_string())
        .collect();
    assert_eq!(reached("preflight header", addr, &heads).await, 3);
}

#[tokio::test]
async fn leaving_the_key_out_limits_the_client_alone() {
    // Before (`missing = "shared"`): every request without a key shared one bucket, which one
    // client could use up for all.
    let config =
        api_limited([LimitBuilder::new("per-key", "fixed 3/1h").identifier("header:x-api-key")]);
    let app = App::new(config, |b| b);
    let mut reached_service = 0;
    for _ in 0..10 {
        let reply = app
            .send(Req::get("/api/x").from("198.51.100.1").build())
            .await;
        reached_service += usize::from(reply.status.is_success());
    }
    println!("key left out: {reached_service} of 10 reached the service");
    assert_eq!(reached_service, 3);
    let other = app
        .send(Req::get("/api/x").from("198.51.100.2").build())
        .await;
    assert!(
        other.status.is_success(),
        "another keyless client is not denied"
    );
    // A key spelling the other client's address is a key like any, not its bucket.
    for _ in 0..3 {
        let forged = app
            .send(
                Req::get("/api/x")
                    .from("198.51.100.3")
                    .header("x-api-key", "198.51.100.2")
                    .build(),
            )
            .await;
        assert!(forged.status.is_success());
    }
    let again = app
        .send(Req::get("/api/x").from("198.51.100.2").build())
        .await;
    assert!(again.status.is_success());
}

#[tokio::test]
async fn a_repeated_request_id_lifts_no_limit() {
    let config = api_limited([
        LimitBuilder::new("retried", "fixed 3/1h").idempotent(),
        LimitBuilder::new("plain", "fixed 5/1h"),
    ]);
    let addr = listening(config).await;
    let heads: Vec<String> = (0..12)
        .map(|_| {
            "GET /api/hello HTTP/1.1\r\ncf-ray: 8f2a-AMS\r\nx-request-id: 8f2a-AMS".to_string()
        })
        .collect();
    assert_eq!(reached("repeated request id", addr, &heads).await, 3);
}

#[tokio::test]
async fn every_spelling_of_an_ipv4_peer_is_one_client() {
    // A dual-stack listener records an IPv4 client as its IPv4-mapped IPv6 address.
    let config = api_limited([LimitBuilder::new("per-ip", "fixed 3/1h")]);
    let app = App::new(config, |b| b);
    let mut reached_service = 0;
    for peer in [
        "1.2.3.4",
        "::ffff:1.2.3.4",
        "::ffff:102:304",
        "0:0:0:0:0:ffff:1.2.3.4",
        "::FFFF:1.2.3.4",
    ] {
        let reply = app.send(Req::get("/api/x").from(peer).build()).await;
        reached_service += usize::from(reply.status.is_success());
    }
    assert_eq!(reached_service, 3);
}
