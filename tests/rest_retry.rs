//! A `/pipeline` whose answer is lost is retried by `RestStore` only when the retry is safe: with
//! request ids the pipeline runs twice but charges once; without, it is not retried (and the test
//! shows the lost pipeline did run, which is why a blind retry would charge twice).
//!
//! The answer is lost by a fault-injecting TCP proxy in front of the gateway: on its first
//! connection it forwards the request, waits until the gateway has answered (so the pipeline ran
//! against Redis), then closes the client's connection without passing the answer on.

use std::net::SocketAddr;

use edgelimit::store::Store;
use edgelimit::{Check, Limit, Policy, RestStore, StoreError, TimeSource};
use edgelimit_gateway::Gateway;
use edgelimit_testkit::{gateway, RedisServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const TOKEN: &str = "retry-token";
const T0: u64 = 1_700_000_000_000;

/// Proxies to `upstream`, dropping the answer on the first connection. Stops with the runtime.
async fn lossy_proxy(upstream: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((client, _)) = listener.accept().await {
            let drop_answer = std::mem::take(&mut first);
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(upstream).await else {
                    return;
                };
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                let requests = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
                });
                if drop_answer {
                    // Wait for the answer (the pipeline has run), then hang up without it.
                    let mut buf = [0u8; 4096];
                    let _ = server_read.read(&mut buf).await;
                    let _ = client_write.shutdown().await;
                    requests.abort();
                    return;
                }
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                requests.abort();
            });
        }
    });
    addr
}

/// A redis-server and a gateway, the scripts already cached (so the lost answer is the one of
/// a pipeline that ran, not a `NOSCRIPT`).
async fn servers() -> (RedisServer, Gateway) {
    let server = RedisServer::start();
    let gateway = gateway::start(&server, TOKEN).await;
    let warm = Limit::new("warm-up", "fixed 10/1m".parse::<Policy>().unwrap());
    store(gateway.local_addr())
        .check(&[Check::single(&warm, "w", 1)], TimeSource::At(T0))
        .await
        .expect("store answers");
    (server, gateway)
}

fn store(addr: SocketAddr) -> RestStore {
    RestStore::new(&format!("http://{addr}"), TOKEN)
        .expect("valid URL")
        .with_namespace("retry")
}

async fn remaining(direct: &RestStore, limit: &Limit) -> u64 {
    direct
        .check(&[Check::single(limit, "u", 0)], TimeSource::At(T0 + 10))
        .await
        .expect("store answers")[0]
        .decisions[0]
        .remaining
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_is_retried_and_charged_once_with_a_request_id() {
    let (_redis, gateway) = servers().await;
    let proxy = lossy_proxy(gateway.local_addr()).await;
    let limit = Limit::new("tokens", "fixed 10/1m".parse::<Policy>().unwrap());
    let check = Check::single(&limit, "u", 3).with_request_id("ray-1");
    let verdict = store(proxy)
        .check(&[check], TimeSource::At(T0))
        .await
        .expect("the retry answers");
    assert!(verdict[0].allowed);
    assert_eq!(verdict[0].decisions[0].remaining, 7);
    // Ran twice, charged once.
    assert_eq!(remaining(&store(gateway.local_addr()), &limit).await, 7);
    gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_without_request_ids_is_not_retried() {
    let (_redis, gateway) = servers().await;
    let proxy = lossy_proxy(gateway.local_addr()).await;
    let limit = Limit::new("tokens", "fixed 10/1m".parse::<Policy>().unwrap());
    let err = store(proxy)
        .check(&[Check::single(&limit, "u", 3)], TimeSource::At(T0))
        .await
        .expect_err("the answer was lost");
    assert!(matches!(err, StoreError::Unreachable(_)), "{err:?}");
    // The lost pipeline did run: a blind retry would have charged 6.
    assert_eq!(remaining(&store(gateway.local_addr()), &limit).await, 7);
    gateway.shutdown().await;
}

/// The gateway itself drops every second `/pipeline`'s answer after running it. Against a cold
/// Redis the first pipeline (`EVALSHA`) answers `NOSCRIPT` and the second — the `EVAL` fall
/// back, which did run — loses its answer: it is resent too, and charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_answer_to_the_eval_fall_back_is_retried_and_charged_once() {
    let redis = RedisServer::start();
    let mut config = gateway::config(redis.url(), TOKEN);
    config.drop_responses_every = std::num::NonZeroU32::new(2);
    let gateway = Gateway::start(config).await.expect("gateway starts");
    let limit = Limit::new("tokens", "fixed 10/1m".parse::<Policy>().unwrap());
    let check = Check::single(&limit, "u", 3).with_request_id("ray-1");
    let verdict = store(gateway.local_addr())
        .check(&[check], TimeSource::At(T0))
        .await
        .expect("the retry answers");
    assert_eq!(verdict[0].decisions[0].remaining, 7);
    let state = redis
        .command(&["KEYS", "{el:retry:tokens:u}:*"])
        .expect("redis answers");
    assert!(
        matches!(&state, edgelimit_testkit::Reply::Array(keys) if keys.len() == 2),
        "the state and the remembered request: {state:?}"
    );
    // Ran twice, charged once (the look is idempotent too, resent if its answer is dropped).
    assert_eq!(remaining(&store(gateway.local_addr()), &limit).await, 7);
    gateway.shutdown().await;
}
