//! `wrangler dev` running the built edgelimit Worker on a free loopback port (tried again on a
//! fresh one when wrangler finds it taken: [`start_on_free_port`]; its inspector on a port the
//! system picks, `--inspector-port 0`), with a
//! configuration of the test's choosing, stopped (with its whole process group) on drop. Another
//! project's Worker (a JS fixture with its own `wrangler.toml`) runs the same way
//! ([`WranglerDev::start_project`]).
//!
//! Needs what `scripts/setup.d/worker-toolchain.sh` installs and `worker-build --release worker`
//! produces: `node_modules/.bin/wrangler` and `worker/build/worker/shim.mjs` in the checkout.

use std::ffi::OsString;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::dir::{repo_root, TempDir};
use crate::net::{start_on_free_port, Ports, StartError};
use crate::wait;

/// How long `wrangler dev` may take to answer (about 1.5 s idle; far more on a loaded CI box).
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// Where the output of the runs before a restart is kept.
const EARLIER_LOG: &str = "wrangler-earlier.log";

/// The built Worker's entry point, if `worker-build` has run.
pub fn built_worker() -> Option<PathBuf> {
    let shim = repo_root().join("worker/build/worker/shim.mjs");
    shim.exists().then_some(shim)
}

/// One `wrangler dev` process group serving the Worker.
#[derive(Debug)]
pub struct WranglerDev {
    port: u16,
    dir: TempDir,
    /// The arguments beyond the common ones, for a restart.
    extra: Vec<OsString>,
    child: Option<Child>,
}

impl WranglerDev {
    /// Starts `wrangler dev` with `vars_toml` as the `[vars]`-and-beyond part of its
    /// `wrangler.toml` (the test writes `[vars]` and any tables itself), and waits until it
    /// answers HTTP. Panics with wrangler's output when it does not come up.
    pub fn start(vars_toml: &str) -> WranglerDev {
        let shim = built_worker().expect(
            "worker/build/worker/shim.mjs is missing: run `worker-build --release worker` \
             (scripts/test.d/worker.sh does)",
        );
        let dir = TempDir::new("edgelimit-wrangler");
        let config = format!(
            "name = \"edgelimit-test\"\nmain = \"{}\"\ncompatibility_date = \"2026-11-01\"\n\n{vars_toml}\n",
            shim.display()
        );
        dir.write("wrangler.toml", &config);
        WranglerDev::spawn(dir, &[])
    }

    /// Starts `wrangler dev` as [`WranglerDev::start`] does, with more Workers beside it in the
    /// same process (`wrangler dev -c … -c …`, the built Worker first): each is a directory's
    /// name and its files, one of them its `wrangler.toml`. A binding of the Worker naming one of
    /// them (`script_name`) reaches it, as on Cloudflare.
    pub fn start_beside(vars_toml: &str, others: &[(&str, &[(&str, &str)])]) -> WranglerDev {
        let shim = built_worker().expect(
            "worker/build/worker/shim.mjs is missing: run `worker-build --release worker` \
             (scripts/test.d/worker.sh does)",
        );
        let dir = TempDir::new("edgelimit-wrangler");
        let config = format!(
            "name = \"edgelimit-test\"\nmain = \"{}\"\ncompatibility_date = \"2026-11-01\"\n\n{vars_toml}\n",
            shim.display()
        );
        let mut args = vec![
            OsString::from("-c"),
            dir.write("wrangler.toml", &config).into_os_string(),
        ];
        for (name, files) in others {
            std::fs::create_dir_all(dir.join(name)).expect("a directory for the Worker");
            for (file, contents) in *files {
                dir.write(&format!("{name}/{file}"), contents);
            }
            args.push(OsString::from("-c"));
            args.push(dir.join(&format!("{name}/wrangler.toml")).into_os_string());
        }
        WranglerDev::spawn(dir, &args)
    }

