//! The edgelimit Worker against the incumbent: a JS Worker using the official
//! `@upstash/ratelimit` + `@upstash/redis` (`benches/incumbent/`, versions pinned by its
//! `package-lock.json`), both under `wrangler dev`, both against one gateway (metrics on) and
//! one redis-server, with one origin, in one run; and beside them the edgelimit Worker keeping
//! its state in its own Durable Objects (no Redis).
//!
//! Per workload and Worker: p50/p99 latency and the latency added to the origin hit directly;
//! HTTP round trips to the store and Redis commands per request, **counted from the gateway's
//! `/metrics`** before and after each block of requests; for edgelimit its own count of store
//! calls (its `/metrics`); the CPU its `workerd` processes spent (the Worker, its objects and the
//! runtime's proxy, from `/proc`); how many were denied. The Workers take turns in blocks, so a
//! noisy machine slows them alike. Workloads: 0–3 limits per request, all
//! admitted; then denied-heavy ones, where the incumbent's `ephemeralCache` and edgelimit's
//! denial cache answer without the store, and one where a request passes one limit and fails
//! another (the incumbent still charges the passing limit: counted with a probe request).
//!
//! Installs what it lacks: the Worker toolchain and build (`scripts/build-worker`) and the
//! fixture's packages (`npm ci` with the repo's pinned node). Results: `docs/performance.md`.
//!
//! `cargo bench -p edgelimit-worker --bench edge_vs_incumbent [-- --requests N]`

