//! The Worker's own cost, compiled to wasm32 as deployed (opt-level z, LTO, one codegen unit,
//! `wasm-opt -Oz`) and timed under node: CPU µs and heap allocations per request along the
//! decision path — configuration → rules → plan → the REST `/pipeline` body and the decoding of
//! its answer (`evalsha_pipeline_body`, `decode_pipeline`, as `RestStore` does) behind
//! the `Limiter` and a one-shard `ShardedStore`, as in the Worker → headers and problem body —
//! for 1 and 3 limits, admitted, denied and answered from the denial cache, stage by stage; and
//! the cold start of the real `worker/build` output (`WebAssembly.compile` + instantiate, each
//! in a fresh node process). Only the HTTP exchange is left out: the store's answer is the
//! text Redis would give for these checks, made once.
//!
//! One file, two programs: on wasm32 the probe (exports for `benches/wasm_cpu.mjs`), natively
//! the driver, which builds the probe, runs node and prints the tables. Installs what it lacks
//! through `scripts/build-worker`. Budget: ≤ 0.2 ms per request for 3 limits. Results:
//! `docs/performance.md`.
//!
//! `cargo bench -p edgelimit-worker --bench wasm_cpu [-- --iterations N]`

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    driver::main()
}

/// The probe: the Worker's decision path behind `#[wasm_bindgen]` exports, and a counting
/// allocator so each stage's heap allocations are counted, not guessed.
#[cfg(target_arch = "wasm32")]
mod probe {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::{Cell, RefCell};
    use std::future::Future;
    use std::pin::pin;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    use async_trait::async_trait;
    use edgelimit::limiter::Checked;
    use edgelimit::script::{CheckPlan, Invocation, Topology};
    use edgelimit::store::upstash::{decode_pipeline, evalsha_pipeline_body};
    use edgelimit::store::{Shard, ShardedStore};
    use edgelimit::{Check, Clock, Reason, Store, StoreError, SystemClock, TimeSource, Verdict};
    use edgelimit_engine::reading::FieldValues;
    use edgelimit_engine::{Config, Edge, Incoming, LogLine, Plan, RequestView};
    use wasm_bindgen::prelude::wasm_bindgen;

    /// The system allocator, counting calls and bytes.
    struct Counting;

    thread_local! {
        static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
        static BYTES: Cell<u64> = const { Cell::new(0) };
        static PROBE: RefCell<Option<Probe>> = const { RefCell::new(None) };
    }

    fn count(bytes: usize) {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        BYTES.with(|b| b.set(b.get() + bytes as u64));
    }

