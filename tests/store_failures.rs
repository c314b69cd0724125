//! Store failures told apart, against real failing stores: each class of failure a transport
//! produces — a refused token or password, a missing permission, a script failing inside Redis,
//! an answer that is not the protocol's (misconfigurations), and a store down, slow, busy or
//! over its quota (outages) — decided by the limiter with each limit's mode for that class: a
//! misconfiguration fails closed unless the limit's `fail_misconfigured` says otherwise, an
//! outage follows `fail` (open unless set). Every failure is counted by class and logged once
//! per class per interval with the count of those it stands for.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use edgelimit::metrics::FailureLine;
use edgelimit::store::key::state_key;
use edgelimit::store::{Shard, ShardedStore};
use edgelimit::{
    Algorithm, Check, FailMode, FailureClass, Identifier, Limit, Limiter, Policy, Reason,
    RespStore, RestStore, Store, StoreError, TimeSource, Verdict,
};
use edgelimit_testkit::net::{free_port, SilentServer};
use edgelimit_testkit::{gateway, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TOKEN: &str = "store-failures-token";
const NAMESPACE: &str = "failures";
const CLIENT: &str = "client";

/// The four limits every scenario checks at once, one item each: the defaults (`fail` open,
/// `fail_misconfigured` closed), a misconfiguration admitted, an outage refused, and a
/// misconfiguration decided by the in-process fallback.
fn limits() -> [Limit; 4] {
    let policy: Policy = "fixed 10/1m".parse().unwrap();
    [
        Limit::new("defaults", policy),
        Limit::new("misconfigured-open", policy).with_fail_misconfigured(FailMode::Open),
        Limit::new("closed", policy).with_fail_mode(FailMode::Closed),
        Limit::new("misconfigured-fallback", policy)
            .with_fail_misconfigured(FailMode::Fallback { per_mille: 500 }),
    ]
}

fn check_of(identifier: &str) -> Check {
    limits().into_iter().fold(Check::new(), |check, limit| {
        check.with(limit, identifier, 1)
    })
}

/// What a limiter over a failing store decided and reported for two checks of [`limits`].
#[derive(Debug)]
struct Failed {
    reasons: Vec<Reason>,
    allowed: Vec<bool>,
    errors: Vec<(FailureClass, u64)>,
    lines: Vec<FailureLine>,
}

/// Checks [`check_of`] `identifier` twice through a limiter over `store` (the second check
/// answers as the first); then what it decided, counted and logged.
async fn fail_twice<S: Store>(store: S, identifier: &str) -> Failed {
    let limiter = Limiter::new(store);
    let check = check_of(identifier);
    let first = limiter.check(&check).await;
    let second = limiter.check(&check).await;
    let decided = |v: &Verdict| -> Vec<(Reason, bool)> {
        v.decisions.iter().map(|d| (d.reason, d.allowed)).collect()
    };
    assert_eq!(decided(&first), decided(&second), "both fail alike");
    Failed {
        reasons: first.decisions.iter().map(|d| d.reason).collect(),
        allowed: first.decisions.iter().map(|d| d.allowed).collect(),
        errors: limiter
            .metrics()
            .store_errors_by_class()
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .collect(),
        lines: limiter.store_failure_lines(),
    }
}

/// Both failures counted in `class` alone, and one log line for them.
fn assert_counted_and_logged(failed: &Failed, class: FailureClass) {
    assert_eq!(failed.errors, [(class, 2)], "{failed:?}");
    assert_eq!(failed.lines.len(), 1, "{failed:?}");
    let line = &failed.lines[0];
    assert_eq!(
        (line.class, line.failures, line.suppressed),
        (class, 2, 1),
        "{line:?}"
    );
    assert_eq!(line.misconfiguration, class.is_misconfiguration());
    assert!(!line.error.is_empty());
}

/// The store refused the limiter: the defaults fail closed, `fail_misconfigured` decides, and
/// `fail` does not.
fn assert_refused(failed: &Failed, class: FailureClass) {
    assert!(class.is_misconfiguration());
    assert_eq!(
        failed.reasons,
        [
            Reason::MisconfiguredClosed,
            Reason::MisconfiguredOpen,
            Reason::MisconfiguredClosed,
            Reason::MisconfiguredFallback,
        ],
        "{failed:?}"
    );
    assert_eq!(failed.allowed, [false, true, false, true]);
    assert_counted_and_logged(failed, class);
}

/// The store could not answer: each limit follows `fail`, open by default.
fn assert_outage(failed: &Failed, class: FailureClass) {
    assert!(!class.is_misconfiguration());
    assert_eq!(
        failed.reasons,
        [
            Reason::FailedOpen,
            Reason::FailedOpen,
            Reason::FailedClosed,
            Reason::FailedOpen,
        ],
        "{failed:?}"
    );
    assert_eq!(failed.allowed, [true, true, false, true]);
    assert_counted_and_logged(failed, class);
}

/// A loopback HTTP server answering every request with `status` and `body`, then closing.
async fn answering(status: &'static str, body: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                // The request's head and body, whatever they are: read until the client waits.
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let read =
                        tokio::time::timeout(Duration::from_millis(50), stream.read(&mut buf));
                    match read.await {
                        Ok(Ok(n)) if n > 0 => request.extend_from_slice(&buf[..n]),
                        _ => break,
                    }
                }
                let answer = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

fn rest(url: &str, token: &str) -> RestStore {
    RestStore::new(url, token)
        .unwrap()
        .with_namespace(NAMESPACE)
}

/// The key of the `defaults` limit's state for `identifier`, made a list: the limiter's script
/// then fails inside Redis (`WRONGTYPE`), as it does on a namespace another program writes.
fn corrupt_state(redis: &RedisServer, identifier: &str) {
    let key = state_key(
        NAMESPACE,
        "defaults",
        Algorithm::FixedWindow,
        &Identifier::from(identifier),
    );
    redis.command(&["RPUSH", &key, "not a state"]).unwrap();
}

// --- REST (the Upstash protocol, through the gateway in front of a real Redis) ---

#[tokio::test]
async fn rest_a_refused_token_fails_closed_unless_fail_misconfigured_says_open() {
    let redis = RedisServer::start();
    let gw = gateway::start(&redis, TOKEN).await;
    let failed = fail_twice(rest(&gateway::url(&gw), "rotated-away"), CLIENT).await;
    assert_refused(&failed, FailureClass::RefusedAuth);
    assert!(failed.lines[0].error.contains("credentials"), "{failed:?}");
}

#[tokio::test]
async fn rest_a_script_failing_inside_redis_fails_closed() {
    let redis = RedisServer::start();
    let gw = gateway::start(&redis, TOKEN).await;
    corrupt_state(&redis, CLIENT);
    let failed = fail_twice(rest(&gateway::url(&gw), TOKEN), CLIENT).await;
    assert_refused(&failed, FailureClass::RefusedScript);
    assert!(failed.lines[0].error.contains("WRONGTYPE"), "{failed:?}");
}

#[tokio::test]
async fn rest_an_answer_that_is_not_the_protocol_fails_closed() {
    // A REST URL that reaches some other web server (a portal, a wrong host): 200, not JSON.
    let url = answering("200 OK", "<html>welcome</html>").await;
    assert_refused(
        &fail_twice(rest(&url, TOKEN), CLIENT).await,
        FailureClass::Protocol,
    );
}

#[tokio::test]
async fn rest_a_store_nobody_listens_on_follows_fail() {
    let url = format!("http://127.0.0.1:{}", free_port());
    assert_outage(
        &fail_twice(rest(&url, TOKEN), CLIENT).await,
        FailureClass::Unreachable,
    );
}

#[tokio::test]
async fn rest_a_5xx_follows_fail() {
    let url = answering("503 Service Unavailable", "upstream down").await;
    assert_outage(
        &fail_twice(rest(&url, TOKEN), CLIENT).await,
        FailureClass::Unreachable,
    );
}

#[tokio::test]
async fn rest_a_silent_store_times_out_and_follows_fail() {
    let silent = SilentServer::start();
    let store =
        rest(&format!("http://{}", silent.addr()), TOKEN).with_timeout(Duration::from_millis(100));
    assert_outage(&fail_twice(store, CLIENT).await, FailureClass::Timeout);
}

#[tokio::test]
async fn rest_a_store_over_its_quota_follows_fail() {
    let url = answering(
        "429 Too Many Requests",
        r#"{"error":"ERR max requests limit exceeded. Limit: 10000, Usage: 10000"}"#,
    )
    .await;
    assert_outage(
        &fail_twice(rest(&url, TOKEN), CLIENT).await,
        FailureClass::OverQuota,
    );
}

// --- RESP (the redis crate, straight to Redis) ---

async fn resp(url: &str, timeout: Duration) -> RespStore {
    RespStore::connect_with_timeout(url, timeout)
        .await
        .expect("connect")
        .with_namespace(NAMESPACE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_a_user_without_permission_for_scripts_fails_closed() {
    let redis = RedisServer::start();
    redis
        .command(&[
            "ACL", "SETUSER", "limiter", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
        ])
        .unwrap();
    let url = format!("redis://limiter:pw@127.0.0.1:{}/", redis.port());
    let failed = fail_twice(resp(&url, RespStore::DEFAULT_TIMEOUT).await, CLIENT).await;
    assert_refused(&failed, FailureClass::RefusedAuth);
    assert!(failed.lines[0].error.contains("NOPERM"), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_a_rotated_password_fails_closed_once_the_connection_is_renewed() {
    let redis = RedisServer::start();
    redis
        .command(&[
            "ACL", "SETUSER", "limiter", "on", ">old", "~*", "&*", "+@all",
        ])
        .unwrap();
    let url = format!("redis://limiter:old@127.0.0.1:{}/", redis.port());
    let store = resp(&url, Duration::from_millis(500)).await;
    let limit = Limit::new("defaults", "fixed 10/1m".parse::<Policy>().unwrap());
    let check = [Check::single(&limit, "warm", 1)];
    assert!(store.check(&check, TimeSource::Server).await.is_ok());
    // The password is rotated and the store's connection dropped: it reconnects with the old
    // one. The first call may see the dropped connection; the refusal follows (30 s at most).
    redis
        .command(&["ACL", "SETUSER", "limiter", "resetpass", ">new"])
        .unwrap();
    redis
        .command(&["CLIENT", "KILL", "USER", "limiter"])
        .unwrap();
    let mut refused = None;
    for _ in 0..300 {
        match store.check(&check, TimeSource::Server).await {
            Err(e) if e.class() == FailureClass::RefusedAuth => {
                refused = Some(e);
                break;
            }
            Err(e) => assert!(!e.class().is_misconfiguration(), "{e:?}"),
            Ok(_) => panic!("the old password was accepted"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = refused.expect("the old password is refused");
    assert!(matches!(refused, StoreError::Auth(_)), "{refused:?}");
    assert_refused(&fail_twice(store, CLIENT).await, FailureClass::RefusedAuth);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_a_script_failing_inside_redis_fails_closed() {
    let redis = RedisServer::start();
    corrupt_state(&redis, CLIENT);
    let store = resp(&redis.url(), RespStore::DEFAULT_TIMEOUT).await;
    let failed = fail_twice(store, CLIENT).await;
    assert_refused(&failed, FailureClass::RefusedScript);
    assert!(failed.lines[0].error.contains("WRONGTYPE"), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_a_redis_busy_running_a_script_follows_fail() {
    // Redis answers BUSY to other clients once a script has run 20 ms.
    let redis = RedisServer::start_with(&["--busy-reply-threshold", "20"]);
    let store = resp(&redis.url(), RespStore::DEFAULT_TIMEOUT).await;
    let port = redis.port();
    let busy = std::thread::spawn(move || {
        let spin = "local s = redis.call('TIME') \
                    while true do \
                      local n = redis.call('TIME') \
                      if (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > 1500000 then break end \
                    end \
                    return 1";
        edgelimit_testkit::resp::command(port, &["EVAL", spin, "0"])
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let failed = fail_twice(store, CLIENT).await;
    busy.join().unwrap().unwrap();
    assert_outage(&failed, FailureClass::Unreachable);
    assert!(failed.lines[0].error.contains("BUSY"), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resp_a_paused_redis_times_out_and_follows_fail() {
    let redis = RedisServer::start();
    let store = resp(&redis.url(), Duration::from_millis(100)).await;
    redis.command(&["CLIENT", "PAUSE", "2000", "ALL"]).unwrap();
    let failed = fail_twice(store, CLIENT).await;
    redis.command(&["CLIENT", "UNPAUSE"]).ok();
    assert_outage(&failed, FailureClass::Timeout);
}

// --- Wrappers and the limiter itself ---

#[tokio::test]
async fn sharded_a_refusing_shard_wins_over_a_down_one() {
    let redis = RedisServer::start();
    let gw = gateway::start(&redis, TOKEN).await;
    let down = format!("http://127.0.0.1:{}", free_port());
    let store = ShardedStore::new(vec![
        Shard::new("down", rest(&down, TOKEN)),
        Shard::new("refusing", rest(&gateway::url(&gw), "rotated-away")),
    ])
    .unwrap();
    // An identifier whose four items land on both shards: one check split over them.
    let identifier = (0..)
        .map(|n| format!("client-{n}"))
        .find(|id| {
            let owners: Vec<usize> = limits()
                .iter()
                .map(|l| store.shard_of(&l.name, id.as_bytes()))
                .collect();
            owners.contains(&0) && owners.contains(&1)
        })
        .unwrap();
    assert_refused(
        &fail_twice(store, &identifier).await,
        FailureClass::RefusedAuth,
    );
}

/// A store answering fewer verdicts than checks: a reply of the wrong shape.
#[derive(Debug)]
struct Short;

#[async_trait]
impl Store for Short {
    async fn check(&self, _: &[Check], _: TimeSource) -> Result<Vec<Verdict>, StoreError> {
        Ok(Vec::new())
    }
}

#[tokio::test]
async fn a_store_answering_the_wrong_number_of_verdicts_fails_closed() {
    assert_refused(&fail_twice(Short, CLIENT).await, FailureClass::Protocol);
}

/// The failures of one class make one line per interval, however many requests fail: 1,001
/// failing requests over a minute are one line at the first and one, for the 1,000 others, when
/// the minute is up.
#[tokio::test]
async fn a_class_is_logged_at_its_first_failure_then_once_per_interval() {
    let clock = Arc::new(edgelimit::ManualClock::at(1_700_000_000_000));
    let limiter = Limiter::new(Short)
        .with_clock(clock.clone())
        .with_failure_log_interval_ms(60_000);
    let check = check_of(CLIENT);
    let mut lines = Vec::new();
    for _ in 0..1_001 {
        limiter.check(&check).await;
        lines.extend(limiter.store_failure_lines());
        clock.advance(60);
    }
    assert_eq!(
        lines
            .iter()
            .map(|l| (l.class, l.failures, l.suppressed))
            .collect::<Vec<_>>(),
        [
            (FailureClass::Protocol, 1, 0),
            (FailureClass::Protocol, 1_000, 999)
        ]
    );
}