// Native only: the stack it measures (wrangler, Redis, the gateway) runs on the host.
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main()
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::path::{Path, PathBuf};
    use std::process::Command;
    use std::time::{Duration, Instant};

    use edgelimit_gateway::{Gateway, MetricsPage};
    use edgelimit_testkit::dir::repo_root;
    use edgelimit_testkit::edge::{durable_vars, worker_vars, METRICS_TOKEN, TOKEN};
    use edgelimit_testkit::metrics::{scrape, Samples};
    use edgelimit_testkit::origin::start_origin;
    use edgelimit_testkit::wrangler::built_worker;
    use edgelimit_testkit::{gateway, sf, RedisServer, WranglerDev};
    use reqwest::Client;

    /// Requests per turn: each Worker serves this many, then the other.
    const BLOCK: usize = 50;
    /// Distinct users, teams and keys the requests rotate through.
    const USERS: usize = 20;
    const TEAMS: usize = 5;

    #[derive(Clone, Copy)]
    enum Algorithm {
        Fixed,
        Sliding,
        TokenBucket { refill: u64 },
    }

    /// One limit, written for both Workers.
    #[derive(Clone, Copy)]
    struct Spec {
        name: &'static str,
        algorithm: Algorithm,
        /// The quota (the bucket's size for a token bucket).
        limit: u64,
        window_s: u64,
        /// The request header that identifies whose quota.
        header: &'static str,
    }

    impl Spec {
        /// edgelimit's policy: the same algorithm and numbers.
        fn policy(&self) -> String {
            let (limit, w) = (self.limit, self.window_s);
            match self.algorithm {
                Algorithm::Fixed => format!("fixed {limit}/{w}s"),
                Algorithm::Sliding => format!("sliding-counter {limit}/{w}s"),
                Algorithm::TokenBucket { refill } => {
                    format!("token-bucket {refill}/{w}s burst {limit}")
                }
            }
        }

        /// The incumbent's limit (see `incumbent/worker.js`).
        fn incumbent(&self) -> String {
            let (algorithm, refill) = match self.algorithm {
                Algorithm::Fixed => ("fixed", 0),
                Algorithm::Sliding => ("sliding", 0),
                Algorithm::TokenBucket { refill } => ("token-bucket", refill),
            };
            format!(
                r#"{{"name":"{}","algorithm":"{algorithm}","limit":{},"refill":{refill},"window":"{} s","header":"{}"}}"#,
                self.name, self.limit, self.window_s, self.header
            )
        }
    }

    const BIG: u64 = 100_000_000;
    fn user(name: &'static str, limit: u64) -> Spec {
        Spec {
            name,
            algorithm: Algorithm::Sliding,
            limit,
            window_s: 3600,
            header: "x-user",
        }
    }
    fn team(name: &'static str, limit: u64) -> Spec {
        Spec {
            name,
            algorithm: Algorithm::Fixed,
            limit,
            window_s: 3600,
            header: "x-team",
        }
    }
    fn key(name: &'static str) -> Spec {
        Spec {
            name,
            algorithm: Algorithm::TokenBucket { refill: 1_000_000 },
            limit: 1_000_000,
            window_s: 1,
            header: "x-key",
        }
    }

    /// A path prefix and the limits on it.
    struct Rule {
        prefix: &'static str,
        limits: Vec<Spec>,
        /// The incumbent awaits its limits one by one (edgelimit has no such mode: it skips
        /// these rules and serves the same workload from `edgelimit_prefix`).
        sequential: bool,
    }

    fn rules() -> Vec<Rule> {
        let rule = |prefix, limits, sequential| Rule {
            prefix,
            limits,
            sequential,
        };
        let l2 = vec![user("l2-user", BIG), team("l2-team", BIG)];
        let l3 = vec![user("l3-user", BIG), team("l3-team", BIG), key("l3-key")];
        vec![
            rule("/l1/", vec![user("l1-user", BIG)], false),
            rule("/l2/", l2.clone(), false),
            rule("/s2/", l2, true),
            rule("/l3/", l3.clone(), false),
            rule("/s3/", l3, true),
            // Denied-heavy: one an hour per user, so all but each user's first are denied.
            rule(
                "/d1/",
                vec![team("d1-user", 1).with_header("x-user")],
                false,
            ),
            rule(
                "/d2/",
                vec![
                    team("d2-user", 1).with_header("x-user"),
                    user("d2-team", BIG).with_header("x-team"),
                ],
                false,
            ),
            // The same limit as d2-team alone: one request here reads what /d2/ left of it.
            rule(
                "/p2/",
                vec![user("d2-team", BIG).with_header("x-team")],
                false,
            ),
        ]
    }

    impl Spec {
        fn with_header(mut self, header: &'static str) -> Spec {
            self.header = header;
            self
        }
    }

    /// Where the edgelimit Workers answer their metrics (the store calls they made).
    const METRICS_PATH: &str = "/__edgelimit/metrics";

    fn edgelimit_config(rules: &[Rule]) -> String {
        let mut toml =
            format!("timeout_ms = 1000\nlog_sample = 0.0\nmetrics_path = \"{METRICS_PATH}\"\n");
        for (i, rule) in rules.iter().filter(|r| !r.sequential).enumerate() {
            toml.push_str(&format!(
                "[[vars.EDGELIMIT_CONFIG.rules]]\nname = \"r{i}\"\npath_prefix = \"{}\"\nlimits = [\n",
                rule.prefix
            ));
            for spec in &rule.limits {
                toml.push_str(&format!(
                    "  {{ name = \"{}\", policy = \"{}\", identifier = \"header:{}\" }},\n",
                    spec.name,
                    spec.policy(),
                    spec.header
                ));
            }
            toml.push_str("]\n");
        }
        toml
    }

    fn incumbent_rules(rules: &[Rule]) -> String {
        let rules: Vec<String> = rules
            .iter()
            .map(|r| {
                let limits: Vec<String> = r.limits.iter().map(Spec::incumbent).collect();
                format!(
                    r#"{{"path_prefix":"{}","sequential":{},"limits":[{}]}}"#,
                    r.prefix,
                    r.sequential,
                    limits.join(",")
                )
            })
            .collect();
        format!("[{}]", rules.join(","))
    }

    /// What one Worker did over a workload.
    #[derive(Default)]
    struct Tally {
        took: Vec<Duration>,
        denied: usize,
        round_trips: f64,
        commands: f64,
        by_command: Vec<(String, f64)>,
        /// The Worker's own count of its store calls (edgelimit only).
        store_calls: Option<f64>,
        /// CPU seconds its `workerd` processes spent.
        cpu_s: f64,
    }

    impl Tally {
        fn add_counts(&mut self, before: &Samples, after: &Samples) {
            let delta = |name: &str| after.sum(name) - before.sum(name);
            self.round_trips += delta("edgelimit_gateway_http_requests_total");
            self.commands += delta("edgelimit_gateway_commands_total");
            for (labels, value) in after.series("edgelimit_gateway_commands_total") {
                let name = labels.get("command").cloned().unwrap_or_default();
                let was = before
                    .get("edgelimit_gateway_commands_total", &[("command", &name)])
                    .unwrap_or(0.0);
                if value > was {
                    match self.by_command.iter_mut().find(|(n, _)| *n == name) {
                        Some((_, v)) => *v += value - was,
                        None => self.by_command.push((name, value - was)),
                    }
                }
            }
        }

        fn percentile(&self, p: f64) -> f64 {
            let mut sorted = self.took.clone();
            sorted.sort();
            let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
            sorted[i].as_secs_f64() * 1000.0
        }
    }

    /// A Worker (or the origin) under test.
    struct Target<'a> {
        name: &'static str,
        base: String,
        /// Its `wrangler dev`, for the CPU its `workerd` spends.
        worker: Option<&'a WranglerDev>,
        /// Whether it answers [`METRICS_PATH`] (the edgelimit Workers).
        metrics: bool,
    }

    impl Target<'_> {
        fn cpu_s(&self) -> f64 {
            self.worker.map_or(0.0, WranglerDev::workerd_cpu_seconds)
        }
    }

    struct Bench {
        http: Client,
        metrics_at: String,
    }

    impl Bench {
        fn headers(i: usize) -> [(&'static str, String); 3] {
            [
                ("x-user", format!("u{}", i % USERS)),
                ("x-team", format!("t{}", i % TEAMS)),
                ("x-key", format!("k{}", i % USERS)),
            ]
        }

        async fn get(&self, url: &str, i: usize) -> reqwest::Response {
            let mut request = self.http.get(url);
            for (name, value) in Bench::headers(i) {
                request = request.header(name, value);
            }
            request
                .send()
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"))
        }

        fn counts(&self) -> Samples {
            scrape(&self.metrics_at, None).expect("the gateway's /metrics")
        }

        /// The Worker's own count of its store calls, if it keeps one.
        async fn store_calls(&self, target: &Target<'_>) -> Option<f64> {
            if !target.metrics {
                return None;
            }
            let url = format!("{}{METRICS_PATH}", target.base);
            let request = self.http.get(&url).bearer_auth(METRICS_TOKEN);
            let text = request.send().await.ok()?.text().await.ok()?;
            let samples = Samples::parse(&text).ok()?;
            Some(samples.value("edgelimit_store_latency_seconds_count", &[]))
        }

        /// `n` requests to each target at `path` (per target: its own path), in turns of
        /// [`BLOCK`], after `n / 10` of warm-up each.
        async fn run(&self, targets: &[(&Target<'_>, String)], n: usize) -> Vec<Tally> {
            let mut tallies: Vec<Tally> = targets.iter().map(|_| Tally::default()).collect();
            for (target, path) in targets {
                for i in 0..n / 10 {
                    let r = self.get(&format!("{}{path}", target.base), i).await;
                    let _ = r.bytes().await;
                }
            }
            let mut done = 0;
            while done < n {
                let block = BLOCK.min(n - done);
                for ((target, path), tally) in targets.iter().zip(&mut tallies) {
                    let url = format!("{}{path}", target.base);
                    let before = self.counts();
                    let calls_before = self.store_calls(target).await;
                    let cpu_before = target.cpu_s();
                    for i in done..done + block {
                        let started = Instant::now();
                        let r = self.get(&url, i).await;
                        let status = r.status().as_u16();
                        let _ = r.bytes().await;
                        tally.took.push(started.elapsed());
                        match status {
                            200 => {}
                            429 => tally.denied += 1,
                            other => panic!("{} {url}: status {other}", target.name),
                        }
                    }
                    tally.cpu_s += target.cpu_s() - cpu_before;
                    if let (Some(b), Some(a)) = (calls_before, self.store_calls(target).await) {
                        *tally.store_calls.get_or_insert(0.0) += a - b;
                    }
                    tally.add_counts(&before, &self.counts());
                }
                done += block;
            }
            tallies
        }

        /// The `RateLimit` header's `r` for `limit` after one request to `path`.
        async fn remaining(&self, target: &Target<'_>, path: &str, limit: &str) -> Option<u64> {
            let r = self.get(&format!("{}{path}", target.base), 0).await;
            let header = r.headers().get("ratelimit")?.to_str().ok()?.to_string();
            sf::int_param(&header, limit, "r")
        }
    }

    /// Installs what the bench lacks, as `scripts/test` would: the Worker toolchain and build,
    /// then the fixture's packages with the repo's pinned node.
    fn prepare(fixture: &Path) {
        let root = repo_root();
        if built_worker().is_none() || !root.join("node_modules/.bin/wrangler").exists() {
            eprintln!("edge_vs_incumbent: building the Worker (scripts/build-worker)");
            let ok = Command::new("bash")
                .arg(root.join("scripts/build-worker"))
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "scripts/build-worker failed");
        }
        if !fixture.join("node_modules/@upstash/ratelimit").exists() {
            eprintln!("edge_vs_incumbent: installing the incumbent's packages (npm ci)");
            let path = format!(
                "{}:{}",
                root.join("node_modules/.bin").display(),
                std::env::var("PATH").unwrap_or_default()
            );
            let ok = Command::new("npm")
                .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                .current_dir(fixture)
                .env("PATH", path)
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "npm ci in {} failed", fixture.display());
        }
    }

    fn fixture() -> PathBuf {
        repo_root().join("worker/benches/incumbent")
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        if args.iter().any(|a| a == "--list") {
            println!("edge_vs_incumbent: bench");
            return;
        }
        // `cargo bench` runs every bench target; this one needs `--bench edge_vs_incumbent`.
        if !args.iter().any(|a| a == "--bench") {
            return;
        }
        let n = args
            .iter()
            .position(|a| a == "--requests")
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        let fixture = fixture();
        prepare(&fixture);
        let runtime = tokio::runtime::Runtime::new().expect("tokio");
        runtime.block_on(measure(&fixture, n));
    }

    async fn measure(fixture: &Path, n: usize) {
        let redis = RedisServer::start();
        let mut config = gateway::config(redis.url(), TOKEN);
        config.metrics = MetricsPage::Public;
        // The incumbent, @upstash/ratelimit, sends more than edgelimit's own commands.
        config.allowed.extend(
            edgelimit_gateway::config::UPSTASH_CLIENT_COMMANDS
                .iter()
                .map(|c| c.to_string()),
        );
        let gateway = Gateway::start(config).await.expect("gateway starts");
        let origin = start_origin().await;
        let store = gateway::url(&gateway);
        let rules = rules();
        let edge_vars = worker_vars(origin, &store, TOKEN, &edgelimit_config(&rules));
        let objects_vars = durable_vars(origin, &edgelimit_config(&rules));
        let incumbent_vars = [
            ("ORIGIN".to_string(), format!("http://{origin}")),
            ("UPSTASH_REDIS_REST_URL".to_string(), store.clone()),
            ("UPSTASH_REDIS_REST_TOKEN".to_string(), TOKEN.to_string()),
            ("BENCH_RULES".to_string(), incumbent_rules(&rules)),
        ];
        let config = fixture.join("wrangler.toml");
        let edge = tokio::task::spawn_blocking(move || WranglerDev::start(&edge_vars));
        let incumbent = tokio::task::spawn_blocking(move || {
            let vars: Vec<(&str, &str)> = incumbent_vars
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            WranglerDev::start_project(&config, &vars)
        });
        let objects = tokio::task::spawn_blocking(move || WranglerDev::start(&objects_vars));
        let (edge, incumbent) = (edge.await.unwrap(), incumbent.await.unwrap());
        let objects = objects.await.unwrap();
        let bench = Bench {
            http: Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            metrics_at: gateway.local_addr().to_string(),
        };
        let direct = Target {
            name: "origin, direct",
            base: format!("http://{origin}"),
            worker: None,
            metrics: false,
        };
        let ours = Target {
            name: "edgelimit",
            base: edge.url(),
            worker: Some(&edge),
            metrics: true,
        };
        let in_objects = Target {
            name: "edgelimit, Durable Objects",
            base: objects.url(),
            worker: Some(&objects),
            metrics: true,
        };
        let theirs = Target {
            name: "@upstash/ratelimit",
            base: incumbent.url(),
            worker: Some(&incumbent),
            metrics: false,
        };

        let workloads: [(&str, &[(&Target, &str)]); 6] = [
            (
                "no limit (the runtime alone)",
                &[
                    (&ours, "/none/x"),
                    (&in_objects, "/none/x"),
                    (&theirs, "/none/x"),
                ],
            ),
            (
                "1 limit",
                &[(&ours, "/l1/x"), (&in_objects, "/l1/x"), (&theirs, "/l1/x")],
            ),
            (
                "2 limits",
                &[
                    (&ours, "/l2/x"),
                    (&in_objects, "/l2/x"),
                    (&theirs, "/l2/x"),
                    (&theirs, "/s2/x"),
                ],
            ),
            (
                "3 limits",
                &[
                    (&ours, "/l3/x"),
                    (&in_objects, "/l3/x"),
                    (&theirs, "/l3/x"),
                    (&theirs, "/s3/x"),
                ],
            ),
            (
                "denied-heavy, 1 limit (1/h per user)",
                &[(&ours, "/d1/x"), (&in_objects, "/d1/x"), (&theirs, "/d1/x")],
            ),
            (
                "denied-heavy, 2 limits (1/h per user + per team)",
                &[(&ours, "/d2/x"), (&in_objects, "/d2/x"), (&theirs, "/d2/x")],
            ),
        ];

        println!(
            "{n} sequential requests per Worker and workload (turns of {BLOCK}, after {} warm-up), \
             loopback; {USERS} users, {TEAMS} teams; counts from the gateway's /metrics",
            n / 10
        );
        let baseline = bench.run(&[(&direct, "/direct".to_string())], n).await;
        let (b50, b99) = (baseline[0].percentile(0.5), baseline[0].percentile(0.99));
        println!("\norigin, direct: p50 {b50:.2} ms, p99 {b99:.2} ms\n");
        println!(
            "| workload | Worker | p50 ms | p99 ms | added p50 ms | added p99 ms | added p99 ÷ edgelimit's | \
             store round trips / req | Redis commands / req | commands | Worker's store calls / req | \
             workerd CPU ms / req | denied |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        for (workload, targets) in workloads {
            let targets: Vec<(&Target, String)> =
                targets.iter().map(|(t, p)| (*t, p.to_string())).collect();
            let tallies = bench.run(&targets, n).await;
            let ours_added_p99 = tallies[0].percentile(0.99) - b99;
            for ((target, path), tally) in targets.iter().zip(&tallies) {
                let (p50, p99) = (tally.percentile(0.5), tally.percentile(0.99));
                let label = match (target.name, path.starts_with("/s")) {
                    ("@upstash/ratelimit", true) => "@upstash/ratelimit, sequential awaits",
                    ("@upstash/ratelimit", false) => "@upstash/ratelimit, Promise.all",
                    (name, _) => name,
                };
                let per = tally.took.len() as f64;
                let commands: Vec<String> = tally
                    .by_command
                    .iter()
                    .map(|(c, v)| format!("{c} {:.2}", v / per))
                    .collect();
                println!(
                    "| {workload} | {label} | {p50:.2} | {p99:.2} | {:.2} | {:.2} | {:.2}× | {:.2} | {:.2} | {} | {} | {:.2} | {:.1}% |",
                    p50 - b50,
                    p99 - b99,
                    (p99 - b99) / ours_added_p99,
                    tally.round_trips / per,
                    tally.commands / per,
                    if commands.is_empty() { "—".to_string() } else { commands.join(", ") },
                    tally.store_calls.map_or("—".to_string(), |c| format!("{:.2}", c / per)),
                    1000.0 * tally.cpu_s / per,
                    100.0 * tally.denied as f64 / per,
                );
            }
        }

        // What the denied /d2/ requests took from the per-team limit they passed: one request
        // to /p2/ (that limit alone) reads what is left of it, per Worker.
        let sent_per_team = (n + n / 10) / TEAMS;
        println!(
            "\nThe per-team limit of /d2/ after {} requests per team, nearly all denied by the \
             per-user limit (one /p2/ request reads it; r = remaining after that request):",
            sent_per_team
        );
        for target in [&ours, &in_objects, &theirs] {
            let left = bench.remaining(target, "/p2/x", "d2-team").await;
            match left {
                Some(r) => println!(
                    "- {}: r = {r}, so {} taken before the probe",
                    target.name,
                    BIG - 1 - r
                ),
                None => println!("- {}: no RateLimit header for d2-team", target.name),
            }
        }
        drop((edge, objects, incumbent));
        gateway.shutdown().await;
        drop(redis);
    }
}
