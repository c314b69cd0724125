//! [`FailureLog`]: the store's failures logged rate-limited, never sampled. Every failure is
//! noted; a line is due for a class at its first failure, then at most once per interval, and
//! says how many failures of the class it stands for. So a rotated token shows at once in the
//! log, and an outage of an hour costs a few dozen lines per process rather than one per request.
//!
//! The log writes nothing itself: a host takes the lines due ([`FailureLog::due_at`], through
//! [`crate::Limiter::store_failure_lines`]) after a request and writes them where it logs — the
//! Worker with `console.error`, the tower layer with `tracing`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::redact::redact;
use crate::store::{FailureClass, StoreError};

/// The default interval between two lines of one class, in ms: a line at a class's first
/// failure, then at most one a minute while it lasts.
pub const DEFAULT_FAILURE_LOG_INTERVAL_MS: u64 = 60_000;

/// The value of every line's first member, `"edgelimit":"store_failure"`: how a reader finds the
/// lines among other output (the decision lines carry `"decision"`).
pub const STORE_FAILURE: &str = "store_failure";

/// One log line: the failures of one class since the class's last line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureLine {
    /// Always [`STORE_FAILURE`].
    pub edgelimit: String,
    /// The class.
    pub class: FailureClass,
    /// Whether the store refused the limiter (limits followed `fail_misconfigured`, closed by
    /// default) rather than could not answer (limits followed `fail`).
    pub misconfiguration: bool,
    /// The failures this line stands for: the first since the class's last line, and every one
    /// after it until this line was due.
    pub failures: u64,
    /// Of those, the ones not logged on a line of their own (`failures - 1`).
    pub suppressed: u64,
    /// When the first of them happened (epoch ms, the limiter's clock).
    pub first_ms: u64,
    /// When the last of them happened.
    pub last_ms: u64,
    /// The first one's error, as the store's client told it, with every secret in it (a URL's
    /// password, a `_token`) redacted ([`crate::redact::redact`]) when it was noted: a host
    /// writes the line as it is, and no host can forget to.
    pub error: String,
}

impl FailureLine {
    /// What the limits did, for a reader: `failed per each limit's fail` or `store refused:
    /// each limit's fail_misconfigured (closed unless set)`.
    pub fn consequence(&self) -> &'static str {
        if self.misconfiguration {
            "store refused: each limit followed its fail_misconfigured (closed unless set)"
        } else {
            "store could not answer: each limit followed its fail mode"
        }
    }

    /// The line as JSON, on one line.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What the log holds of one class: the failures since its last line.
#[derive(Debug, Default)]
struct Pending {
    /// When the class's last line was taken; `None` before its first.
    last_line_ms: Option<u64>,
    failures: u64,
    first_ms: u64,
    last_ms: u64,
    /// The first failure's error; later ones are only counted (no allocation per failure).
    error: Option<String>,
}

/// Store failures, counted by class until their line is due. Bounded: one entry per class.
#[derive(Debug)]
pub struct FailureLog {
    interval_ms: u64,
    classes: Mutex<[Pending; FailureClass::ALL.len()]>,
    /// Whether any class holds failures not yet on a line: a host asking after every request
    /// reads this flag alone while the store answers.
    pending: AtomicBool,
}

impl Default for FailureLog {
    fn default() -> Self {
        FailureLog::new(DEFAULT_FAILURE_LOG_INTERVAL_MS)
    }
}

impl FailureLog {
    /// A log writing at most one line per class every `interval_ms` (0: one whenever asked and
    /// the class failed since).
    pub fn new(interval_ms: u64) -> FailureLog {
        FailureLog {
            interval_ms,
            classes: Mutex::new(Default::default()),
            pending: AtomicBool::new(false),
        }
    }

    /// Notes `error`, which happened at `now_ms`.
    pub fn note_at(&self, error: &StoreError, now_ms: u64) {
        let mut classes = self.classes.lock().unwrap_or_else(|e| e.into_inner());
        let pending = &mut classes[error.class().index()];
        if pending.failures == 0 {
            pending.first_ms = now_ms;
            // Redacted here, once per class and line, so that no host's log carries the store's
            // password; the failures after the first are only counted.
            pending.error = Some(redact(&error.to_string()).into_owned());
        }
        pending.failures += 1;
        pending.last_ms = now_ms;
        self.pending.store(true, Ordering::Release);
    }

