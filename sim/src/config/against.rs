//! For `--format edgelimit`: each replayed request's log line — written by the Worker's own
//! pipeline (`Handled::log_line`) — against the line the Worker logged. Replaying a configuration through
//! its own logs must reproduce them exactly (docs/design.md §7); under another configuration the
//! differences are what the change does.

use super::report::AgainstLog;
use edgelimit_engine::{LimitLine, LogLine};

/// Differences kept verbatim in the report.
const SAMPLES: usize = 10;

/// The running comparison.
#[derive(Debug, Default)]
pub struct LogCheck {
    compared: u64,
    mismatches: u64,
    status_mismatches: u64,
    samples: Vec<String>,
}

/// Whether a replayed identifier is the logged one: equal as keyed, or the logged one was a
/// hashed long value (`#…`), which the replay keys by its logged text.
fn same_identifier(logged: &str, replayed: &str) -> bool {
    logged == replayed
        || (logged.starts_with('#') && replayed.strip_prefix("%23") == Some(&logged[1..]))
}

fn same_limit(logged: &LimitLine, replayed: &LimitLine) -> bool {
    same_identifier(&logged.identifier, &replayed.identifier)
        && LimitLine {
            identifier: String::new(),
            ..logged.clone()
        } == LimitLine {
            identifier: String::new(),
            ..replayed.clone()
        }
}

fn limit_text(l: &LimitLine) -> String {
    format!(
        "{}{}[{}] {} r={} {}",
        if l.shadow { "shadow " } else { "" },
        l.name,
        l.identifier,
        if l.allowed { "allowed" } else { "denied" },
        l.remaining,
        l.reason
    )
}

impl LogCheck {
    /// Compares the logged decision with the replayed one.
    pub fn add(&mut self, logged: &LogLine, replayed: &LogLine) {
        self.compared += 1;
        let mut differences = Vec::new();
        if logged.status != replayed.status {
            differences.push(format!("status {} → {}", logged.status, replayed.status));
        }
        if logged.rules != replayed.rules {
            differences.push(format!("rules {:?} → {:?}", logged.rules, replayed.rules));
        }
        if logged.time_ms != replayed.time_ms
            || (logged.shadow_time_ms.is_some() && logged.shadow_time_ms != replayed.shadow_time_ms)
        {
            differences.push(format!(
                "time {:?}/{:?} → {:?}/{:?}",
                logged.time_ms, logged.shadow_time_ms, replayed.time_ms, replayed.shadow_time_ms
            ));
        }
        let limits_agree = logged.limits.len() == replayed.limits.len()
            && logged
                .limits
                .iter()
                .zip(&replayed.limits)
                .all(|(a, b)| same_limit(a, b));
        if !limits_agree {
            let side = |ls: &[LimitLine]| ls.iter().map(limit_text).collect::<Vec<_>>().join(", ");
            differences.push(format!(
                "limits [{}] → [{}]",
                side(&logged.limits),
                side(&replayed.limits)
            ));
        }
        if logged.shadow_denied != replayed.shadow_denied {
            differences.push(format!(
                "shadow_denied {:?} → {:?}",
                logged.shadow_denied, replayed.shadow_denied
            ));
        }
        if !differences.is_empty() {
            self.differ(
                logged,
                differences.join("; "),
                logged.status != replayed.status,
            );
        }
    }

    fn differ(&mut self, logged: &LogLine, what: String, status: bool) {
        self.mismatches += 1;
        self.status_mismatches += u64::from(status);
        if self.samples.len() < SAMPLES {
            self.samples.push(format!(
                "{} {} {}{} (local_ms {}): {what}",
                crate::readers::time::format_utc(logged.local_ms),
                logged.method,
                logged.host,
                logged.path,
                logged.local_ms
            ));
        }
    }

    /// The result.
    pub fn finish(&self) -> AgainstLog {
        AgainstLog {
            compared: self.compared,
            mismatches: self.mismatches,
            status_mismatches: self.status_mismatches,
            samples: self.samples.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"edgelimit":"decision","time_ms":5,"local_ms":4,"method":"GET","host":"h","path":"/a","rules":["r"],"allowed":true,"status":200,"limits":[{"name":"l","identifier":"%23x","cost":1,"allowed":true,"remaining":3,"reason":"admitted","shadow":false}],"shadow_denied":[],"atomic":true}"#;

    #[test]
    fn equal_lines_agree_and_any_decided_field_differs() {
        let line = |text: &str| -> LogLine { serde_json::from_str(text).unwrap() };
        let logged = line(LINE);
        let mut check = LogCheck::default();
        check.add(&logged, &logged);
        check.add(&line(&LINE.replace("%23x", "#x")), &logged);
        assert_eq!(check.finish().mismatches, 0);
        check.add(
            &logged,
            &line(&LINE.replace("\"remaining\":3", "\"remaining\":2")),
        );
        check.add(
            &logged,
            &line(&LINE.replace("\"status\":200", "\"status\":429")),
        );
        let r = check.finish();
        assert_eq!((r.compared, r.mismatches, r.status_mismatches), (4, 2, 1));
        assert!(
            r.samples[0].contains("r=3") && r.samples[0].contains("r=2"),
            "{}",
            r.samples[0]
        );
    }
}