    // SAFETY: every call is passed to `System` unchanged; counting touches no allocator state.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count(layout.size());
            System.alloc(layout)
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            System.dealloc(ptr, layout)
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            count(layout.size());
            System.alloc_zeroed(layout)
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count(new_size);
            System.realloc(ptr, layout, new_size)
        }
    }

    #[global_allocator]
    static GLOBAL: Counting = Counting;

    /// Heap allocations (and reallocations) so far.
    #[wasm_bindgen]
    pub fn allocations() -> f64 {
        ALLOCATIONS.with(Cell::get) as f64
    }

    /// Bytes asked of the heap so far.
    #[wasm_bindgen]
    pub fn allocated_bytes() -> f64 {
        BYTES.with(Cell::get) as f64
    }

    /// A request as the Worker's `View` presents it: header values are copied out on each
    /// lookup, as `Headers.get` hands a new string to Rust.
    struct Request {
        headers: Vec<(&'static str, &'static str)>,
    }

    impl RequestView for Request {
        fn method(&self) -> &str {
            "GET"
        }
        fn host(&self) -> &str {
            "api.example.com"
        }
        fn path(&self) -> &str {
            PATH
        }
        fn query(&self, _: &str) -> Option<String> {
            None
        }
        fn query_values(&self, _: &str) -> FieldValues<'_> {
            FieldValues::Absent
        }
        fn header(&self, name: &str) -> Option<String> {
            self.headers
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
        fn header_values(&self, name: &str) -> FieldValues<'_> {
            FieldValues::joined(name, self.header(name).map(std::borrow::Cow::Owned))
        }
    }

    impl Incoming for Request {}

    const PATH: &str = "/api/items/42";

    /// The store: `RestStore::check` without the HTTP exchange — plans, the `/pipeline` body,
    /// then the answer's text decoded into verdicts.
    struct Canned {
        namespace: String,
        answer: String,
        sent: Cell<usize>,
    }

    #[async_trait(?Send)]
    impl Store for Canned {
        async fn check(
            &self,
            checks: &[Check],
            time: TimeSource,
        ) -> Result<Vec<Verdict>, StoreError> {
            let plans = checks
                .iter()
                .map(|c| CheckPlan::new(c, &self.namespace, time, Topology::SingleNode))
                .collect::<Result<Vec<_>, _>>()?;
            let invocations: Vec<&Invocation> =
                plans.iter().flat_map(|p| p.invocations()).collect();
            let body = evalsha_pipeline_body(&invocations)?;
            self.sent.set(self.sent.get() + body.len());
            let mut replies = decode_pipeline(200, &self.answer, invocations.len())?.into_iter();
            plans
                .iter()
                .map(|plan| {
                    let mine: Vec<_> = replies.by_ref().take(plan.invocations().len()).collect();
                    plan.verdict(&mine)
                })
                .collect()
        }
    }

    /// Polls a future that never waits (the canned store answers at once) to its end.
    fn ready<F: Future>(future: F) -> F::Output {
        struct Noop;
        impl Wake for Noop {
            fn wake(self: Arc<Self>) {}
        }
        let waker = Waker::from(Arc::new(Noop));
        let mut context = Context::from_waker(&waker);
        match pin!(future).poll(&mut context) {
            Poll::Ready(output) => output,
            Poll::Pending => panic!("the canned store never waits"),
        }
    }

    struct Probe {
        config_json: String,
        // Leaked (one per scenario) so the probe can keep a `Plan`, which borrows it.
        config: &'static Config,
        request: Request,
        edge: Edge<ShardedStore<Canned>>,
        store: Canned,
        plan: Plan<'static>,
        checks: Vec<Check>,
        checked: Checked,
        invocations: usize,
    }

    const LIMITS: [&str; 3] = [
        r#"{ "name": "per-ip", "policy": "gcra 10/1s burst 20", "identifier": "ip" }"#,
        r#"{ "name": "per-key-daily", "policy": "sliding-counter 10000/day", "identifier": "api-key:header:authorization" }"#,
        r#"{ "name": "per-user", "policy": "fixed 100/1m", "identifier": "header:x-user" }"#,
    ];

    /// The answer Redis gives the multi-limit script (or a single one) for `check`: admitted
    /// with room to spare, or denied by the first limit with the others untouched; a gated
    /// check's answer ends with what each gate found (nothing listed).
    fn answer(check: &Check, now: u64, denied: bool) -> String {
        // allowed, the time the script decided at, then six values per limit.
        let mut values = vec![if denied { 0 } else { 1 }, now as i64];
        for (i, item) in check.items().iter().enumerate() {
            let capacity = item.limit.policy.capacity() as i64;
            let window = item.limit.policy.window_ms() as i64;
            let now = now as i64;
            values.extend(if denied && i == 0 {
                [0, capacity, 0, now + window, 1_000, 1]
            } else if denied {
                [1, capacity, capacity, now, 0, 0]
            } else {
                [1, capacity, capacity - 1, now + window, 0, 0]
            });
        }
        let mut values: Vec<String> = values.iter().map(i64::to_string).collect();
        // Per gate: kind 0 (no list matched), no list position, no member.
        values.extend(check.gates().iter().map(|_| r#"0,0,"""#.to_string()));
        format!(r#"[{{"result":[{}]}}]"#, values.join(","))
    }

    /// Prepares a scenario: `limits` (1–3) limits on `/api/`, the store's answer admitting or
    /// denying, the denial cache on or off. Returns an error's text, or nothing.
    #[wasm_bindgen]
    pub fn setup(limits: usize, denied: bool, denial_cache: bool) -> String {
        match build(limits, denied, denial_cache) {
            Ok(probe) => {
                PROBE.with(|p| *p.borrow_mut() = Some(probe));
                String::new()
            }
            Err(e) => e,
        }
    }

    fn build(limits: usize, denied: bool, denial_cache: bool) -> Result<Probe, String> {
        let limits = LIMITS.get(..limits).ok_or("1 to 3 limits")?.join(", ");
        let config_json = format!(
            r#"{{ "denial_cache": {}, "log_sample": 0.01,
                 "rules": [ {{ "name": "api", "path_prefix": "/api/", "limits": [ {limits} ] }} ] }}"#,
            if denial_cache { 10_000 } else { 0 }
        );
        let config: &'static Config = Box::leak(Box::new(
            Config::from_json(&config_json).map_err(|e| e.to_string())?,
        ));
        let request = Request {
            headers: vec![
                ("cf-connecting-ip", "198.51.100.7"),
                ("authorization", "Bearer 0123456789abcdef0123456789abcdef"),
                ("x-user", "user-1234"),
                ("user-agent", "bench/1.0"),
            ],
        };
        let plan = config.plan(&request);
        let checks = plan.checks().to_vec();
        let now = SystemClock.now_ms();
        let check = checks.first().ok_or("the request matches no limit")?;
        let canned = || Canned {
            namespace: config.namespace.clone(),
            answer: answer(check, now, denied),
            sent: Cell::new(0),
        };
        let shard = Shard::new("default", canned());
        let store = ShardedStore::new(vec![shard]).map_err(|e| e.to_string())?;
        let edge = Edge::new(config.clone(), store);
        let store = canned();
        let checked = ready(edge.limiter().check_all(&checks));
        // The canned answer must be read as the scenario says, or every stage would time the
        // store-error path instead (a gated check's answer once lacked its gate values).
        let verdict = checked.verdicts.first().ok_or("no verdict")?;
        let from_store = verdict
            .decisions
            .iter()
            .all(|d| matches!(d.reason, Reason::Admitted | Reason::OverLimit));
        if verdict.allowed == denied || !from_store {
            return Err(format!(
                "the canned answer was not read as a {} verdict from the store: {verdict:?}",
                if denied { "denied" } else { "admitted" }
            ));
        }
        let invocations = checks
            .iter()
            .map(|c| {
                CheckPlan::new(
                    c,
                    &config.namespace,
                    TimeSource::Server,
                    Topology::SingleNode,
                )
            })
            .map(|p| p.map(|p| p.invocations().len()))
            .sum::<Result<usize, _>>()
            .map_err(|e| e.to_string())?;
        Ok(Probe {
            config_json,
            config,
            request,
            edge,
            store,
            plan,
            checks,
            checked,
            invocations,
        })
    }

    /// The stages `run` times, by number (the driver's table names them).
    #[wasm_bindgen]
    pub fn stages() -> String {
        [
            "whole request",
            "config.plan (rules, identifiers)",
            "plan.checks",
            "Limiter::check_all (cache, shard, store)",
            "store: plans + body + decode",
            "body: evalsha_pipeline_body",
            "answer: decode_pipeline",
            "plan.rule + plan.response (headers, problem)",
            "LogLine::of + to_json (1% sampled)",
            "Config::from_json (once per isolate)",
            "CheckPlan::new (keys, script args)",
            "one clock read (Date.now)",
        ]
        .join("\n")
    }

    /// Runs stage `stage` `iterations` times; returns a number that depends on every result,
    /// so no stage can be optimised away.
    #[wasm_bindgen]
    pub fn run(stage: u32, iterations: u32) -> f64 {
        PROBE.with(|p| {
            let p = p.borrow();
            let p = p.as_ref().expect("setup first");
            let mut sum = 0usize;
            for _ in 0..iterations {
                sum = sum.wrapping_add(once(p, stage));
            }
            sum as f64
        })
    }

    fn once(p: &Probe, stage: u32) -> usize {
        match stage {
            0 => {
                // As the Worker's fetch handler (`edge.rs`), minus reading the request, the
                // fetches and the 1%-sampled log line.
                let handled = ready(p.edge.handle(&p.request, 0));
                let response = handled.response(&p.request);
                response.headers.len() + usize::from(handled.outcome().allowed())
            }
            1 => p.config.plan(&p.request).checks().len(),
            2 => p.plan.checks().len(),
            3 => ready(p.edge.limiter().check_all(&p.checks)).verdicts.len(),
            4 => ready(p.store.check(&p.checks, TimeSource::Server)).map_or(0, |v| v.len()),
            5 => {
                let plans: Vec<CheckPlan> = p
                    .checks
                    .iter()
                    .filter_map(|c| {
                        CheckPlan::new(
                            c,
                            &p.config.namespace,
                            TimeSource::Server,
                            Topology::SingleNode,
                        )
                        .ok()
                    })
                    .collect();
                let invocations: Vec<&Invocation> =
                    plans.iter().flat_map(|p| p.invocations()).collect();
                evalsha_pipeline_body(&invocations).map_or(0, |b| b.len())
            }
            6 => decode_pipeline(200, &p.store.answer, p.invocations).map_or(0, |r| r.len()),
            7 => {
                let outcome = p.plan.rule(&p.checked.verdicts);
                p.plan
                    .response(&p.checked.verdicts, &outcome, PATH)
                    .headers
                    .len()
            }
            8 => {
                let outcome = p.plan.rule(&p.checked.verdicts);
                LogLine::of(&p.plan, &p.checked, &outcome, &p.request, None)
                    .to_json()
                    .len()
            }
            9 => Config::from_json(&p.config_json).map_or(0, |c| c.rules.len()),
            10 => p
                .checks
                .iter()
                .filter_map(|c| {
                    CheckPlan::new(
                        c,
                        &p.config.namespace,
                        TimeSource::Server,
                        Topology::SingleNode,
                    )
                    .ok()
                })
                .map(|plan| plan.invocations().len())
                .sum(),
            11 => SystemClock.now_ms() as usize,
            _ => 0,
        }
    }
}

