//! The Upstash REST protocol, row by row, against a real redis-server behind the gateway. The
//! rows use Redis at large (`INCR`, `RPUSH`, …): the gateway allows what the official Upstash
//! clients send besides the limiter's own commands, as an operator serving them would.

use std::time::Duration;

use edgelimit_gateway::config::UPSTASH_CLIENT_COMMANDS;
use edgelimit_gateway::{Config, Gateway};
use edgelimit_testkit::{GatewayServer, RedisServer};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

const TOKEN: &str = "test-token-0123456789";
const READ_ONLY: &str = "read-only-token-98765";

struct Setup {
    redis: RedisServer,
    gateway: Gateway,
    http: Client,
}

impl Setup {
    async fn start() -> Setup {
        Setup::start_with(|_| {}).await
    }

    async fn start_with(configure: impl FnOnce(&mut Config)) -> Setup {
        let GatewayServer { redis, gateway, .. } = GatewayServer::start_with(TOKEN, |config| {
            config.read_only_token = Some(READ_ONLY.into());
            config
                .allowed
                .extend(UPSTASH_CLIENT_COMMANDS.iter().map(|c| c.to_string()));
            config.max_body_bytes = 64 * 1024;
            config.max_pipeline = 50;
            configure(config);
        })
        .await;
        Setup {
            redis,
            gateway,
            http: Client::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.gateway.local_addr())
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(
            self.http
                .post(self.url(path))
                .bearer_auth(TOKEN)
                .json(&body),
        )
        .await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (StatusCode, Value) {
        let response = request.send().await.expect("gateway answers");
        let status = response.status();
        assert!(
            response.headers().contains_key("upstash-sync-token")
                || status == StatusCode::METHOD_NOT_ALLOWED,
            "every answer carries upstash-sync-token"
        );
        let text = response.text().await.unwrap();
        let body: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("every body is JSON ({e}): {text}"));
        (status, body)
    }
}

#[tokio::test]
async fn single_commands_take_strings_numbers_and_booleans() {
    let s = Setup::start().await;
    assert_eq!(
        s.post("/", json!(["SET", "k", 42])).await,
        (StatusCode::OK, json!({"result": "OK"}))
    );
    assert_eq!(
        s.post("/", json!(["GET", "k"])).await,
        (StatusCode::OK, json!({"result": "42"}))
    );
    assert_eq!(
        s.post("/", json!(["INCRBY", "k", 8])).await,
        (StatusCode::OK, json!({"result": 50}))
    );
    assert_eq!(
        s.post("/", json!(["SET", "b", true])).await.1,
        json!({"result": "OK"})
    );
    assert_eq!(
        s.post("/", json!(["GET", "b"])).await.1,
        json!({"result": "true"})
    );
    assert_eq!(
        s.post("/", json!(["GET", "missing"])).await.1,
        json!({"result": null})
    );
    s.post("/", json!(["RPUSH", "l", "a", "b"])).await;
    assert_eq!(
        s.post("/", json!(["LRANGE", "l", 0, -1])).await.1,
        json!({"result": ["a", "b"]})
    );
}

#[tokio::test]
async fn the_path_form_takes_a_post_body_as_its_last_argument() {
    let s = Setup::start().await;
    let get = |p: &str| s.send(s.http.get(s.url(p)).bearer_auth(TOKEN));
    assert_eq!(
        get("/set/foo/bar/EX/100").await,
        (StatusCode::OK, json!({"result": "OK"}))
    );
    assert_eq!(get("/get/foo").await.1, json!({"result": "bar"}));
    let ttl = get("/ttl/foo").await.1["result"].as_i64().unwrap();
    assert!((1..=100).contains(&ttl));
    let (status, body) = s
        .send(
            s.http
                .post(s.url("/set/doc"))
                .bearer_auth(TOKEN)
                .body("a body {with} /slashes/"),
        )
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"result": "OK"})));
    assert_eq!(
        get("/get/doc").await.1,
        json!({"result": "a body {with} /slashes/"})
    );
}

