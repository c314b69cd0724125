//! The allow-list holds inside scripts too: a refused command is refused when a script calls it,
//! whichever way the script arrives (EVAL, EVALSHA after SCRIPT LOAD, in a pipeline or a
//! transaction), and the data stays. No script reaches another database than the Redis URL's,
//! even when the URL names one. Against a real redis-server behind the gateway.

mod common;

use common::{READ_ONLY, TOKEN};
use edgelimit_gateway::{Gateway, GatewayError, RedisAcl};
use edgelimit_testkit::{gateway, GatewayServer, RedisServer, Reply};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

/// Scripts calling commands the default allow-list refuses, each with the data it would touch.
const REFUSED: &[(&str, &str)] = &[
    ("FLUSHALL", "return redis.call('FLUSHALL')"),
    ("FLUSHDB", "return redis.call('FLUSHDB')"),
    ("KEYS", "return redis.call('KEYS', '*')"),
    ("SCAN", "return redis.call('SCAN', '0')"),
    (
        "SELECT",
        "redis.call('SELECT', '1') return redis.call('GET', 'keep')",
    ),
    (
        "CONFIG",
        "return redis.call('CONFIG', 'SET', 'maxmemory', '1')",
    ),
    ("DEBUG", "return redis.call('DEBUG', 'SLEEP', '0')"),
    ("SWAPDB", "return redis.pcall('SWAPDB', '0', '1')"),
];

async fn post(s: &GatewayServer, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
    let response = Client::new()
        .post(s.url(path))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("the gateway answers");
    let status = response.status();
    (status, response.json().await.expect("a JSON body"))
}

/// `EVAL script 0` with the token.
async fn eval(s: &GatewayServer, script: &str) -> (StatusCode, Value) {
    post(s, TOKEN, "/", json!(["EVAL", script, 0])).await
}

fn error_of(entry: &Value) -> &str {
    entry["error"]
        .as_str()
        .unwrap_or_else(|| panic!("an error: {entry}"))
}

/// `keep` is still there, and Redis's maxmemory untouched.
fn data_stays(s: &GatewayServer) {
    assert_eq!(s.get("keep").as_deref(), Some("me"));
    let maxmemory = s.redis.command(&["CONFIG", "GET", "maxmemory"]).unwrap();
    assert_eq!(
        maxmemory,
        Reply::Array(vec![
            Reply::Bulk(b"maxmemory".to_vec()),
            Reply::Bulk(b"0".to_vec())
        ])
    );
}

#[tokio::test]
async fn scripts_cannot_call_what_the_allow_list_refuses() {
    let s = common::start_with_defaults(|_| {}).await;
    s.redis.command(&["SET", "keep", "me"]).unwrap();
    for (name, script) in REFUSED {
        // Refused directly, as before.
        let (status, body) = post(&s, TOKEN, "/", json!([name])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        // Refused from a script: EVAL.
        let (status, body) = eval(&s, script).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}: {body}");
        let error = error_of(&body);
        assert!(
            error.contains("can't run this command") || error.contains("not allowed from script"),
            "{name}: {error}"
        );
        // SCRIPT LOAD then EVALSHA, in a pipeline; EVAL in a transaction.
        let sha = s
            .redis
            .command(&["SCRIPT", "LOAD", script])
            .unwrap()
            .text()
            .unwrap();
        let (_, body) = post(
            &s,
            TOKEN,
            "/pipeline",
            json!([["EVALSHA", sha, 0], ["GET", "keep"]]),
        )
        .await;
        assert!(error_of(&body[0]).contains("script"), "{name}: {body}");
        assert_eq!(body[1], json!({"result": "me"}));
        let (_, body) = post(&s, TOKEN, "/multi-exec", json!([["EVAL", script, 0]])).await;
        assert!(error_of(&body[0]).contains("script"), "{name}: {body}");
        // The read-only token's EVAL_RO is held to the same list.
        let (status, _) = post(&s, READ_ONLY, "/", json!(["EVAL_RO", script, 0])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{name}");
        data_stays(&s);
    }
    // What the allow-list allows, scripts may call.
    let (status, body) = post(
        &s,
        TOKEN,
        "/",
        json!([
            "EVAL",
            "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])",
            1,
            "n",
            5
        ]),
    )
    .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"result": "5"})));
}

