//! Probes from outside, as tests: stalled and idle connections are closed on time, the
//! connection cap queues connections with the token and makes room by closing those without,
//! bad input gets a clear 4xx, 50,000 keep-alive requests count exactly,
//! and the token never reaches the logs. Each test starts its own redis-server and gateway on free
//! loopback ports; every wait is bounded.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{READ_ONLY, TOKEN};
use edgelimit_testkit::http::{
    closed_within, exactly_one_closed, parse_answer, raw_post, KeepAlive,
};
use edgelimit_testkit::task::join_all;
use edgelimit_testkit::GatewayServer;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Everything every test in this binary logs, at every level: the token test reads it.
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("trace"))
            .with_ansi(false)
            .with_writer(move || Sink(sink.clone()))
            .init();
        logs
    })
    .clone()
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Half a request: the headers never end.
const HALF_HEADERS: &[u8] = b"POST /pipeline HTTP/1.1\r\nHost: gateway\r\nContent-Type: appl";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_are_closed_after_the_header_read_timeout() {
    captured_logs();
    let timeout = Duration::from_millis(800);
    let s = common::start(|c| c.header_read_timeout = timeout).await;
    let mut stalled = Vec::new();
    // Each timed from before its connect: the gateway's clock for it starts later.
    for _ in 0..200 {
        let opened = Instant::now();
        let mut stream = TcpStream::connect(s.addr()).await.unwrap();
        stream.write_all(HALF_HEADERS).await.unwrap();
        stalled.push((opened, stream));
    }
    // A connection that sends nothing at all is held to the same time.
    let opened = Instant::now();
    stalled.push((opened, TcpStream::connect(s.addr()).await.unwrap()));
    let waits = stalled.into_iter().map(|(opened, mut stream)| async move {
        assert!(
            closed_within(&mut stream, Duration::from_secs(5)).await,
            "a stalled connection is closed"
        );
        opened.elapsed()
    });
    let waits = join_all(waits).await;
    let (min, max) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
    // Exact below: each clock starts before the gateway's. Above, 2 s of slack for 201 closes
    // on a loaded machine (it held in 5 runs of the suite beside `stress-ng --cpu 2`); a gateway
    // that never cut them would reach the 5 s bound.
    assert!(*min >= timeout, "not before the timeout: {min:?}");
    assert!(
        *max < timeout + Duration::from_secs(2),
        "soon after it: {max:?}"
    );
    // The gateway still serves.
    let (status, body) = raw_post(s.addr(), "/", TOKEN, br#"["PING"]"#)
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (200, r#"{"result":"PONG"}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_gets_408_within_the_same_time() {
    captured_logs();
    let timeout = Duration::from_millis(500);
    let s = common::start(|c| c.header_read_timeout = timeout).await;
    let mut stream = TcpStream::connect(s.addr()).await.unwrap();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 100\r\n\r\n[\"SET\",\"k\","
    );
    let started = Instant::now();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut answer))
        .await
        .expect("answered within 5 s")
        .unwrap();
    let (status, body) = parse_answer(&answer[..n]);
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("did not arrive within 500 ms"), "{body}");
    assert!(started.elapsed() >= timeout);
    assert_eq!(s.get("k"), None, "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connections_are_closed_but_busy_ones_stay() {
    captured_logs();
    let idle = Duration::from_millis(700);
    let s = common::start(|c| c.idle_timeout = idle).await;
    let request = format!(
        "POST / HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 8\r\n\r\n[\"PING\"]"
    );
    // One request every 300 ms for 2.1 s: never idle for long, never closed. The slack is the
    // 400 ms between a pause and the idle timeout: a sleep overrunning by that much is a
    // machine stalled, not loaded.
    let mut busy = TcpStream::connect(s.addr()).await.unwrap();
    for _ in 0..7 {
        ping(&mut busy, &request).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // One request, then silence: closed after the idle timeout.
    // The idle clock starts once the gateway has its answer, so after `sent`.
    let mut quiet = TcpStream::connect(s.addr()).await.unwrap();
    let sent = Instant::now();
    ping(&mut quiet, &request).await;
    assert!(closed_within(&mut quiet, Duration::from_secs(5)).await);
    let waited = sent.elapsed();
    // Exact below (the clock starts before the gateway's); 3 s of slack above for a loaded
    // machine, far below the default idle timeout (75 s) a broken setting would fall back to.
    assert!(waited >= idle, "{waited:?}");
    assert!(waited < idle + Duration::from_secs(3), "{waited:?}");
}

/// Sends `request` (a PING) on `stream` and checks its answer.
async fn ping(stream: &mut TcpStream, request: &str) {
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = stream.read(&mut answer).await.unwrap();
    let (status, body) = parse_answer(&answer[..n]);
    assert_eq!((status, body.as_str()), (200, r#"{"result":"PONG"}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_cap_connections_with_the_token_are_waited_for() {
    captured_logs();
    let s = common::start(|c| c.max_connections = 16).await;
    let ping = format!(
        "POST / HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 8\r\n\r\n[\"PING\"]"
    );
    // Sixteen keep-alive connections that presented the token fill every place, and keep it.
    let mut held = Vec::new();
    for _ in 0..16 {
        let mut client = KeepAlive::connect(s.addr()).await;
        assert_eq!(client.send(ping.as_bytes()).await.unwrap().0, 200);
        held.push(client);
    }
    let addr = s.addr();
    let seventeenth = tokio::spawn(async move { raw_post(addr, "/", TOKEN, br#"["PING"]"#).await });
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !seventeenth.is_finished(),
        "the 17th waits for a free place"
    );
    let freed = Instant::now();
    drop(held.pop());
    let (status, body) = seventeenth.await.unwrap().unwrap();
    assert_eq!((status, body.as_str()), (200, r#"{"result":"PONG"}"#));
    assert!(
        freed.elapsed() < Duration::from_secs(3),
        "{:?}",
        freed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_cap_a_connection_without_the_token_gives_its_place_up() {
    captured_logs();
    let s = common::start(|c| {
        c.max_connections = 16;
        c.metrics = edgelimit_gateway::MetricsPage::Token;
    })
    .await;
    let mut stalled = Vec::new();
    for _ in 0..16 {
        let mut stream = TcpStream::connect(s.addr()).await.unwrap();
        stream.write_all(HALF_HEADERS).await.unwrap();
        stalled.push(stream);
    }
    // Let the gateway take all 16 before the 17th arrives.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let (status, body) = raw_post(s.addr(), "/", TOKEN, br#"["PING"]"#)
        .await
        .unwrap();
    assert_eq!((status, body.as_str()), (200, r#"{"result":"PONG"}"#));
    // 1 s of slack for a loaded machine: a 17th connection that had to wait for a place would
    // wait for the stalled ones' 3 s unauthenticated timeout instead.
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "served at once: {:?}",
        started.elapsed()
    );
    // One stalled connection was closed for it, and counted; the others hold on. Which one is the
    // eviction order's unit tests' business: under load the gateway reads the 16 in no fixed order.
    exactly_one_closed(&mut stalled, Duration::from_secs(1)).await;
    let page = edgelimit_testkit::metrics::scrape(&s.addr().to_string(), Some(TOKEN)).unwrap();
    assert!(page.value("edgelimit_gateway_connections_evicted_total", &[]) >= 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_the_request_in_flight_and_closes_idle_connections() {
    captured_logs();
    let s = common::start(|_| {}).await;
    let addr = s.addr();
    let mut idle = KeepAlive::connect(addr).await;
    let ping = format!(
        "POST / HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 8\r\n\r\n[\"PING\"]"
    );
    assert_eq!(idle.send(ping.as_bytes()).await.unwrap().0, 200);
    // A request in flight: its headers and half its body are in.
    let mut in_flight = TcpStream::connect(addr).await.unwrap();
    let body = br#"["SET","during","shutdown"]"#;
    let head = format!(
        "POST / HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: {}\r\n\r\n",
        body.len()
    );
    in_flight.write_all(head.as_bytes()).await.unwrap();
    in_flight.write_all(&body[..10]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let GatewayServer { redis, gateway, .. } = s;
    let shutdown = tokio::spawn(gateway.shutdown());
    // The idle connection is closed at once; the gateway waits for the other.
    let mut idle_closed = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(2), idle.stream().read(&mut idle_closed));
    assert!(matches!(read.await, Ok(Ok(0)) | Ok(Err(_))), "idle closed");
    assert!(
        !shutdown.is_finished(),
        "still finishing the request in flight"
    );
    in_flight.write_all(&body[10..]).await.unwrap();
    let mut answer = Vec::new();
    in_flight.read_to_end(&mut answer).await.unwrap();
    let (status, answer) = parse_answer(&answer);
    assert_eq!((status, answer.as_str()), (200, r#"{"result":"OK"}"#));
    tokio::time::timeout(Duration::from_secs(2), shutdown)
        .await
        .expect("shut down once it answered")
        .unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "no longer listening"
    );
    assert_eq!(
        redis.command(&["GET", "during"]).unwrap().text().as_deref(),
        Some("shutdown")
    );
}

#[tokio::test]
async fn bad_input_gets_a_clear_4xx_and_the_gateway_carries_on() {
    captured_logs();
    let s = common::start(|_| {}).await;
    let post = |path: &'static str, token: &str, body: Vec<u8>| {
        let (addr, token) = (s.addr(), token.to_string());
        async move {
            raw_post(addr, path, &token, &body)
                .await
                .expect("an answer")
        }
    };
    let error = |body: &str| -> String {
        let json: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        json["error"].as_str().unwrap_or_default().to_string()
    };
    for bad in ["", "wrong", &TOKEN[1..], &TOKEN.to_uppercase()] {
        let (status, body) = post("/", bad, br#"["PING"]"#.to_vec()).await;
        assert_eq!(
            (status, error(&body).as_str()),
            (401, "Unauthorized"),
            "{bad:?}"
        );
    }
    // The default body limit is 1 MiB.
    let big = serde_json::to_vec(&json!(["SET", "big", "x".repeat(1 << 20)])).unwrap();
    let (status, body) = post("/", TOKEN, big).await;
    assert_eq!(status, 413, "{body}");
    assert!(error(&body).contains("limit of 1048576 bytes"), "{body}");
    // The default pipeline limit is 1000 commands: the 1001st is refused unparsed, with the
    // rest of the body.
    let mut long = serde_json::to_vec(&vec![json!(["INCR", "n"]); 1001]).unwrap();
    long.pop();
    long.extend_from_slice(b",not JSON at all");
    let (status, body) = post("/pipeline", TOKEN, long).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        error(&body).contains("pipeline exceeds the limit of 1000 commands"),
        "{body}"
    );
    assert_eq!(s.get("n"), None, "nothing of it ran");
    // Deep nesting is refused at the first array inside a command, not by exhausting the stack.
    let mut nested = "[".repeat(100_000).into_bytes();
    nested.extend_from_slice("]".repeat(100_000).as_bytes());
    for path in ["/", "/pipeline", "/multi-exec"] {
        let (status, body) = post(path, TOKEN, nested.clone()).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(
            error(&body).contains("argument 0 is an array"),
            "{path}: {body}"
        );
    }
    let (status, body) = post("/", TOKEN, br#"["PING"]"#.to_vec()).await;
    assert_eq!((status, body.as_str()), (200, r#"{"result":"PONG"}"#));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_thousand_increments_from_32_keep_alive_clients_count_exactly() {
    captured_logs();
    const CLIENTS: usize = 32;
    const TOTAL: usize = 50_000;
    let s = common::start(|_| {}).await;
    let request = format!(
        "POST /incr/load HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 0\r\n\r\n"
    );
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (addr, request) = (s.addr(), request.clone());
            let requests = TOTAL / CLIENTS + usize::from(c < TOTAL % CLIENTS);
            tokio::spawn(async move {
                let mut client = KeepAlive::connect(addr).await;
                let mut ok = 0usize;
                for _ in 0..requests {
                    let (status, _) = client.send(request.as_bytes()).await.unwrap();
                    if status == 200 {
                        ok += 1;
                    }
                }
                ok
            })
        })
        .collect();
    let mut ok = 0;
    for task in tasks {
        ok += task.await.unwrap();
    }
    println!("{TOTAL} requests in {:?}", started.elapsed());
    assert_eq!(ok, TOTAL, "every request answered 200");
    assert_eq!(
        s.get("load"),
        Some(TOTAL.to_string()),
        "Redis counted each 200 once"
    );
}

#[tokio::test]
async fn tokens_never_reach_the_logs() {
    let logs = captured_logs();
    let s = common::start(|_| {}).await;
    let http = reqwest::Client::new();
    let wrong = "wrong-token-7d2a";
    let sends = [
        http.post(s.url("/"))
            .bearer_auth(TOKEN)
            .json(&json!(["SET", "k", 1])),
        http.post(s.url(&format!("/get/k?_token={TOKEN}"))),
        http.post(s.url("/pipeline"))
            .bearer_auth(READ_ONLY)
            .json(&json!([["GET", "k"]])),
        http.post(s.url("/"))
            .bearer_auth(wrong)
            .json(&json!(["PING"])),
        http.get(s.url(&format!("/get/k?_token={wrong}"))),
    ];
    let mut statuses = Vec::new();
    for send in sends {
        statuses.push(send.send().await.unwrap().status().as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 401, 401]);
    let text = String::from_utf8_lossy(&logs.lock().unwrap()).into_owned();
    // The capture works: the requests above are in it, at debug.
    assert!(
        text.contains("DEBUG") && text.contains("status=401"),
        "{text}"
    );
    assert!(text.contains("route=\"pipeline\" status=200"), "{text}");
    for secret in [TOKEN, READ_ONLY, wrong] {
        assert!(!text.contains(secret), "`{secret}` is in the logs");
    }
}
