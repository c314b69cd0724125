//! Faults, bounded: Redis killed under load (quick 503s with a JSON error, then service again
//! without a restart of the gateway), and the test-only fault the gateway injects itself — an
//! answer lost after its effect happened.

mod common;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::TOKEN;
use edgelimit_testkit::http::{raw_post, KeepAlive};
use edgelimit_testkit::wait;
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_under_load_gives_quick_503s_then_service_again() {
    let mut s = common::start(|_| {}).await;
    let request = format!(
        "POST /incr/n HTTP/1.1\r\nHost: gateway\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: 0\r\n\r\n"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicUsize::new(0));
    // Every 503: how long it took, and its body.
    let unavailable = Arc::new(Mutex::new(Vec::<(Duration, Vec<u8>)>::new()));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let (addr, request) = (s.addr(), request.clone());
            let (stop, ok, unavailable) = (stop.clone(), ok.clone(), unavailable.clone());
            tokio::spawn(async move {
                let mut client = KeepAlive::connect(addr).await;
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let (status, body) = client.send(request.as_bytes()).await.unwrap();
                    match status {
                        200 => {
                            ok.fetch_add(1, Ordering::Relaxed);
                        }
                        503 => unavailable.lock().unwrap().push((sent.elapsed(), body)),
                        other => panic!("unexpected {other}: {}", String::from_utf8_lossy(&body)),
                    }
                }
            })
        })
        .collect();
    let wait_for = |target: usize, ok: Arc<AtomicUsize>| async move {
        let reached = wait::until_async(Duration::from_secs(10), Duration::from_millis(10), || {
            ok.load(Ordering::Relaxed) >= target
        })
        .await;
        assert!(reached, "only {} answered", ok.load(Ordering::Relaxed));
    };
    wait_for(200, ok.clone()).await;
    s.redis.stop();
    let down = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answered_while_down = ok.load(Ordering::Relaxed);
    s.redis.restart();
    let up = Instant::now();
    wait_for(answered_while_down + 200, ok.clone()).await;
    let recovered_in = up.elapsed();
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let unavailable = unavailable.lock().unwrap();
    assert!(!unavailable.is_empty(), "Redis was down for 500 ms");
    for (took, body) in unavailable.iter() {
        // A refused connection answers in milliseconds; 1 s is slack for a loaded machine and
        // still half the 2 s connect timeout a hanging 503 would take.
        assert!(*took < Duration::from_secs(1), "a 503 takes {took:?}");
        let body: Value = serde_json::from_slice(body).unwrap();
        assert!(
            body["error"]
                .as_str()
                .unwrap()
                .starts_with("ERR redis unavailable"),
            "{body}"
        );
    }
    // The gateway reconnects at its next command (milliseconds idle); 5 s of slack for 200
    // answers on a loaded machine.
    assert!(recovered_in < Duration::from_secs(5), "{recovered_in:?}");
    println!(
        "{} 503s while down ({:?} of it), service again {recovered_in:?} after the restart",
        unavailable.len(),
        up - down
    );
}

#[tokio::test]
async fn every_nth_pipeline_runs_then_loses_its_answer() {
    let s = common::start(|c| c.drop_responses_every = NonZeroU32::new(3)).await;
    let incr = br#"[["INCR","n"]]"#;
    let mut answers = Vec::new();
    for _ in 0..7 {
        answers.push(raw_post(s.addr(), "/pipeline", TOKEN, incr).await);
        // What Redis holds after each request: the effect happened, answered or not.
        answers.push(Some((0, s.get("n").unwrap())));
    }
    let expected = |n: u32, answered: bool| {
        let answer = answered.then(|| (200, format!(r#"[{{"result":{n}}}]"#)));
        [answer, Some((0, n.to_string()))]
    };
    let expected: Vec<_> = (1..=7).flat_map(|n| expected(n, n % 3 != 0)).collect();
    assert_eq!(answers, expected);
    // Only /pipeline: single commands and transactions are always answered.
    for _ in 0..3 {
        let (status, _) = raw_post(s.addr(), "/", TOKEN, br#"["INCR","n"]"#)
            .await
            .unwrap();
        assert_eq!(status, 200);
        let (status, _) = raw_post(s.addr(), "/multi-exec", TOKEN, incr)
            .await
            .unwrap();
        assert_eq!(status, 200);
    }
    assert_eq!(s.get("n").as_deref(), Some("13"));
}