#[tokio::test]
async fn pipelines_answer_per_command_and_errors_stay_verbatim() {
    let s = Setup::start().await;
    let (status, body) = s
        .post(
            "/pipeline",
            json!([
                ["SET", "s", "text"],
                ["INCR", "s"],
                ["GET", "s"],
                ["EVALSHA", "0000000000000000000000000000000000000000", 0]
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body[0], json!({"result": "OK"}));
    assert_eq!(
        body[1],
        json!({"error": "ERR value is not an integer or out of range"})
    );
    assert_eq!(body[2], json!({"result": "text"}));
    assert!(
        body[3]["error"].as_str().unwrap().starts_with("NOSCRIPT"),
        "{body}"
    );
    // A single command's error is a 400 with the same verbatim text.
    let (status, body) = s.post("/", json!(["INCR", "s"])).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "ERR value is not an integer or out of range"})
        )
    );
}

#[tokio::test]
async fn multi_exec_is_atomic_and_a_queue_time_rejection_is_one_error() {
    let s = Setup::start().await;
    let (status, body) = s
        .post(
            "/multi-exec",
            json!([["SET", "m", 1], ["INCR", "m"], ["GET", "m"]]),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        body,
        json!([{"result": "OK"}, {"result": 2}, {"result": "2"}])
    );
    // Wrong arity is refused while queueing: nothing runs, one error, 400.
    let (status, body) = s
        .post(
            "/multi-exec",
            json!([["SET", "m", 10], ["SET", "only-a-key"]]),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("wrong number of arguments"),
        "{body}"
    );
    assert_eq!(
        s.post("/", json!(["GET", "m"])).await.1,
        json!({"result": "2"}),
        "nothing ran"
    );
    // A runtime error inside EXEC is that command's entry; the others ran.
    let (_, body) = s
        .post("/multi-exec", json!([["SET", "t", "x"], ["INCR", "t"]]))
        .await;
    assert_eq!(body[0], json!({"result": "OK"}));
    assert!(body[1]["error"].is_string());
}

#[tokio::test]
async fn base64_encodes_strings_but_not_ok_integers_nulls_or_errors() {
    let s = Setup::start().await;
    let b64 = |body: Value| {
        s.send(
            s.http
                .post(s.url("/pipeline"))
                .bearer_auth(TOKEN)
                .header("Upstash-Encoding", "base64")
                .header("upstash-sync-token", "7")
                .json(&body),
        )
    };
    let (_, body) = b64(json!([
        ["SET", "e", "héllo"],
        ["GET", "e"],
        ["STRLEN", "e"],
        ["GET", "none"],
        ["INCR", "e"],
        ["PING"],
        ["SCRIPT", "LOAD", "return 1"]
    ]))
    .await;
    assert_eq!(body[0], json!({"result": "OK"}));
    assert_eq!(body[1], json!({"result": "aMOpbGxv"}));
    assert_eq!(body[2], json!({"result": 6}));
    assert_eq!(body[3], json!({"result": null}));
    assert_eq!(
        body[4],
        json!({"error": "ERR value is not an integer or out of range"})
    );
    assert_eq!(body[5], json!({"result": "UE9ORw=="}));
    // The SHA from SCRIPT LOAD is a string like any other: encoded.
    let sha = sha1_hex("return 1");
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(sha);
    assert_eq!(body[6], json!({"result": encoded}));
}

fn sha1_hex(text: &str) -> String {
    // The test recomputes the SHA independently of the gateway's own helper.
    let out = std::process::Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .expect("sha1sum");
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn tokens_are_required_and_a_read_only_token_only_reads() {
    let s = Setup::start().await;
    let (status, body) = s.send(s.http.post(s.url("/")).json(&json!(["PING"]))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body["error"].is_string());
    let (status, _) = s
        .send(
            s.http
                .post(s.url("/"))
                .bearer_auth("wrong")
                .json(&json!(["PING"])),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = s
        .send(
            s.http
                .post(s.url(&format!("/?_token={TOKEN}")))
                .json(&json!(["SET", "q", 1])),
        )
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"result": "OK"})));
    let ro = |body: Value| s.send(s.http.post(s.url("/")).bearer_auth(READ_ONLY).json(&body));
    assert_eq!(
        ro(json!(["GET", "q"])).await,
        (StatusCode::OK, json!({"result": "1"}))
    );
    let (status, body) = ro(json!(["SET", "q", 2])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("`SET` is not allowed"),
        "{body}"
    );
}