    /// Whether any failure waits to be logged: what lets a request that met none skip reading
    /// the clock for [`FailureLog::due_at`].
    pub fn any_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// The lines due at `now_ms`, each class's failures since its last line once that line is
    /// `interval_ms` old (or there was none); their failures are then forgotten.
    pub fn due_at(&self, now_ms: u64) -> Vec<FailureLine> {
        if !self.pending.load(Ordering::Acquire) {
            return Vec::new();
        }
        let mut classes = self.classes.lock().unwrap_or_else(|e| e.into_inner());
        let mut lines = Vec::new();
        let mut left = false;
        for (class, pending) in FailureClass::ALL.into_iter().zip(classes.iter_mut()) {
            if pending.failures == 0 {
                continue;
            }
            let due = pending
                .last_line_ms
                .is_none_or(|last| now_ms.saturating_sub(last) >= self.interval_ms);
            if !due {
                left = true;
                continue;
            }
            lines.push(FailureLine {
                edgelimit: STORE_FAILURE.to_string(),
                class,
                misconfiguration: class.is_misconfiguration(),
                failures: pending.failures,
                suppressed: pending.failures - 1,
                first_ms: pending.first_ms,
                last_ms: pending.last_ms,
                error: pending.error.take().unwrap_or_default(),
            });
            pending.failures = 0;
            pending.last_line_ms = Some(now_ms);
        }
        self.pending.store(left, Ordering::Release);
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_700_000_000_000;

    fn auth() -> StoreError {
        StoreError::Auth("WRONGPASS invalid or missing auth token".into())
    }

    #[test]
    fn a_class_is_logged_at_its_first_failure_then_once_per_interval_with_the_rest_counted() {
        let log = FailureLog::new(60_000);
        assert!(log.due_at(T).is_empty(), "nothing failed");
        log.note_at(&auth(), T);
        let first = log.due_at(T);
        assert_eq!(first.len(), 1);
        assert_eq!(
            (first[0].class, first[0].failures, first[0].suppressed),
            (FailureClass::RefusedAuth, 1, 0)
        );
        assert!(first[0].misconfiguration);
        assert!(first[0].error.contains("WRONGPASS"), "{:?}", first[0]);
        // 99 more within the minute: no line until the minute is up, then one for them all.
        for i in 1..100 {
            log.note_at(&auth(), T + i * 100);
            assert!(log.due_at(T + i * 100).is_empty(), "suppressed at {i}");
        }
        assert!(log.due_at(T + 59_999).is_empty());
        let summary = log.due_at(T + 60_000);
        assert_eq!(summary.len(), 1);
        assert_eq!(
            (
                summary[0].failures,
                summary[0].suppressed,
                summary[0].first_ms,
                summary[0].last_ms
            ),
            (99, 98, T + 100, T + 9_900)
        );
        // Nothing since: no line, however long after.
        assert!(log.due_at(T + 600_000).is_empty());
    }

    #[test]
    fn each_class_has_its_own_interval() {
        let log = FailureLog::new(10_000);
        log.note_at(&StoreError::Timeout { after_ms: 50 }, T);
        assert_eq!(log.due_at(T).len(), 1);
        log.note_at(&StoreError::Timeout { after_ms: 50 }, T + 1);
        // Another class's first failure is due at once, whatever the first class's interval.
        log.note_at(&auth(), T + 2);
        let lines = log.due_at(T + 2);
        assert_eq!(
            lines.iter().map(|l| l.class).collect::<Vec<_>>(),
            [FailureClass::RefusedAuth]
        );
        let lines = log.due_at(T + 10_000);
        assert_eq!(
            lines
                .iter()
                .map(|l| (l.class, l.misconfiguration, l.failures))
                .collect::<Vec<_>>(),
            [(FailureClass::Timeout, false, 1)]
        );
    }

    #[test]
    fn a_line_never_carries_the_stores_secrets() {
        let log = FailureLog::default();
        log.note_at(
            &StoreError::Auth(
                "WRONGPASS at rediss://default:p@ss:W0rd%40@eu1.example.com:6379 \
                 (https://eu1.example.com/pipeline?_token=AXk2cBQ)"
                    .into(),
            ),
            T,
        );
        let line = &log.due_at(T)[0];
        for secret in ["p@ss", "W0rd", "AXk2cBQ"] {
            assert!(!line.error.contains(secret), "{secret} in {:?}", line.error);
            assert!(!line.to_json().contains(secret), "{secret} in the JSON");
        }
        assert!(
            line.error
                .contains("rediss://default:***@eu1.example.com:6379")
                && line.error.contains("_token=***"),
            "what is not secret stays: {:?}",
            line.error
        );
    }

    #[test]
    fn a_line_is_one_json_object_naming_its_class() {
        let log = FailureLog::default();
        log.note_at(&StoreError::from_error_reply("NOSCRIPT x"), T);
        let json = log.due_at(T)[0].to_json();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(value["edgelimit"], STORE_FAILURE);
        assert_eq!(value["class"], "refused_script");
        assert_eq!(value["misconfiguration"], true);
        assert!(!json.contains('\n'));
    }
}