/// A gateway on database 3 of a fresh Redis whose database 0 holds `keep`.
async fn on_database_3(
    configure: impl FnOnce(&mut edgelimit_gateway::Config),
) -> (RedisServer, Gateway) {
    let redis = RedisServer::start();
    redis.command(&["SET", "keep", "me"]).unwrap();
    let mut config = gateway::config(format!("redis://127.0.0.1:{}/3", redis.port()), TOKEN);
    configure(&mut config);
    let gateway = Gateway::start(config).await.expect("gateway starts");
    (redis, gateway)
}

#[tokio::test]
async fn a_database_in_the_url_is_the_only_one_scripts_reach() {
    let (redis, gateway) = on_database_3(|_| {}).await;
    let url = |path: &str| format!("http://{}{path}", gateway.local_addr());
    let send = |body: Value| {
        let request = Client::new().post(url("/")).bearer_auth(TOKEN).json(&body);
        async move {
            let response = request.send().await.expect("the gateway answers");
            let status = response.status();
            (status, response.json::<Value>().await.expect("a JSON body"))
        }
    };
    // Commands run on database 3: database 0's key is not there, and what they write is not in 0.
    assert_eq!(
        send(json!(["SET", "three", "x"])).await,
        (StatusCode::OK, json!({"result": "OK"}))
    );
    assert_eq!(
        send(json!(["GET", "keep"])).await,
        (StatusCode::OK, json!({"result": null}))
    );
    assert_eq!(redis.command(&["GET", "three"]).unwrap(), Reply::Nil);
    // A script may select its own database (a no-op), and no other.
    let own = "redis.call('SELECT', '3') return redis.call('GET', 'three')";
    assert_eq!(
        send(json!(["EVAL", own, 0])).await,
        (StatusCode::OK, json!({"result": "x"}))
    );
    for other in ["0", "1", "03"] {
        let script = format!("redis.call('SELECT', '{other}') return redis.call('GET', 'keep')");
        let (status, body) = send(json!(["EVAL", script, 0])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "SELECT {other}: {body}");
        assert!(
            error_of(&body).contains("can't run this command"),
            "SELECT {other}: {body}"
        );
    }
    // Nor directly, nor any command that crosses over.
    for crossing in [
        json!(["SELECT", "0"]),
        json!(["SELECT", "3"]),
        json!(["SWAPDB", "0", "3"]),
        json!(["MOVE", "three", "0"]),
        json!(["COPY", "three", "copied", "DB", "0"]),
    ] {
        let (status, body) = send(crossing.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{crossing}: {body}");
        assert!(
            error_of(&body).contains("is not allowed"),
            "{crossing}: {body}"
        );
    }
    for crossing in [
        "return redis.call('SWAPDB', '0', '3')",
        "return redis.call('MOVE', 'three', '0')",
        "return redis.call('COPY', 'three', 'copied', 'DB', '0')",
    ] {
        let (status, body) = send(json!(["EVAL", crossing, 0])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{crossing}: {body}");
    }
    assert_eq!(
        redis.command(&["GET", "keep"]).unwrap().text().as_deref(),
        Some("me")
    );
    assert_eq!(redis.command(&["GET", "copied"]).unwrap(), Reply::Nil);
    gateway.shutdown().await;
}

#[tokio::test]
async fn commands_reaching_another_database_cannot_be_allowed() {
    for never in ["SELECT", "swapdb", "MOVE", "COPY", "FLUSHALL"] {
        // Refused before Redis is reached: none needs to listen there.
        let mut config = gateway::config("redis://127.0.0.1:1/", TOKEN);
        config.allowed.insert(never.to_string());
        let error = Gateway::start(config).await.expect_err("refused at start");
        assert!(
            matches!(error, GatewayError::NeverAllowed { .. }),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(&format!("`{never}` cannot be allowed")),
            "{text}"
        );
    }
}

#[tokio::test]
async fn configured_commands_are_allowed_inside_scripts_too() {
    let s = common::start(|c| {
        c.allowed.insert("KEYS".into());
    })
    .await;
    s.redis.command(&["SET", "keep", "me"]).unwrap();
    let (status, body) = eval(&s, "return redis.call('KEYS', '*')").await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"result": ["keep"]}))
    );
    let (status, _) = eval(&s, "return redis.call('FLUSHALL')").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    data_stays(&s);
}