#[tokio::test]
async fn bad_requests_get_clear_json_errors() {
    let s = Setup::start().await;
    let raw = |path: &str, body: &'static str| {
        s.send(
            s.http
                .post(s.url(path))
                .bearer_auth(TOKEN)
                .header("content-type", "application/json")
                .body(body),
        )
    };
    let (status, body) = raw("/", "[\"SET\", \"k\"").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("not valid JSON"),
        "{body}"
    );
    let (status, body) = raw("/", "{\"command\": \"GET\"}").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("JSON array"),
        "{body}"
    );
    let (status, body) = s.post("/", json!(["SET", "k", null])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("argument 2 is null"),
        "{body}"
    );
    let (status, body) = s.post("/pipeline", json!([["GET", "a"], "GET"])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].is_string());
    // Unknown endpoints: a path is a command, and unknown commands are refused by name.
    let (status, body) = s
        .send(s.http.get(s.url("/nosuchcommand/x")).bearer_auth(TOKEN))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("NOSUCHCOMMAND"),
        "{body}"
    );
    let (status, body) = s
        .send(s.http.get(s.url("/pipeline")).bearer_auth(TOKEN))
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(body["error"].is_string());
    // Dangerous commands are off unless configured.
    let (status, body) = s.post("/", json!(["FLUSHALL"])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("`FLUSHALL` is not allowed"),
        "{body}"
    );
    let (_, body) = s.post("/", json!(["SCRIPT", "FLUSH"])).await;
    assert!(
        body["error"].as_str().unwrap().contains("SCRIPT FLUSH"),
        "{body}"
    );
    // Limits: body size and pipeline length.
    let big = "x".repeat(70 * 1024);
    let (status, body) = s.post("/", json!(["SET", "big", big])).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(body["error"].as_str().unwrap().contains("65536"), "{body}");
    let long: Vec<Value> = (0..51).map(|_| json!(["PING"])).collect();
    let (status, body) = s.post("/pipeline", Value::Array(long)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["error"].as_str().unwrap().contains("limit of 50"),
        "{body}"
    );
}

#[tokio::test]
async fn configured_commands_are_allowed() {
    let s = Setup::start_with(|c| {
        c.allowed.insert("FLUSHDB".into());
        c.allowed.insert("SCRIPT FLUSH".into());
    })
    .await;
    assert_eq!(
        s.post("/", json!(["FLUSHDB"])).await.1,
        json!({"result": "OK"})
    );
    assert_eq!(
        s.post("/", json!(["SCRIPT", "FLUSH"])).await.1,
        json!({"result": "OK"})
    );
}

#[tokio::test]
async fn upstash_only_script_flags_are_stripped_and_shas_mapped() {
    let s = Setup::start().await;
    let script = "#!lua flags=allow-key-locking\nreturn redis.call('INCR', KEYS[1])";
    let client_sha = sha1_hex(script);
    let (status, body) = s
        .post("/", json!(["EVALSHA", client_sha, 1, "counter"]))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().starts_with("NOSCRIPT"));
    assert_eq!(
        s.post("/", json!(["EVAL", script, 1, "counter"])).await.1,
        json!({"result": 1})
    );
    assert_eq!(
        s.post("/", json!(["EVALSHA", client_sha, 1, "counter"]))
            .await
            .1,
        json!({"result": 2})
    );
    let other = "#!lua flags=allow-key-locking\nreturn 'loaded'";
    let (_, body) = s.post("/", json!(["SCRIPT", "LOAD", other])).await;
    assert_eq!(
        body,
        json!({"result": sha1_hex(other)}),
        "SCRIPT LOAD answers the client's SHA"
    );
    assert_eq!(
        s.post("/", json!(["EVALSHA", sha1_hex(other), 0])).await.1,
        json!({"result": "loaded"})
    );
}

#[tokio::test]
async fn the_gateway_recovers_when_redis_restarts() {
    let mut s = Setup::start().await;
    assert_eq!(
        s.post("/", json!(["SET", "r", 1])).await.1,
        json!({"result": "OK"})
    );
    s.redis.stop();
    let (status, body) = s.post("/", json!(["GET", "r"])).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .contains("redis unavailable"),
        "{body}"
    );
    s.redis.restart();
    let mut answered = false;
    for _ in 0..50 {
        if s.post("/", json!(["PING"])).await == (StatusCode::OK, json!({"result": "PONG"})) {
            answered = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(answered, "the gateway reconnects by itself");
    // The restarted Redis is empty (nothing persisted); the gateway serves it as it is.
    assert_eq!(
        s.post("/", json!(["GET", "r"])).await.1,
        json!({"result": null})
    );
    s.gateway.shutdown().await;
}
