//! Added latency of the Worker: the same origin hit directly, through `wrangler dev` with no
//! matching rule (the runtime's own cost), and through `wrangler dev` deciding one and two limits
//! against Redis via the gateway (one `/pipeline` round trip). Sequential requests on loopback
//! after a warm-up; prints p50/p99 and the added latency against the direct baseline measured in
//! the same run. Needs the built Worker (scripts/build-worker) and wrangler.
//!
//! `cargo bench -p edgelimit-worker --bench edge_latency [-- --requests N]`

// Native only: the stack it measures (wrangler, Redis, the gateway) runs on the host.
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main()
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::time::{Duration, Instant};

    use edgelimit_testkit::edge::Stack;

    const CONFIG: &str = r#"
    timeout_ms = 1000
    log_sample = 0.0
    [[vars.EDGELIMIT_CONFIG.rules]]
    name = "one"
    path_prefix = "/one/"
    limits = [{ name = "one", policy = "gcra 1000000/1s", identifier = "header:x-user" }]
    [[vars.EDGELIMIT_CONFIG.rules]]
    name = "two"
    path_prefix = "/two/"
    limits = [
      { name = "two-a", policy = "gcra 1000000/1s", identifier = "header:x-user" },
      { name = "two-b", policy = "sliding-counter 100000000/1h", identifier = "ip" },
    ]
    "#;

    fn percentile(sorted: &[Duration], p: f64) -> Duration {
        let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[i]
    }

    async fn measure(stack: &Stack, url: &str, n: usize) -> (Duration, Duration) {
        for _ in 0..n / 10 {
            let _ = stack.http.get(url).header("x-user", "bench").send().await;
        }
        let mut took = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            let r = stack
                .http
                .get(url)
                .header("x-user", "bench")
                .send()
                .await
                .expect("answer");
            assert!(r.status().is_success(), "{url}: {}", r.status());
            let _ = r.bytes().await;
            took.push(started.elapsed());
        }
        took.sort();
        (percentile(&took, 0.5), percentile(&took, 0.99))
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        if args.iter().any(|a| a == "--list") {
            println!("edge_latency: bench");
            return;
        }
        if edgelimit_testkit::wrangler::built_worker().is_none() {
            eprintln!("edge_latency: the Worker is not built; run scripts/build-worker first");
            return;
        }
        let n = args
            .iter()
            .position(|a| a == "--requests")
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1000);
        let runtime = tokio::runtime::Runtime::new().expect("tokio");
        runtime.block_on(async {
            let stack = Stack::start(CONFIG).await;
            let origin = format!("http://{}/direct", stack.origin);
            let worker = stack.worker.url();
            let rows = [
                ("origin, direct", origin),
                ("wrangler dev, no rule", format!("{worker}/none")),
                ("wrangler dev, 1 limit", format!("{worker}/one/x")),
                ("wrangler dev, 2 limits", format!("{worker}/two/x")),
            ];
            println!(
                "{n} sequential requests per row, loopback, after {} warm-up",
                n / 10
            );
            println!("| path | p50 ms | p99 ms | added p50 ms | added p99 ms |");
            println!("|---|---|---|---|---|");
            let mut base = None;
            for (name, url) in rows {
                let (p50, p99) = measure(&stack, &url, n).await;
                let (b50, b99) = *base.get_or_insert((p50, p99));
                let ms = |d: Duration| d.as_secs_f64() * 1000.0;
                println!(
                    "| {name} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    ms(p50),
                    ms(p99),
                    ms(p50) - ms(b50),
                    ms(p99) - ms(b99)
                );
            }
        });
    }
}
