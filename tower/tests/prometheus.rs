//! The alert rules and the dashboard of `ops/` against a real Prometheus (Debian's `prometheus`
//! and `promtool`, installed by scripts/setup.d/prometheus.sh): `promtool test rules` runs the
//! rules' cases; then a Prometheus of the test's own, on a free loopback port, scrapes the tower
//! layer (its store the REST store through the gateway, before a throwaway redis-server) and the
//! gateway, both behind their metrics tokens, while a bounded load of clients runs through the
//! layer; every rule must load and evaluate, and every query of every dashboard panel must
//! return data.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use axum::routing::get;
use axum::Router;
use edgelimit_gateway::MetricsPage;
use edgelimit_testkit::dir::{repo_root, TempDir};
use edgelimit_testkit::net::{free_port, loopback_listener};
use edgelimit_testkit::GatewayServer;
use edgelimit_tower::{Builder, ConfigBuilder, LimitBuilder, RuleBuilder};
use serde_json::Value;

const GATEWAY_TOKEN: &str = "prometheus-test-gateway-token-5c1e9a0b7d3f";
const TOWER_METRICS_TOKEN: &str = "prometheus-test-tower-metrics-token-8e2d4c6a";
/// Distinct API keys the load's clients send.
const CLIENTS: usize = 8;
/// Each client's quota a minute: the load runs past it, so the limit denies.
const PER_KEY: u64 = 30;
/// The load's bound: at most this many requests through the layer, or this long.
const MAX_REQUESTS: usize = 3_000;
const MAX_LOAD: Duration = Duration::from_secs(40);

/// A program `scripts/test` installs (scripts/setup.d/prometheus.sh), by its path.
fn program(name: &str) -> PathBuf {
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        let path = Path::new(dir).join(name);
        if path.is_file() {
            return path;
        }
    }
    panic!(
        "`{name}` is not installed: scripts/setup.d/prometheus.sh installs it (apt `prometheus`)"
    )
}

/// A Prometheus process, killed when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Prometheus {
    /// Starts Prometheus scraping `tower` and `gateway` every second, with the alert rules,
    /// on a free loopback port (another tried when it is taken); waits until it is ready.
    fn start(tower: SocketAddr, gateway: SocketAddr) -> Prometheus {
        let dir = TempDir::new("edgelimit-prometheus");
        let rules = repo_root().join("ops/prometheus/edgelimit-alerts.yml");
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {rules}\n\
             scrape_configs:\n\
             \x20 - job_name: tower\n    metrics_path: /metrics\n\
             \x20   authorization:\n      credentials: {TOWER_METRICS_TOKEN}\n\
             \x20   static_configs:\n      - targets: ['{tower}']\n\
             \x20 - job_name: gateway\n    metrics_path: /metrics\n\
             \x20   authorization:\n      credentials: {GATEWAY_TOKEN}\n\
             \x20   static_configs:\n      - targets: ['{gateway}']\n",
            rules = rules.display()
        );
        let config = dir.write("prometheus.yml", &config);
        let binary = program("prometheus");
        for _ in 0..5 {
            let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
            let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
            let mut child = Command::new(&binary)
                .arg(format!("--config.file={}", config.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("prometheus starts");
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                if http_get(addr, "/-/ready").is_some_and(|(status, _)| status == 200) {
                    return Prometheus {
                        child,
                        addr,
                        _dir: dir,
                    };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
            if !log.contains("address already in use") {
                panic!("prometheus did not start on {addr}:\n{log}");
            }
        }
        panic!("prometheus found its port taken five times in a row");
    }

    /// The API's answer to the instant query `query`: its `data`.
    fn query(&self, query: &str) -> Value {
        let encoded: String = form_urlencoded::byte_serialize(query.as_bytes()).collect();
        let (status, body) = http_get(self.addr, &format!("/api/v1/query?query={encoded}"))
            .expect("prometheus answers");
        let answer: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!(status, 200, "{query}: {body}");
        assert_eq!(answer["status"], "success", "{query}: {body}");
        answer["data"].clone()
    }

    /// The API's `path`, as JSON.
    fn api(&self, path: &str) -> Value {
        let (status, body) = http_get(self.addr, path).expect("prometheus answers");
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    }
}

/// `GET path` on `addr` over a fresh HTTP/1.1 connection (std only: the test's Prometheus is
/// polled from a plain thread): the status and the body; `None` when nothing answers.
fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).ok()?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Some((status, body))
}

/// A chunked body's chunks, joined.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

/// Serves `/api/*` ("ok") behind the layer, its store the gateway's REST store, on a free
/// loopback port.
async fn serve_tower(gateway: &GatewayServer) -> SocketAddr {
    let config = ConfigBuilder::new()
        .metrics_path("/metrics")
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(
                    LimitBuilder::new("per-key", format!("fixed {PER_KEY}/1m"))
                        .identifier("api-key:header:x-api-key"),
                )
                .limit(LimitBuilder::new("per-ip", "fixed 100000/1m")),
        )
        .build()
        .unwrap();
    let layer = Builder::new(config)
        .metrics_token(TOWER_METRICS_TOKEN)
        .build(gateway.rest_store())
        .unwrap();
    let app = Router::new()
        .route("/api/{*rest}", get(|| async { "ok" }))
        .layer(layer);
    let listener = loopback_listener().await;
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}