#[tokio::test]
async fn without_the_acl_a_script_escapes_which_is_why_it_is_on() {
    let s = common::start(|c| c.redis_acl = RedisAcl::Off).await;
    s.redis.command(&["SET", "keep", "me"]).unwrap();
    let (status, body) = eval(&s, "return redis.call('FLUSHALL')").await;
    assert_eq!((status, body), (StatusCode::OK, json!({"result": "OK"})));
    assert_eq!(s.get("keep"), None, "the data is gone");
}

#[tokio::test]
async fn the_acl_user_is_made_again_when_a_restarted_redis_forgot_it() {
    let mut s = common::start(|_| {}).await;
    let script = json!(["EVAL", "return redis.call('INCR', KEYS[1])", 1, "n"]);
    assert_eq!(
        post(&s, TOKEN, "/", script.clone()).await.1,
        json!({"result": 1})
    );
    s.redis.restart();
    assert_eq!(
        s.redis
            .command(&["ACL", "GETUSER", "edgelimit-gateway"])
            .unwrap(),
        Reply::Nil,
        "the restarted Redis has no such user"
    );
    let mut answered = None;
    for _ in 0..50 {
        let (status, body) = post(&s, TOKEN, "/", script.clone()).await;
        if status == StatusCode::OK {
            answered = Some(body);
            break;
        }
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        answered,
        Some(json!({"result": 1})),
        "served again, by itself"
    );
    assert_ne!(
        s.redis
            .command(&["ACL", "GETUSER", "edgelimit-gateway"])
            .unwrap(),
        Reply::Nil
    );
    // And the boundary holds on the new connections.
    let (status, _) = eval(&s, "return redis.call('FLUSHALL')").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(s.get("n").as_deref(), Some("1"));
}

#[tokio::test]
async fn a_redis_user_without_acl_rights_is_a_clear_error_at_start() {
    let redis = RedisServer::start();
    redis
        .command(&[
            "ACL", "SETUSER", "app", "on", ">app-pw", "~*", "+@all", "-acl",
        ])
        .unwrap();
    let url = format!("redis://app:app-pw@127.0.0.1:{}/", redis.port());
    let config = gateway::config(url.clone(), TOKEN);
    let error = Gateway::start(config)
        .await
        .expect_err("no right to ACL SETUSER");
    assert!(matches!(error, GatewayError::Acl(_)), "{error:?}");
    let text = error.to_string();
    for part in ["edgelimit-gateway", "no permissions", "--redis-acl off"] {
        assert!(text.contains(part), "{part}: {text}");
    }
    assert!(!text.contains("app-pw"), "{text}");
    // With the boundary off, that user is served as it is.
    let mut config = gateway::config(url, TOKEN);
    config.redis_acl = RedisAcl::Off;
    Gateway::start(config)
        .await
        .expect("starts")
        .shutdown()
        .await;
}

#[tokio::test]
async fn allowed_commands_this_redis_does_not_know_are_left_out_of_the_acl() {
    let s = common::start(|c| {
        c.allowed.insert("NOSUCHCOMMAND".into());
    })
    .await;
    let (status, body) = post(&s, TOKEN, "/", json!(["NOSUCHCOMMAND"])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).contains("unknown command"), "{body}");
    assert_eq!(
        post(&s, TOKEN, "/", json!(["PING"])).await.1,
        json!({"result": "PONG"})
    );
}
