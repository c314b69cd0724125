//! `GET /metrics`: off by default, behind the token unless public, and counting exactly what the
//! requests before a scrape did, against a real redis-server behind the gateway (which allows
//! what the official Upstash clients send, `INCR` and `PING` among them).

use std::collections::BTreeMap;

use edgelimit_gateway::config::UPSTASH_CLIENT_COMMANDS;
use edgelimit_gateway::{Gateway, MetricsPage};
use edgelimit_testkit::{metrics, GatewayServer, RedisServer};
use reqwest::{Client, StatusCode};
use serde_json::{json, Value};

const TOKEN: &str = "metrics-token-0123456789";
const READ_ONLY: &str = "metrics-read-only-98765";
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
const PREFIX: &str = "edgelimit_gateway_";

struct Setup {
    redis: RedisServer,
    gateway: Gateway,
    http: Client,
}

impl Setup {
    async fn start(metrics: MetricsPage) -> Setup {
        let GatewayServer { redis, gateway, .. } = GatewayServer::start_with(TOKEN, |config| {
            config.read_only_token = Some(READ_ONLY.into());
            config
                .allowed
                .extend(UPSTASH_CLIENT_COMMANDS.iter().map(|c| c.to_string()));
            config.metrics = metrics;
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

    async fn status(&self, request: reqwest::RequestBuilder) -> StatusCode {
        let response = request.send().await.expect("gateway answers");
        let status = response.status();
        response.bytes().await.unwrap();
        status
    }

    /// `POST path` with a JSON body and `token` (if any): the status.
    async fn post(&self, path: &str, body: &Value, token: Option<&str>) -> StatusCode {
        let mut request = self.http.post(self.url(path)).json(body);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        self.status(request).await
    }

    /// `GET /metrics` with `token` (if any): the status, the Content-Type and the body.
    async fn scrape(&self, token: Option<&str>) -> (StatusCode, String, String) {
        let mut request = self.http.get(self.url("/metrics"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("gateway answers");
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        (status, content_type, response.text().await.unwrap())
    }

    /// A scrape that must succeed, parsed.
    async fn metrics(&self, token: Option<&str>) -> Samples {
        let (status, content_type, text) = self.scrape(token).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert_eq!(content_type, TEXT_FORMAT);
        assert!(
            text.contains("# TYPE edgelimit_gateway_commands_total counter\n"),
            "a counter's family is named with its _total, as the 0.0.4 format does: {text}"
        );
        Samples::parse(&text)
    }
}

/// The gateway's page: its samples, named here without the `edgelimit_gateway_` prefix.
#[derive(Debug)]
struct Samples(metrics::Samples);

impl Samples {
    fn parse(text: &str) -> Samples {
        Samples(metrics::Samples::parse(text).unwrap_or_else(|e| panic!("{e}")))
    }

    /// The value of `edgelimit_gateway_<name>{labels}`, if exported.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0.get(&format!("{PREFIX}{name}"), labels)
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0.value(&format!("{PREFIX}{name}"), labels)
    }

    /// Every exported series of `edgelimit_gateway_<name>`: its labels and value.
    fn series(&self, name: &str) -> Vec<(&BTreeMap<String, String>, f64)> {
        self.0.series(&format!("{PREFIX}{name}"))
    }
}

/// What the test did, tallied as it went: the values the page must show.
#[derive(Default)]
struct Expected {
    requests: BTreeMap<(&'static str, u16), u64>,
    commands: BTreeMap<String, u64>,
    round_trips: u64,
    redis_errors: u64,
    auth_failures: u64,
}

impl Expected {
    fn request(&mut self, route: &'static str, status: StatusCode) {
        *self.requests.entry((route, status.as_u16())).or_default() += 1;
        match status {
            StatusCode::UNAUTHORIZED => self.auth_failures += 1,
            StatusCode::SERVICE_UNAVAILABLE => self.redis_errors += 1,
            _ => {}
        }
    }

    /// One round trip to Redis that answered these commands.
    fn answered(&mut self, commands: &Value) {
        self.round_trips += 1;
        let list: Vec<&Value> = match commands[0] {
            Value::Array(_) => commands.as_array().unwrap().iter().collect(),
            _ => vec![commands],
        };
        for command in list {
            let name = command[0].as_str().unwrap().to_ascii_uppercase();
            *self.commands.entry(name).or_default() += 1;
        }
    }

    fn check(&self, page: &Samples) {
        // Each route's 200s are on the page from the start, at 0; any other series is one seen.
        let requests: Vec<_> = page
            .series("http_requests_total")
            .into_iter()
            .filter(|(_, value)| *value > 0.0)
            .collect();
        assert_eq!(
            requests.len(),
            self.requests.len(),
            "one series per route and status seen: {requests:?}"
        );
        for ((route, status), count) in &self.requests {
            let status = status.to_string();
            assert_eq!(
                page.value(
                    "http_requests_total",
                    &[("route", route), ("status", &status)]
                ),
                *count as f64,
                "requests {route} {status}"
            );
        }
        let mut other = 0.0;
        for (labels, value) in page.series("commands_total") {
            let name = &labels["command"];
            if name == "other" {
                other = value;
                continue;
            }
            let expected = self.commands.get(name).copied().unwrap_or(0);
            assert_eq!(value, expected as f64, "command {name}");
        }
        assert_eq!(other, 0.0, "every command run here is on the allow-list");
        for name in self.commands.keys() {
            assert!(
                page.get("commands_total", &[("command", name)]).is_some(),
                "{name} has a series"
            );
        }
        let round_trips = self.round_trips as f64;
        assert_eq!(
            page.value("redis_round_trip_seconds_count", &[]),
            round_trips
        );
        assert_eq!(
            page.value("redis_round_trip_seconds_bucket", &[("le", "+Inf")]),
            round_trips
        );
        let sum = page.value("redis_round_trip_seconds_sum", &[]);
        if self.round_trips == 0 {
            assert_eq!(sum, 0.0);
        } else {
            assert!(sum > 0.0 && sum < 10.0 * round_trips, "sum {sum}");
        }
        assert_eq!(
            page.value("redis_errors_total", &[]),
            self.redis_errors as f64
        );
        assert_eq!(
            page.value("auth_failures_total", &[]),
            self.auth_failures as f64
        );
    }
}

/// The round-trip buckets: 100 µs to 1 s, cumulative.
fn check_buckets(page: &Samples) {
    let mut buckets: Vec<(f64, f64)> = page
        .series("redis_round_trip_seconds_bucket")
        .into_iter()
        .map(|(labels, count)| {
            let le = &labels["le"];
            let bound = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (bound, count)
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let bounds: Vec<f64> = buckets.iter().map(|b| b.0).collect();
    assert_eq!(bounds.first(), Some(&0.0001));
    assert_eq!(bounds[bounds.len() - 2], 1.0);
    assert_eq!(bounds.last(), Some(&f64::INFINITY));
    assert!(bounds.len() >= 8, "{bounds:?}");
    assert!(
        buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "cumulative: {buckets:?}"
    );
}

#[tokio::test]
async fn metrics_count_exactly_what_the_requests_did() {
    let mut s = Setup::start(MetricsPage::Token).await;
    let mut expected = Expected::default();

    // Before anything: every series at zero, the command ones made up front.
    let page = s.metrics(Some(TOKEN)).await;
    expected.check(&page);
    assert_eq!(page.value("commands_total", &[("command", "EVALSHA")]), 0.0);

    for body in [
        json!(["SET", "k", 1]),
        json!(["incr", "k"]),
        json!(["GET", "k"]),
    ] {
        assert_eq!(s.post("/", &body, Some(TOKEN)).await, StatusCode::OK);
        expected.request("single", StatusCode::OK);
        expected.answered(&body);
    }
    let pipeline = json!([["INCR", "k"], ["GET", "k"]]);
    assert_eq!(
        s.post("/pipeline", &pipeline, Some(TOKEN)).await,
        StatusCode::OK
    );
    expected.request("pipeline", StatusCode::OK);
    expected.answered(&pipeline);
    let transaction = json!([["INCR", "k"], ["SET", "j", "x"]]);
    assert_eq!(
        s.post("/multi-exec", &transaction, Some(TOKEN)).await,
        StatusCode::OK
    );
    expected.request("multi_exec", StatusCode::OK);
    expected.answered(&transaction);
    assert_eq!(
        s.status(s.http.get(s.url("/get/k")).bearer_auth(TOKEN))
            .await,
        StatusCode::OK
    );
    expected.request("path", StatusCode::OK);
    expected.answered(&json!(["GET", "k"]));
    // Refused by the allow-list: a request, but no command and no round trip.
    assert_eq!(
        s.post("/", &json!(["FLUSHALL"]), Some(TOKEN)).await,
        StatusCode::BAD_REQUEST
    );
    expected.request("single", StatusCode::BAD_REQUEST);
    // No token, a wrong token: 401s.
    assert_eq!(
        s.post("/", &json!(["PING"]), None).await,
        StatusCode::UNAUTHORIZED
    );
    expected.request("single", StatusCode::UNAUTHORIZED);
    assert_eq!(
        s.post("/pipeline", &pipeline, Some("wrong")).await,
        StatusCode::UNAUTHORIZED
    );
    expected.request("pipeline", StatusCode::UNAUTHORIZED);
    // GET on a POST-only route.
    assert_eq!(
        s.status(s.http.get(s.url("/multi-exec")).bearer_auth(TOKEN))
            .await,
        StatusCode::METHOD_NOT_ALLOWED
    );
    expected.request("multi_exec", StatusCode::METHOD_NOT_ALLOWED);

    // The page asks for a token: none or a wrong one is a 401, counted, but not a request of
    // the four routes.
    let (status, _, body) = s.scrape(None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!body.contains(PREFIX), "nothing leaks: {body}");
    expected.auth_failures += 1;
    assert_eq!(s.scrape(Some("wrong")).await.0, StatusCode::UNAUTHORIZED);
    expected.auth_failures += 1;

    let page = s.metrics(Some(TOKEN)).await;
    expected.check(&page);
    check_buckets(&page);
    assert_eq!(page.value("commands_total", &[("command", "INCR")]), 3.0);
    assert_eq!(page.get("commands_total", &[("command", "FLUSHALL")]), None);

    // Redis gone: a 503, a Redis error, and neither a command nor a round trip.
    s.redis.stop();
    assert_eq!(
        s.post("/", &json!(["GET", "k"]), Some(TOKEN)).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    expected.request("single", StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        s.post("/pipeline", &pipeline, Some(TOKEN)).await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    expected.request("pipeline", StatusCode::SERVICE_UNAVAILABLE);

    // The read-only token may scrape too, and the page needs no Redis.
    let page = s.metrics(Some(READ_ONLY)).await;
    expected.check(&page);
    assert_eq!(page.value("redis_errors_total", &[]), 2.0);
    assert_eq!(page.value("auth_failures_total", &[]), 4.0);
    assert_eq!(page.value("redis_round_trip_seconds_count", &[]), 6.0);
    s.gateway.shutdown().await;
}

#[tokio::test]
async fn metrics_are_off_by_default_and_then_metrics_is_a_refused_command() {
    let s = Setup::start(MetricsPage::Off).await;
    for path in ["/metrics", "/nosuchcommand"] {
        let response = s
            .http
            .get(s.url(path))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{path}");
        assert!(response.headers().contains_key("upstash-sync-token"));
        let body: Value = response.json().await.unwrap();
        let name = path[1..].to_ascii_uppercase();
        assert_eq!(
            body,
            json!({"error": format!("ERR command `{name}` is not allowed by this gateway")})
        );
    }
    let (status, content_type, body) = s.scrape(None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    assert!(!body.contains(PREFIX), "{body}");
}

#[tokio::test]
async fn a_public_page_needs_no_token_and_other_methods_stay_commands() {
    let s = Setup::start(MetricsPage::Public).await;
    assert_eq!(
        s.status(s.http.post(s.url("/")).json(&json!(["PING"])))
            .await,
        StatusCode::UNAUTHORIZED
    );
    let page = s.metrics(None).await;
    assert_eq!(page.value("auth_failures_total", &[]), 1.0);
    assert_eq!(
        page.value(
            "http_requests_total",
            &[("route", "single"), ("status", "401")]
        ),
        1.0
    );
    // Only GET is the page: POST /metrics is still the path form of `metrics`.
    let response = s
        .http
        .post(s.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body: Value = response.json().await.unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("`METRICS`"),
        "{body}"
    );
    let page = s.metrics(Some("any token is ignored")).await;
    assert_eq!(
        page.value(
            "http_requests_total",
            &[("route", "path"), ("status", "400")]
        ),
        1.0
    );
    assert_eq!(page.value("auth_failures_total", &[]), 1.0);
}
