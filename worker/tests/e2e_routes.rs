//! The Worker's own routes, attacked from outside under `wrangler dev`: the admin route reads no
//! body before its token is found right and no more than its bound after, token guesses are
//! limited per client address, and the metrics page answers its token only — unless
//! `metrics_public`. The attacks and what stops them: docs/security.md.
//!
//! These need the built Worker and wrangler, so they are `#[ignore]`d in a plain `cargo test`;
//! `scripts/test.d/worker.sh` runs them.

#![cfg(not(target_arch = "wasm32"))]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use edgelimit_engine::admin_route::MAX_ADMIN_BODY;
use edgelimit_testkit::edge::{EdgeStore, Stack, ADMIN_PATH, ADMIN_TOKEN, METRICS_AUTHORIZATION};
use reqwest::StatusCode;

const CONFIG: &str = r#"
timeout_ms = 5000
metrics_path = "/__edgelimit/metrics"

[[vars.EDGELIMIT_CONFIG.rules]]
name = "api"
path_prefix = "/api/"
limits = [{ name = "per-user", policy = "fixed 100/1h", identifier = "header:x-user" }]
"#;

/// POSTs `chunks` as a chunked body (no declared length) to the admin route with
/// `authorization`, over a connection of its own; the status line answered.
fn post_chunked(base: &str, authorization: &str, chunks: &[Vec<u8>]) -> Option<String> {
    let address = base.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address).expect("connect to the Worker");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "POST {ADMIN_PATH} HTTP/1.1\r\nHost: {address}\r\nAuthorization: {authorization}\r\n\
         CF-Connecting-IP: 198.51.100.20\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let mut sent = head.into_bytes();
    for chunk in chunks {
        sent.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        sent.extend_from_slice(chunk);
        sent.extend_from_slice(b"\r\n");
    }
    sent.extend_from_slice(b"0\r\n\r\n");
    // The answer may come, and the connection close, before the whole body is written.
    let _ = stream.write_all(&sent);
    let mut answer = Vec::new();
    let mut buffer = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
        }
    }
    let text = String::from_utf8_lossy(&answer).to_string();
    text.lines()
        .next()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
}

/// [`post_chunked`] off the test's runtime.
async fn chunked(base: &str, authorization: String, quarters: usize) -> Option<String> {
    let base = base.to_string();
    let chunks = vec![vec![b' '; MAX_ADMIN_BODY / 4]; quarters];
    tokio::task::spawn_blocking(move || post_chunked(&base, &authorization, &chunks))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
async fn the_admin_token_is_checked_before_the_body_and_the_body_is_bounded() {
    let stack = Stack::start_on(EdgeStore::DurableObjects, CONFIG).await;
    let base = stack.worker.url();
    let admin = format!("{base}{ADMIN_PATH}");
    let post = |token: &str, body: Vec<u8>| {
        stack
            .http
            .post(&admin)
            .bearer_auth(token)
            .header("cf-connecting-ip", "198.51.100.21")
            .body(body)
    };
    let right = format!("Bearer {ADMIN_TOKEN}");
    // A wrong token is refused before anything of the body is looked at, its size included:
    // 401, never the 413 its body would earn. (Under `wrangler dev` the body reaches the
    // Worker whole — wrangler's proxy buffers it — so this order is what can be seen here.)
    let huge = vec![b' '; 16 * MAX_ADMIN_BODY];
    let wrong = post("wrong", huge.clone()).send().await.unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        chunked(&base, "Bearer wrong".into(), 64).await.as_deref(),
        Some("HTTP/1.1 401 Unauthorized")
    );
    // With the right token: over the bound by its declared length, refused unread; at the
    // bound, read (400: it is no call).
    let over = post(ADMIN_TOKEN, huge).send().await.unwrap();
    assert_eq!(over.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let over = post(ADMIN_TOKEN, vec![b' '; MAX_ADMIN_BODY + 1])
        .send()
        .await
        .unwrap();
    assert_eq!(over.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let at = post(ADMIN_TOKEN, vec![b' '; MAX_ADMIN_BODY])
        .send()
        .await
        .unwrap();
    assert_eq!(at.status(), StatusCode::BAD_REQUEST);
    // Without a declared length (chunked): read up to the bound, then refused; within it, read.
    assert_eq!(
        chunked(&base, right.clone(), 5).await.as_deref(),
        Some("HTTP/1.1 413 Payload Too Large")
    );
    assert_eq!(
        chunked(&base, right, 3).await.as_deref(),
        Some("HTTP/1.1 400 Bad Request")
    );
    // Not a POST: refused before any body.
    let get = stack
        .http
        .get(&admin)
        .bearer_auth(ADMIN_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
async fn token_guesses_are_limited_per_client_address() {
    let stack = Stack::start_on(EdgeStore::DurableObjects, CONFIG).await;
    let admin = format!("{}{ADMIN_PATH}", stack.worker.url());
    let attempt = |token: &str, client: &str| {
        stack
            .http
            .post(&admin)
            .bearer_auth(token)
            .header("cf-connecting-ip", client)
            .body("not a call")
            .send()
    };
    let attacker = "203.0.113.66";
    for i in 0..10 {
        let guess = format!("guess-{i:02}-{}", "x".repeat(30));
        let r = attempt(&guess, attacker).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let refused = attempt("guess-10", attacker).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    // The right token from that address is not even compared now.
    let right = attempt(ADMIN_TOKEN, attacker).await.unwrap();
    assert_eq!(right.status(), StatusCode::TOO_MANY_REQUESTS);
    // The operator elsewhere is not locked out: admitted (400: the body is no call).
    let operator = attempt(ADMIN_TOKEN, "192.0.2.10").await.unwrap();
    assert_eq!(operator.status(), StatusCode::BAD_REQUEST);
    // The metrics page shares the guard: the attacker's address is refused there too.
    let metrics = stack
        .get(
            "/__edgelimit/metrics",
            &[METRICS_AUTHORIZATION, ("cf-connecting-ip", attacker)],
        )
        .await;
    assert_eq!(metrics.status(), StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the built Worker and wrangler: scripts/test.d/worker.sh runs it"]
async fn the_metrics_page_answers_its_token_unless_public() {
    let stack = Stack::start_on(EdgeStore::Redis, CONFIG).await;
    let client = ("cf-connecting-ip", "198.51.100.30");
    for refused in [
        stack.get("/__edgelimit/metrics", &[client]).await,
        stack
            .get(
                "/__edgelimit/metrics",
                &[client, ("authorization", "Bearer not-the-token")],
            )
            .await,
        stack
            .get(
                "/__edgelimit/metrics",
                &[client, ("authorization", ADMIN_TOKEN)],
            )
            .await,
    ] {
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        let body = refused.text().await.unwrap();
        assert!(!body.contains("edgelimit_"), "{body}");
        assert!(body.contains("EDGELIMIT_METRICS_TOKEN"), "{body}");
    }
    let page = stack
        .get("/__edgelimit/metrics", &[client, METRICS_AUTHORIZATION])
        .await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("edgelimit_"));

    let public = Stack::start_on(
        EdgeStore::Redis,
        &CONFIG.replace("metrics_path =", "metrics_public = true\nmetrics_path ="),
    )
    .await;
    let page = public.get("/__edgelimit/metrics", &[client]).await;
    assert_eq!(page.status(), StatusCode::OK);
    assert!(page.text().await.unwrap().contains("edgelimit_"));
}
