//! What Redis itself says about a run: its script time per call (`INFO commandstats`, so neither
//! the client nor the network is counted), its memory, its process — and the comparison built on
//! the script time, modes interleaved round after round.

use std::future::Future;

use edgelimit_testkit::{RedisServer, Reply};

use super::median;

/// Zeroes the server's command statistics (`CONFIG RESETSTAT`), so that
/// [`script_usec_per_call`] reads one run alone.
pub fn reset_stats(server: &RedisServer) {
    server
        .command(&["CONFIG", "RESETSTAT"])
        .expect("redis-server answers CONFIG RESETSTAT");
}

/// Microseconds Redis spent per script call (`EVALSHA` and `EVAL` together: a store falls back
/// to `EVAL` when a script is not loaded) since the last [`reset_stats`]; NaN when there was none.
pub fn script_usec_per_call(server: &RedisServer) -> f64 {
    let info = info(server, "commandstats");
    let (mut calls, mut usec) = (0.0, 0.0);
    for line in info.lines() {
        let Some(stats) = line
            .strip_prefix("cmdstat_evalsha:")
            .or_else(|| line.strip_prefix("cmdstat_eval:"))
        else {
            continue;
        };
        for field in stats.split(',') {
            match field.split_once('=') {
                Some(("calls", n)) => calls += n.parse::<f64>().unwrap_or(0.0),
                Some(("usec", n)) => usec += n.parse::<f64>().unwrap_or(0.0),
                _ => {}
            }
        }
    }
    usec / calls
}

/// The server's `used_memory` (`INFO memory`), bytes: all it holds, keyspace overhead included.
pub fn used_memory(server: &RedisServer) -> i64 {
    info_field(server, "memory", "used_memory")
}

/// `MEMORY USAGE key SAMPLES 0`: the bytes one key holds, every element counted (for the small
/// encodings of the benches' keys, the same as sampled); the reply, shown, when it is no number
/// (e.g. `Ok(Nil)` for a missing key).
pub fn memory_usage(server: &RedisServer, key: &str) -> Result<i64, String> {
    match server.command(&["MEMORY", "USAGE", key, "SAMPLES", "0"]) {
        Ok(Reply::Int(n)) => Ok(n),
        other => Err(format!("{other:?}")),
    }
}

/// redis-server's process id (`INFO server`), for CPU time read from `/proc`.
pub fn redis_pid(server: &RedisServer) -> String {
    info_field::<u32>(server, "server", "process_id").to_string()
}

/// `INFO section` as text.
fn info(server: &RedisServer, section: &str) -> String {
    server
        .info(section)
        .unwrap_or_else(|| panic!("redis-server answers INFO {section}"))
}

/// One numeric `name:value` line of `INFO section`.
fn info_field<T: std::str::FromStr>(server: &RedisServer, section: &str, name: &str) -> T {
    server
        .info_field(section, name)
        .unwrap_or_else(|| panic!("INFO {section} names a numeric {name}"))
}

/// What one way of checking costs: Redis's script time per call and the decisions per second the
/// clients saw.
#[derive(Debug, Clone, Copy)]
pub struct Cost {
    /// Redis's own script time per call, µs ([`script_usec_per_call`]).
    pub usec: f64,
    /// Decisions per second.
    pub per_s: f64,
}

impl Cost {
    /// The table row every script-cost bench prints: `| \`limit\` | check | µs | ratio |
    /// per second | ratio |`, ratios against `base` (the plain row of the same limit), with no
    /// newline, so a bench may add columns.
    pub fn row(&self, base: &Cost, limit: &str, check: &str) -> String {
        format!(
            "| `{limit}` | {check} | {:.2} | {:.2} | {:.0} | {:.2} |",
            self.usec,
            self.usec / base.usec,
            self.per_s,
            self.per_s / base.per_s
        )
    }
}

/// Every mode's [`Cost`], medians of `rounds`: one warm-up run per mode (scripts loaded, states
/// created), then each round runs every mode in turn — statistics reset before each run, read
/// after — so a machine busy with other work skews every mode alike. `run` returns a run's
/// decisions per second.
pub async fn interleaved<M, F, Fut>(
    server: &RedisServer,
    rounds: usize,
    modes: &[M],
    mut run: F,
) -> Vec<Cost>
where
    M: Copy,
    F: FnMut(M) -> Fut,
    Fut: Future<Output = f64>,
{
    for &mode in modes {
        run(mode).await;
    }
    let mut samples: Vec<Vec<Cost>> = vec![Vec::new(); modes.len()];
    for _ in 0..rounds {
        for (m, &mode) in modes.iter().enumerate() {
            reset_stats(server);
            let per_s = run(mode).await;
            samples[m].push(Cost {
                usec: script_usec_per_call(server),
                per_s,
            });
        }
    }
    samples
        .into_iter()
        .map(|s| Cost {
            usec: median(s.iter().map(|c| c.usec).collect()),
            per_s: median(s.iter().map(|c| c.per_s).collect()),
        })
        .collect()
}