/// Every query of every panel of the dashboard, with the panel's title.
fn panel_queries() -> Vec<(String, String)> {
    let path = repo_root().join("ops/grafana/edgelimit-dashboard.json");
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().unwrap().to_string();
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title} has no query");
        for target in targets {
            // Grafana's `$__rate_interval`: at least four scrapes, here a second apart.
            let expr = target["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "15s");
            queries.push((title.clone(), expr));
        }
    }
    queries
}

/// The per-key limit's denials as Prometheus last scraped them from tower, labelled by limit.
fn per_key_denied(prometheus: &Prometheus) -> Option<f64> {
    let denied = prometheus
        .query("sum by (limit) (edgelimit_decisions_total{job=\"tower\",outcome=\"denied\"})");
    denied["result"]
        .as_array()?
        .iter()
        .find(|s| s["metric"]["limit"] == "per-key")
        .and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok())
}

/// Whether an instant query's result has a sample with a number (not NaN).
fn has_data(data: &Value) -> bool {
    let samples: Vec<&Value> = match data["resultType"].as_str() {
        Some("vector") => data["result"]
            .as_array()
            .map(|r| r.iter().map(|s| &s["value"]).collect())
            .unwrap_or_default(),
        Some("scalar") => vec![&data["result"]],
        _ => Vec::new(),
    };
    samples.iter().any(|value| {
        value[1]
            .as_str()
            .and_then(|v| v.parse::<f64>().ok())
            .is_some_and(|v| !v.is_nan())
    })
}

#[test]
fn the_alert_rules_pass_their_promtool_cases() {
    let dir = repo_root().join("ops/prometheus");
    let output = Command::new(program("promtool"))
        .args(["test", "rules", "edgelimit-alerts.test.yml"])
        .current_dir(&dir)
        .output()
        .expect("promtool runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{text}");
    assert!(text.contains("SUCCESS"), "{text}");
    let cases = std::fs::read_to_string(dir.join("edgelimit-alerts.test.yml")).unwrap();
    let checked = cases.matches("alertname:").count();
    let rules = std::fs::read_to_string(dir.join("edgelimit-alerts.yml")).unwrap();
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    // Every alert has a case that expects it to fire.
    for alert in &alerts {
        assert!(
            cases.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          -"
            )),
            "no case of {alert} expects it to fire"
        );
    }
    println!(
        "promtool: {checked} alert checks over {} alerts passed",
        alerts.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_tower_and_the_gateway_and_every_panel_has_data() {
    let gateway = GatewayServer::start_with(GATEWAY_TOKEN, |config| {
        config.metrics = MetricsPage::Token;
    })
    .await;
    let tower = serve_tower(&gateway).await;
    let gateway_addr = gateway.addr();
    let prometheus = tokio::task::spawn_blocking(move || Prometheus::start(tower, gateway_addr))
        .await
        .unwrap();

    // The load: clients in turn, a few requests a round, until every panel has data or the
    // bound is reached.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
            let started = Instant::now();
            let mut sent = 0;
            while sent < MAX_REQUESTS
                && started.elapsed() < MAX_LOAD
                && !stop.load(std::sync::atomic::Ordering::Relaxed)
            {
                for client_number in 0..CLIENTS {
                    let status = client
                        .get(format!("http://{tower}/api/items"))
                        .header("x-api-key", format!("client-{client_number}"))
                        .send()
                        .await
                        .expect("the layer answers")
                        .status()
                        .as_u16();
                    *statuses.entry(status).or_default() += 1;
                    sent += 1;
                }
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
            statuses
        })
    };

    let queries = panel_queries();
    let checked = tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + MAX_LOAD;
        loop {
            let missing: Vec<&(String, String)> = queries
                .iter()
                .filter(|(_, expr)| !has_data(&prometheus.query(expr)))
                .collect();
            // A panel of denials has data (a zero) before any denial: the load also goes on
            // until Prometheus has scraped one, however slowly a loaded machine sends it.
            let denied = per_key_denied(&prometheus);
            if missing.is_empty() && denied.is_some_and(|n| n > 0.0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "panels without data: {missing:#?}; per-key denials scraped: {denied:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        (prometheus, queries)
    });
    let (prometheus, queries) = checked.await.unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = load.await.unwrap();
    assert!(statuses.get(&200).is_some_and(|n| *n > 0), "{statuses:?}");
    assert!(statuses.get(&429).is_some_and(|n| *n > 0), "{statuses:?}");

    let prometheus = tokio::task::spawn_blocking(move || {
        // Both targets scraped, as the text format they are served in.
        let targets = prometheus.api("/api/v1/targets");
        let active = targets["data"]["activeTargets"].as_array().unwrap();
        assert_eq!(active.len(), 2, "{targets}");
        for target in active {
            assert_eq!(target["health"], "up", "{target}");
        }
        // Every rule loaded and evaluated without error.
        let rules = prometheus.api("/api/v1/rules");
        let evaluated: Vec<&Value> = rules["data"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap())
            .collect();
        assert_eq!(evaluated.len(), 11, "{rules}");
        for rule in &evaluated {
            assert_eq!(rule["health"], "ok", "{rule}");
        }
        // The limit denied: its share is on the dashboard's panel, labelled by limit.
        let per_key = per_key_denied(&prometheus);
        assert!(per_key.is_some_and(|n| n > 0.0), "{per_key:?}");
        // The gateway served the layer's store calls.
        let served = prometheus
            .query("sum(edgelimit_gateway_http_requests_total{job=\"gateway\",status=\"200\"})");
        assert!(has_data(&served), "{served}");
        prometheus
    })
    .await
    .unwrap();
    drop(prometheus);
    println!(
        "prometheus: {} panel queries returned data; load {statuses:?}",
        queries.len()
    );
}
