//! HTTP/2 over cleartext TCP with prior knowledge (h2c) on the gateway's one port, beside
//! HTTP/1.1: `RestStore::with_h2c` decides over it, many requests share one connection, and the
//! listener's limits hold for it too — a connection that sends the preface and then nothing is
//! closed after the header-read timeout, an idle one after the idle timeout, and the connection
//! cap counts connections, not requests, those without a token giving their place up first. Each test starts its own redis-server and gateway on
//! free loopback ports; every wait is bounded.

mod common;

use std::time::{Duration, Instant};

use common::TOKEN;
use edgelimit::{Check, Limit, Policy, RestStore, Store, TimeSource};
use edgelimit_testkit::http::{closed_within, exactly_one_closed, raw_post};
use edgelimit_testkit::task::join_all;
use edgelimit_testkit::GatewayServer;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// What an h2c client sends first (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// A client that speaks h2c from the first byte.
fn h2c_client() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("an h2c client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_store_decides_over_h2c_with_many_requests_in_flight() {
    let s = common::start(|_| {}).await;
    // The decisions are what this test checks, not their speed: the store's 1 s default budget
    // (a production setting) ran out beside `stress-ng --cpu 2`, 64 calls in flight on two busy
    // cores; 10 s is slack for a loaded machine, where a lost answer still fails the test.
    let store = RestStore::new(&s.url(""), TOKEN)
        .unwrap()
        .with_h2c()
        .unwrap()
        .with_timeout(Duration::from_secs(10));
    let limit = Limit::new("api", "fixed 3/1h".parse::<Policy>().unwrap());
    // 64 clients at once, 4 requests each for a quota of 3: exactly 3 admitted per client.
    let tasks: Vec<_> = (0..64)
        .map(|c| {
            let (store, limit) = (store.clone(), limit.clone());
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..4 {
                    let check = Check::single(&limit, format!("client-{c}"), 1);
                    let verdicts = store
                        .check(&[check], TimeSource::At(1_700_000_000_000))
                        .await
                        .expect("the store answers over h2c");
                    admitted += usize::from(verdicts[0].allowed);
                }
                admitted
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.unwrap(), 3);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_and_http1_share_the_port_and_answer_alike() {
    let s = common::start(|_| {}).await;
    let client = h2c_client();
    let answers = join_all((0..32).map(|i| {
        let request = client
            .post(s.url("/pipeline"))
            .bearer_auth(TOKEN)
            .body(format!(r#"[["SET","k{i}","v{i}"],["GET","k{i}"]]"#));
        async move {
            let response = request.send().await.expect("answered");
            let version = response.version();
            let sync_token = response.headers().contains_key("upstash-sync-token");
            let status = response.status().as_u16();
            (version, status, sync_token, response.text().await.unwrap())
        }
    }))
    .await;
    for (i, (version, status, sync_token, body)) in answers.into_iter().enumerate() {
        assert_eq!(version, reqwest::Version::HTTP_2);
        assert_eq!(status, 200, "{body}");
        assert!(sync_token, "the layers run for h2c too");
        assert_eq!(body, format!(r#"[{{"result":"OK"}},{{"result":"v{i}"}}]"#));
    }
    // A wrong token is refused the same way.
    let refused = client
        .post(s.url("/"))
        .bearer_auth("wrong")
        .body(r#"["PING"]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 401);
    // HTTP/1.1 on the same port.
    let (status, body) = raw_post(s.addr(), "/", TOKEN, br#"["GET","k7"]"#)
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (200, r#"{"result":"v7"}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2c_preface_then_silence_is_closed_after_the_header_read_timeout() {
    let timeout = Duration::from_millis(600);
    let s = common::start(|c| c.header_read_timeout = timeout).await;
    let opened = Instant::now();
    let mut stream = TcpStream::connect(s.addr()).await.unwrap();
    stream.write_all(PREFACE).await.unwrap();
    assert!(
        closed_within(&mut stream, Duration::from_secs(5)).await,
        "a stalled h2c connection is closed"
    );
    let waited = opened.elapsed();
    // Exact below (the clock starts before the gateway's); 2 s of slack above for a loaded
    // machine, against the 10 s default a broken setting would fall back to.
    assert!(waited >= timeout, "not before the timeout: {waited:?}");
    assert!(waited < timeout + Duration::from_secs(2), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_h2c_connection_is_closed_after_the_idle_timeout() {
    let idle = Duration::from_millis(700);
    let s = common::start(|c| c.idle_timeout = idle).await;
    let tcp = TcpStream::connect(s.addr()).await.unwrap();
    let (mut send, connection) = h2::client::handshake(tcp).await.expect("h2c handshake");
    let driven = tokio::spawn(async move {
        let _ = connection.await;
        Instant::now()
    });
    // Requests every 200 ms for 1.4 s: never idle for long, never closed (500 ms of slack between
    // a pause and the idle timeout).
    // Each request's time is taken before it is sent: the gateway's idle clock starts after its
    // answer, so the wait measured from here is never shorter than the timeout, however slowly
    // this client reads the answer on a loaded machine.
    let mut last_sent = Instant::now();
    for _ in 0..7 {
        let request = http::Request::post("/")
            .header("authorization", format!("Bearer {TOKEN}"))
            .body(())
            .unwrap();
        let ready = send.clone().ready().await.expect("the connection is open");
        send = ready;
        last_sent = Instant::now();
        let (response, mut body) = send.send_request(request, false).unwrap();
        body.send_data(bytes_of(br#"["PING"]"#), true).unwrap();
        let response = response.await.expect("answered");
        assert_eq!(response.status().as_u16(), 200);
        let mut body = response.into_body();
        while let Some(chunk) = body.data().await {
            let chunk = chunk.unwrap();
            let _ = body.flow_control().release_capacity(chunk.len());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(!driven.is_finished(), "a busy h2c connection stays open");
    // Then silence: closed after the idle timeout, counted from the last answer.
    let closed = tokio::time::timeout(Duration::from_secs(5), driven)
        .await
        .expect("closed within 5 s")
        .unwrap();
    let waited = closed - last_sent;
    // Exact below; above, 3 s of slack for a loaded machine and the last request's own time.
    assert!(waited >= idle, "{waited:?}");
    assert!(waited < idle + Duration::from_secs(3), "{waited:?}");
}

/// `["PING"]` with the token on `client`: the status.
async fn ping(client: &reqwest::Client, s: &GatewayServer) -> u16 {
    client
        .post(s.url("/"))
        .bearer_auth(TOKEN)
        .body(r#"["PING"]"#)
        .send()
        .await
        .expect("answered")
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_counts_h2c_connections() {
    let s = std::sync::Arc::new(common::start(|c| c.max_connections = 4).await);
    // Four h2c clients with the token, one connection each, left open and idle: every place is
    // taken by a connection that has authenticated, so none gives its place up.
    let mut clients: Vec<_> = (0..4).map(|_| h2c_client()).collect();
    for client in &clients {
        assert_eq!(ping(client, &s).await, 200);
    }
    let fifth = {
        let s = s.clone();
        tokio::spawn(async move { ping(&h2c_client(), &s).await })
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(!fifth.is_finished(), "the fifth waits for a free place");
    // One closes: the fifth gets its place.
    let freed = Instant::now();
    drop(clients.pop());
    let status = tokio::time::timeout(Duration::from_secs(5), fifth)
        .await
        .expect("served once a place was free")
        .unwrap();
    assert_eq!(status, 200);
    assert!(
        freed.elapsed() < Duration::from_secs(3),
        "{:?}",
        freed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_connections_without_a_token_give_their_place_up() {
    let s = common::start(|c| c.max_connections = 4).await;
    let mut stalled = Vec::new();
    for _ in 0..4 {
        let mut stream = TcpStream::connect(s.addr()).await.unwrap();
        stream.write_all(PREFACE).await.unwrap();
        stalled.push(stream);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The fifth, h2c with the token, takes the place of the oldest: served at once.
    let started = Instant::now();
    assert_eq!(ping(&h2c_client(), &s).await, 200);
    // 1 s of slack for a loaded machine: had it waited for a place, it would wait for the
    // stalled ones' 3 s unauthenticated timeout instead.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // One stalled connection gave its place up (which one, the unit tests of the eviction order
    // say: the gateway read the four prefaces in no fixed order); the other three hold on.
    exactly_one_closed(&mut stalled, Duration::from_secs(1)).await;
}

fn bytes_of(body: &'static [u8]) -> bytes::Bytes {
    bytes::Bytes::from_static(body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_an_idle_h2c_connection_and_returns() {
    let s = common::start(|_| {}).await;
    let client = h2c_client();
    let answer = client
        .post(s.url("/"))
        .bearer_auth(TOKEN)
        .body(r#"["PING"]"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.version(), reqwest::Version::HTTP_2);
    assert_eq!(answer.text().await.unwrap(), r#"{"result":"PONG"}"#);
    // The client keeps its connection open (pooled); the gateway's shutdown must not wait for
    // its idle timeout (75 s).
    let GatewayServer { redis, gateway, .. } = s;
    tokio::time::timeout(Duration::from_secs(5), gateway.shutdown())
        .await
        .expect("shut down within 5 s despite an open h2c connection");
    drop((redis, client));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_answer_closes_the_h2c_connection_and_the_next_request_gets_a_new_one() {
    let s = common::start(|c| c.drop_responses_every = std::num::NonZeroU32::new(3)).await;
    let client = h2c_client();
    let mut answered = Vec::new();
    for _ in 0..5 {
        let sent = client
            .post(s.url("/pipeline"))
            .bearer_auth(TOKEN)
            .body(r#"[["INCR","n"]]"#)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        answered.push(match sent {
            Ok(r) => Some(r.text().await.unwrap()),
            Err(_) => None,
        });
    }
    let expected: Vec<_> = (1..=5)
        .map(|n| (n != 3).then(|| format!(r#"[{{"result":{n}}}]"#)))
        .collect();
    assert_eq!(answered, expected);
    assert_eq!(s.get("n").as_deref(), Some("5"), "the dropped one ran too");
}