/// The driver: builds the probe as the Worker is built, runs `benches/wasm_cpu.mjs` under the
/// repo's pinned node, prints the tables.
#[cfg(not(target_arch = "wasm32"))]
mod driver {
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};

    use edgelimit_testkit::dir::repo_root;
    use edgelimit_testkit::wrangler::built_worker;
    use serde_json::Value;

    /// The Worker's budget for its own CPU per request with 3 limits.
    const BUDGET_US: f64 = 200.0;

    fn run(command: &mut Command, what: &str) -> String {
        let output = command
            .stderr(Stdio::inherit())
            .output()
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(output.status.success(), "{what} failed");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Builds the probe for wasm32 with the Worker's release settings (`scripts/build-worker`),
    /// then wasm-bindgen (for node) and `wasm-opt -Oz`. Returns its JS entry.
    fn build_probe(root: &Path) -> PathBuf {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let json = run(
            Command::new(cargo)
                .args([
                    "build",
                    "--release",
                    "--locked",
                    "--target",
                    "wasm32-unknown-unknown",
                    "-p",
                    "edgelimit-worker",
                    "--bench",
                    "wasm_cpu",
                    "--message-format=json-render-diagnostics",
                ])
                .current_dir(root)
                .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "z")
                .env("CARGO_PROFILE_RELEASE_LTO", "true")
                .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "1"),
            "cargo build of the wasm32 probe",
        );
        let wasm = json
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "wasm_cpu")
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo names the probe's wasm");
        let out = root.join("target/wasm-cpu");
        run(
            Command::new("wasm-bindgen")
                .args(["--target", "nodejs", "--out-dir"])
                .arg(&out)
                .args(["--out-name", "probe"])
                .arg(&wasm),
            "wasm-bindgen",
        );
        let bg = out.join("probe_bg.wasm");
        run(
            Command::new(root.join("node_modules/.bin/wasm-opt"))
                .arg("-Oz")
                // The features worker-build enables, as scripts/build-worker passes them.
                .args([
                    "--enable-mutable-globals",
                    "--enable-sign-ext",
                    "--enable-nontrapping-float-to-int",
                    "--enable-bulk-memory",
                    "--enable-multivalue",
                    "--enable-reference-types",
                ])
                .arg(&bg)
                .arg("-o")
                .arg(&bg),
            "wasm-opt",
        );
        out.join("probe.js")
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        if args.iter().any(|a| a == "--list") {
            println!("wasm_cpu: bench");
            return;
        }
        if !args.iter().any(|a| a == "--bench") {
            return;
        }
        let iterations: u32 = args
            .iter()
            .position(|a| a == "--iterations")
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000);
        let root = repo_root();
        let node = root.join("node_modules/.bin/node");
        let have_tools = node.exists()
            && root.join("node_modules/.bin/wasm-opt").exists()
            && Command::new("wasm-bindgen")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
        if built_worker().is_none() || !have_tools {
            eprintln!("wasm_cpu: building the Worker and its toolchain (scripts/build-worker)");
            run(
                Command::new("bash").arg(root.join("scripts/build-worker")),
                "scripts/build-worker",
            );
        }
        let probe = build_probe(&root);
        let output = run(
            Command::new(&node)
                .arg(root.join("worker/benches/wasm_cpu.mjs"))
                .arg(&probe)
                .arg(root.join("worker/build/index_bg.wasm"))
                .arg(iterations.to_string()),
            "node worker/benches/wasm_cpu.mjs",
        );
        report(&output, iterations);
    }

    fn report(output: &str, iterations: u32) {
        let lines: Vec<Value> = output
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        let node = lines.iter().find_map(|l| l["node"].as_str()).unwrap_or("?");
        println!(
            "node {node}; per stage the best of 5 rounds of {} iterations, after {} as warm-up\n",
            iterations / 5,
            iterations / 10
        );
        println!("| scenario | stage | µs / request | share of the request | allocations | bytes allocated |");
        println!("|---|---|---|---|---|---|");
        let mut whole = 0.0;
        let mut three = None;
        for line in lines.iter().filter(|l| l["stage"].is_string()) {
            let us = line["ns"].as_f64().unwrap_or(0.0) / 1000.0;
            let scenario = line["scenario"].as_str().unwrap_or("");
            let stage = line["stage"].as_str().unwrap_or("");
            if line["index"] == 0 {
                whole = us;
                if scenario == "3 limits, admitted" {
                    three = Some(us);
                }
            }
            println!(
                "| {scenario} | {stage} | {us:.2} | {:.0}% | {:.1} | {:.0} |",
                100.0 * us / whole,
                line["allocations"].as_f64().unwrap_or(0.0),
                line["bytes"].as_f64().unwrap_or(0.0),
            );
        }
        if let Some(us) = three {
            println!(
                "\n3 limits, admitted: {us:.1} µs per request = {:.2}× the {BUDGET_US:.0} µs budget",
                us / BUDGET_US
            );
        }
        if let Some(cold) = lines.iter().find(|l| l["cold"].is_object()) {
            let c = &cold["cold"];
            let ms = |k: &str| c[k].as_f64().unwrap_or(0.0);
            println!(
                "\nCold start of worker/build/index_bg.wasm ({} bytes), median of {} fresh node \
                 processes: WebAssembly.compile {:.2} ms, instantiate {:.2} ms, total {:.2} ms \
                 (min {:.2}, max {:.2})",
                c["bytes"],
                c["runs"],
                ms("compile_ms"),
                ms("instantiate_ms"),
                ms("total_ms"),
                ms("total_min_ms"),
                ms("total_max_ms"),
            );
        }
    }
}
