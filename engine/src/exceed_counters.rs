//! The isolate's counters of what the per-limit `exceed` and `enforce` settings did: `soft`
//! exceedances, staged enforcement's denials (enforced, or in shadow for the identifiers it
//! leaves out), and requests that waited before they were forwarded. Rendered next to the
//! limiter's own counters on the `metrics_path` page.

use std::fmt::Write as _;
use std::sync::Arc;

/// Counts for one limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExceedCounts {
    /// Requests admitted although this `soft` limit denied them.
    pub soft: u64,
    /// Denials of this staged limit for identifiers it enforces (the request refused).
    pub staged_enforced: u64,
    /// Denials of this staged limit for identifiers it leaves out (reported only).
    pub staged_shadow: u64,
}

/// The counters, per limit name (a configuration has a handful of limits: a scan finds one).
#[derive(Debug, Default)]
pub struct ExceedCounters {
    limits: Vec<(Arc<str>, ExceedCounts)>,
    /// Requests forwarded after a wait.
    delayed: u64,
    /// Their waits, summed (ms).
    delayed_ms: u64,
}

impl ExceedCounters {
    fn of(&mut self, name: &Arc<str>) -> &mut ExceedCounts {
        let at = self
            .limits
            .iter()
            .position(|(known, _)| known == name)
            .unwrap_or_else(|| {
                self.limits.push((name.clone(), ExceedCounts::default()));
                self.limits.len() - 1
            });
        &mut self.limits[at].1
    }

    /// Counts one request: the `soft` limits it exceeded, the staged limits that denied it in
    /// shadow and those that denied it enforced, and its wait (ms, 0 for none).
    pub fn count<'a>(
        &mut self,
        soft: impl IntoIterator<Item = &'a Arc<str>>,
        staged_shadow: impl IntoIterator<Item = &'a Arc<str>>,
        staged_enforced: impl IntoIterator<Item = &'a Arc<str>>,
        delay_ms: u64,
    ) {
        for name in soft {
            self.of(name).soft += 1;
        }
        for name in staged_shadow {
            self.of(name).staged_shadow += 1;
        }
        for name in staged_enforced {
            self.of(name).staged_enforced += 1;
        }
        if delay_ms > 0 {
            self.delayed += 1;
            self.delayed_ms += delay_ms;
        }
    }

    /// The counts of the limit `name` (zero when it never counted).
    pub fn get(&self, name: &str) -> ExceedCounts {
        self.limits
            .iter()
            .find(|(known, _)| &**known == name)
            .map_or_else(ExceedCounts::default, |(_, counts)| *counts)
    }

    /// The requests forwarded after a wait, and their waits summed (ms).
    pub fn delayed(&self) -> (u64, u64) {
        (self.delayed, self.delayed_ms)
    }

    /// The counters as Prometheus text.
    pub fn to_prometheus(&self) -> String {
        let mut limits: Vec<&(Arc<str>, ExceedCounts)> = self.limits.iter().collect();
        limits.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out = String::from(
            "# HELP edgelimit_soft_exceeded_total Requests admitted although a soft limit denied them (the origin told).\n\
             # TYPE edgelimit_soft_exceeded_total counter\n",
        );
        for (name, counts) in limits.iter().filter(|(_, c)| c.soft > 0) {
            let _ = writeln!(
                out,
                "edgelimit_soft_exceeded_total{{limit=\"{name}\"}} {}",
                counts.soft
            );
        }
        out.push_str(
            "# HELP edgelimit_staged_denials_total Denials of a limit with staged enforcement, by whether it enforced them.\n\
             # TYPE edgelimit_staged_denials_total counter\n",
        );
        for (name, counts) in limits
            .iter()
            .filter(|(_, c)| c.staged_enforced + c.staged_shadow > 0)
        {
            for (enforced, n) in [
                ("true", counts.staged_enforced),
                ("false", counts.staged_shadow),
            ] {
                let _ = writeln!(
                    out,
                    "edgelimit_staged_denials_total{{limit=\"{name}\",enforced=\"{enforced}\"}} {n}"
                );
            }
        }
        let _ = write!(
            out,
            "# HELP edgelimit_delayed_total Requests forwarded after a wait (exceed = \"delay …\").\n\
             # TYPE edgelimit_delayed_total counter\n\
             edgelimit_delayed_total {}\n\
             # HELP edgelimit_delay_seconds_total The waits of delayed requests, summed.\n\
             # TYPE edgelimit_delay_seconds_total counter\n\
             edgelimit_delay_seconds_total {}\n",
            self.delayed,
            self.delayed_ms as f64 / 1000.0
        );
        out
    }
}