    /// Starts `wrangler dev` on another project's configuration — `config` is its
    /// `wrangler.toml` (e.g. a JS Worker whose dependencies `npm ci` installed beside it) — with
    /// `vars` given through an env file (`--env-file`), so they override the file's own `[vars]`,
    /// and waits until it answers HTTP. Panics when a value cannot be written to an env file
    /// (a newline or `'`), or with wrangler's output when it does not come up.
    pub fn start_project(config: &Path, vars: &[(&str, &str)]) -> WranglerDev {
        assert!(
            config.is_file(),
            "{} is not a wrangler configuration file",
            config.display()
        );
        let dir = TempDir::new("edgelimit-wrangler");
        let mut env = String::new();
        for (name, value) in vars {
            assert!(
                !value.contains(['\n', '\r', '\'']),
                "the var {name} cannot go in an env file (a newline or `'` in it): {value}"
            );
            // Single quotes: the value is taken literally (JSON keeps its double quotes).
            env.push_str(&format!("{name}='{value}'\n"));
        }
        let env_file = dir.write("vars.env", &env);
        let config = config.canonicalize().expect("the configuration's path");
        let args = [
            OsString::from("--config"),
            config.into_os_string(),
            OsString::from("--env-file"),
            env_file.into_os_string(),
        ];
        WranglerDev::spawn(dir, &args)
    }

    /// Runs `wrangler dev` in `dir` (the configuration there, unless `extra` names one) in its
    /// own process group, on a free port ([`start_on_free_port`]: a fresh one when wrangler finds
    /// its port taken), and waits until it answers. Panics with wrangler's output when it does
    /// not come up.
    fn spawn(dir: TempDir, extra: &[OsString]) -> WranglerDev {
        let mut dev = WranglerDev {
            port: 0,
            dir,
            extra: extra.to_vec(),
            child: None,
        };
        if let Err(e) = start_on_free_port("wrangler dev", Ports::One, |port| {
            dev.port = port;
            dev.launch()
        }) {
            panic!("{e}");
        }
        dev
    }

