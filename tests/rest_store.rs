//! `RestStore`'s own behaviour: the NOSCRIPT fall back after `SCRIPT FLUSH`, and errors typed
//! by whether retrying can help.

use std::time::{Duration, Instant};

use edgelimit::{Check, Limit, Policy, RestStore, Store, StoreError, TimeSource};
use edgelimit_testkit::net::{free_port, SilentServer};
use edgelimit_testkit::{gateway, RedisServer, Reply};

const TOKEN: &str = "rest-store-token";

fn check() -> Check {
    let limit = Limit::new("api", "gcra 5/1s".parse::<Policy>().unwrap());
    Check::single(&limit, "client", 1)
}

#[tokio::test]
async fn a_script_flush_mid_run_costs_one_more_round_trip_and_nothing_else() {
    let server = RedisServer::start();
    let gw = gateway::start(&server, TOKEN).await;
    let store = gateway::rest_store(&gw, TOKEN);
    let at = |ms: u64| TimeSource::At(1_700_000_000_000 + ms);
    let first = store.check(&[check()], at(0)).await.unwrap();
    assert_eq!(first[0].decisions[0].remaining, 4);
    assert_eq!(
        server.command(&["SCRIPT", "FLUSH"]).unwrap(),
        Reply::Status("OK".into())
    );
    let second = store.check(&[check()], at(1)).await.unwrap();
    assert_eq!(
        second[0].decisions[0].remaining, 3,
        "state survived, script reloaded"
    );
}

#[tokio::test]
async fn a_wrong_token_is_an_auth_error_not_worth_retrying() {
    let server = RedisServer::start();
    let gw = gateway::start(&server, TOKEN).await;
    let store = gateway::rest_store(&gw, "wrong");
    let err = store
        .check(&[check()], TimeSource::Server)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Auth(_)), "{err:?}");
    assert!(!err.is_transient());
}

#[tokio::test]
async fn an_unreachable_or_silent_server_is_transient() {
    // Nothing listens on a port we bound and released.
    let port = free_port();
    let store = RestStore::new(&format!("http://127.0.0.1:{port}"), TOKEN).unwrap();
    let err = store
        .check(&[check()], TimeSource::Server)
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::Unreachable(_)), "{err:?}");
    assert!(err.is_transient());

    // A server that accepts and never answers: the timeout fires, on time.
    let silent = SilentServer::start();
    let store = RestStore::new(&format!("http://{}", silent.addr()), TOKEN)
        .unwrap()
        .with_timeout(Duration::from_millis(150));
    let started = Instant::now();
    let err = store
        .check(&[check()], TimeSource::Server)
        .await
        .unwrap_err();
    assert_eq!(err, StoreError::Timeout { after_ms: 150 });
    // 150 ms budget; under 2 s is slack for a loaded machine, against a silent server that would
    // hold the call for ever without it.
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn bad_configuration_is_refused_with_a_clear_message() {
    let err = RestStore::new("ftp://example", TOKEN).unwrap_err();
    assert!(
        err.to_string()
            .contains("UPSTASH_REDIS_REST_URL must be an http"),
        "{err}"
    );
    let err = RestStore::new("http://127.0.0.1:1", " ").unwrap_err();
    assert!(
        err.to_string()
            .contains("UPSTASH_REDIS_REST_TOKEN is empty"),
        "{err}"
    );
    #[cfg(not(feature = "rest-tls"))]
    {
        let err = RestStore::new("https://eu1-example.upstash.io", TOKEN).unwrap_err();
        assert!(err.to_string().contains("rest-tls"), "{err}");
    }
}