    /// Starts the process group on the port, in the directory, and waits until it answers; when
    /// it does not, stops what is left of it and says why, its output included.
    fn launch(&mut self) -> Result<(), StartError> {
        let root = repo_root();
        let wrangler = root.join("node_modules/.bin/wrangler");
        assert!(
            wrangler.exists(),
            "{} is missing: scripts/setup.d/worker-toolchain.sh installs it",
            wrangler.display()
        );
        // Appended to, so a restart's output follows the first run's.
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("wrangler.log"))
            .expect("open the log");
        let path = format!(
            "{}:{}",
            root.join("node_modules/.bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let child = Command::new(&wrangler)
            .args(["dev", "--ip", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args([
                "--inspector-port",
                "0",
                "--show-interactive-dev-session=false",
                "--log-level",
                "log",
            ])
            .arg("--persist-to")
            .arg(self.state_dir())
            .args(&self.extra)
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env("WRANGLER_SEND_METRICS", "false")
            .env("WRANGLER_SEND_ERROR_REPORTS", "false")
            .env("CLOUDFLARE_CF_FETCH_ENABLED", "false")
            .env("DO_NOT_TRACK", "1")
            .env("XDG_CONFIG_HOME", self.dir.join("xdg"))
            .env("CI", "true")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log"))
            .stderr(log)
            // Its own process group, so stopping it stops workerd and esbuild too.
            .process_group(0)
            .spawn()
            .map_err(|e| StartError::Failed(format!("cannot run {}: {e}", wrangler.display())))?;
        self.child = Some(child);
        self.wait_ready().inspect_err(|_| {
            self.stop();
            // The next attempt's "Ready on" must be its own.
            let _ = std::fs::remove_file(self.dir.join("wrangler.log"));
        })
    }

    /// Stops `wrangler dev` and starts it again on the same port, configuration and state
    /// (`--persist-to`): what a redeploy or an evicted isolate and its objects look like. Waits
    /// until it answers.
    pub fn restart(&mut self) {
        self.stop();
        let ready = wait::until(START_TIMEOUT, Duration::from_millis(100), || {
            TcpStream::connect(("127.0.0.1", self.port)).is_err()
        });
        assert!(ready, "port {} still answers after the stop", self.port);
        // Only the new run's "Ready on" may count: the output so far moves to the earlier runs'.
        let earlier = std::fs::read_to_string(self.dir.join("wrangler.log")).unwrap_or_default();
        let mut before = self.earlier_logs();
        before.push_str(&earlier);
        self.dir.write(EARLIER_LOG, &before);
        let _ = std::fs::remove_file(self.dir.join("wrangler.log"));
        if let Err(e) = self.launch() {
            panic!("wrangler dev did not restart on port {}: {e:?}", self.port);
        }
    }

    /// The directory `--persist-to` names: the Durable Objects' storage among the rest
    /// ([`crate::objects::entries`] reads it).
    pub fn state_dir(&self) -> PathBuf {
        self.dir.join("state")
    }

    /// CPU seconds (user and system) every `workerd` process of this `wrangler dev` has spent
    /// so far — the Worker, its Durable Objects and the runtime's own proxy, without wrangler's
    /// node process — read from `/proc` (Linux).
    pub fn workerd_cpu_seconds(&self) -> f64 {
        let Some(group) = self.child.as_ref().map(|c| c.id() as i64) else {
            return 0.0;
        };
        // Ticks per second: 100 on every Linux these tests run on (`getconf CLK_TCK`).
        const TICKS: f64 = 100.0;
        let mut ticks = 0u64;
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // `pid (comm) state ppid pgrp …`: the name may hold spaces, so split after `)`.
            let Some((head, rest)) = stat.rsplit_once(") ") else {
                continue;
            };
            if !head.ends_with("(workerd") {
                continue;
            }
            let fields: Vec<&str> = rest.split_whitespace().collect();
            // rest[0] is the state; pgrp is field 5 of the line (rest[2]), utime and stime
            // fields 14 and 15 (rest[11], rest[12]).
            if fields.get(2).and_then(|g| g.parse::<i64>().ok()) != Some(group) {
                continue;
            }
            let tick = |i: usize| {
                fields
                    .get(i)
                    .and_then(|t| t.parse::<u64>().ok())
                    .unwrap_or(0)
            };
            ticks += tick(11) + tick(12);
        }
        ticks as f64 / TICKS
    }

    /// Waits until this run says "Ready on" and its port answers: a [`StartError::PortTaken`]
    /// when wrangler exited because an address was in use, [`StartError::Failed`] when it exited
    /// otherwise or did not answer within [`START_TIMEOUT`].
    fn wait_ready(&mut self) -> Result<(), StartError> {
        let mut exited = None;
        let ready = wait::until(START_TIMEOUT, Duration::from_millis(100), || {
            exited = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            exited.is_some()
                || (self.current_logs().contains("Ready on")
                    && TcpStream::connect(("127.0.0.1", self.port)).is_ok())
        });
        if let Some(status) = exited {
            return Err(StartError::from_output(&format!(
                "wrangler dev exited ({status}):\n{}",
                self.logs()
            )));
        }
        if !ready {
            return Err(StartError::Failed(format!(
                "wrangler dev did not answer within {START_TIMEOUT:?}:\n{}",
                self.logs()
            )));
        }
        Ok(())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Everything wrangler (and the Worker's `console.log`) printed so far, over every run.
    pub fn logs(&self) -> String {
        let mut logs = self.earlier_logs();
        logs.push_str(&self.current_logs());
        logs
    }

    /// What the current run printed.
    fn current_logs(&self) -> String {
        std::fs::read_to_string(self.dir.join("wrangler.log")).unwrap_or_default()
    }

    /// What the runs before the last restart printed.
    fn earlier_logs(&self) -> String {
        std::fs::read_to_string(self.dir.join(EARLIER_LOG)).unwrap_or_default()
    }

    /// Stops the process group.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let group = child.id().to_string();
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{group}")])
                .status();
            wait::until(Duration::from_secs(5), Duration::from_millis(50), || {
                matches!(child.try_wait(), Ok(Some(_)))
            });
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{group}")])
                .status();
            let _ = child.wait();
        }
    }
}

/// Waits (up to 10 s) until `worker`'s output contains `needle`; whether it did. The Worker's
/// console lines reach wrangler's output shortly after the response does.
pub async fn wait_for_log(worker: &WranglerDev, needle: &str) -> bool {
    wait::until_async(Duration::from_secs(10), Duration::from_millis(100), || {
        worker.logs().contains(needle)
    })
    .await
}

impl Drop for WranglerDev {
    fn drop(&mut self) {
        // Before the directory goes (TempDir's own drop, after this).
        self.stop();
    }
}
