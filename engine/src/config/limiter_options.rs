//! Settings checked one field at a time, by the configuration's own rules and bounds, for a host
//! that takes them in its own shape: the npm package's `new Ratelimit(options)` (js/src/options.rs)
//! reads its `timeout`, `time`, `denialCache…` and each limit's `exceed`, `blockFor` and `enforce`
//! here, so a knob means the same, and is refused for the same reason within the same bounds,
//! wherever it is written. [`FieldError::field`] is the configuration file's name of the field
//! (`block_for`); a host spelling it its own way (`blockFor`) maps it.

use std::ops::RangeInclusive;

use edgelimit::{Algorithm, Policy, TimeMode};

use super::ConfigError;
use crate::rules::{Enforce, Exceed, Scope};

/// A setting refused, named as the configuration file names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field: `timeout_ms`, `block_for`, …
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

impl FieldError {
    fn new(field: &'static str, problem: impl Into<String>) -> FieldError {
        FieldError {
            field,
            problem: problem.into(),
        }
    }

    /// The error in the configuration file, whose fields sit under `at` (`""` at the top).
    pub(super) fn under(self, at: &str) -> ConfigError {
        if at.is_empty() {
            ConfigError::at(self.field, self.problem)
        } else {
            ConfigError::at(format!("{at} → {}", self.field), self.problem)
        }
    }
}

/// The longest store timeout, in ms: a limiter that waits longer for its store is slower than
/// the request it guards.
pub const MAX_TIMEOUT_MS: u64 = 30_000;

/// The longest `block_for`, in ms: a block is kept beside the limit's state, whose garbage is
/// collected after a day at most.
pub const MAX_BLOCK_MS: u64 = 86_400_000;

/// `value` if `range` holds it.
pub(super) fn within<T>(
    field: &'static str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<T, FieldError>
where
    T: PartialOrd + std::fmt::Display,
{
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(FieldError::new(
            field,
            format!("{value} is outside {}..={}", range.start(), range.end()),
        ))
    }
}

/// `timeout_ms`: how long one store round trip may take, 1 ms to [`MAX_TIMEOUT_MS`].
pub fn timeout_ms(value: u64) -> Result<u64, FieldError> {
    within("timeout_ms", value, 1..=MAX_TIMEOUT_MS)
}

/// `denial_cache_ms`: how long a denial is remembered at most, 0 (off) to
/// [`super::MAX_DENIAL_CACHE_MS`]: a `reset`, tier or override must take effect in minutes.
pub fn denial_cache_ms(value: u64) -> Result<u64, FieldError> {
    within("denial_cache_ms", value, 0..=super::MAX_DENIAL_CACHE_MS)
}

/// `time`: Redis's clock (`server`, the default) or the host's (`local`). Global limits decide
/// in two stores, a region's and the home's, on one clock: the Worker's (docs/design.md §9).
pub fn time_mode(time: Option<&str>, global: bool) -> Result<TimeMode, FieldError> {
    let default_time = if global { "local" } else { "server" };
    match time.unwrap_or(default_time) {
        "server" if global => Err(FieldError::new(
            "time",
            "global limits decide in a region's store and the home's on one clock, the \
             Worker's: leave `time` out or set it to `local`",
        )),
        "server" => Ok(TimeMode::Server),
        "local" => Ok(TimeMode::Local),
        other => Err(FieldError::new(
            "time",
            format!("`{other}` is neither `server` (Redis TIME) nor `local`"),
        )),
    }
}

/// A limit's `exceed`, `block_for` and `enforce`, each checked and then checked together.
#[derive(Debug, Clone, PartialEq)]
pub struct Exceeding {
    /// What exceeding the limit does.
    pub exceed: Exceed,
    /// How long a denial blocks the identifier, in ms (0: no block).
    pub block_ms: u64,
    /// The share of identifiers the limit is enforced for (`None`: every one).
    pub enforce: Option<Enforce>,
}

impl Exceeding {
    /// Checks the three fields of a limit with `policy`, decided in `scope`; `shadow`: the limit
    /// is never enforced (a shadow rule's, or a shadow limit), so none may soften, delay or
    /// stage it.
    pub fn check(
        policy: &Policy,
        scope: Scope,
        shadow: bool,
        exceed: Option<&str>,
        block_for: Option<&str>,
        enforce: Option<&str>,
    ) -> Result<Exceeding, FieldError> {
        let exceed_value = exceed
            .map_or(Ok(Exceed::Deny), str::parse::<Exceed>)
            .map_err(|problem| FieldError::new("exceed", problem))?;
        let block_ms = match block_for {
            None => 0,
            Some(text) => {
                let ms = edgelimit::policy::parse_window(text).map_err(|problem| {
                    FieldError::new("block_for", format!("`{text}`: {problem}"))
                })?;
                if ms == 0 || ms > MAX_BLOCK_MS {
                    return Err(FieldError::new(
                        "block_for",
                        format!("`{text}` is not within 1ms..=1d: a block lasts more than 0 and at most 1 day"),
                    ));
                }
                ms
            }
        };
        let enforce_value = enforce
            .map(str::parse::<Enforce>)
            .transpose()
            .map_err(|problem| FieldError::new("enforce", problem))?;
        if shadow {
            for (name, given) in [
                ("exceed", exceed.is_some() && exceed_value != Exceed::Deny),
                ("enforce", enforce.is_some()),
            ] {
                if given {
                    return Err(FieldError::new(
                        name,
                        "the limit is `shadow` (or its rule is): it is never enforced, so there \
                         is nothing to soften, delay or stage; set it on an enforced limit",
                    ));
                }
            }
        }
        if exceed_value == Exceed::Soft && block_ms > 0 {
            return Err(FieldError::new(
                "block_for",
                "a `soft` limit never refuses a request, so it has nothing to block: drop \
                 `block_for` or `exceed = \"soft\"`",
            ));
        }
        if exceed_value == Exceed::Soft && enforce_value.is_some() {
            return Err(FieldError::new(
                "enforce",
                "a `soft` limit is enforced for nobody already: staging its enforcement means \
                 nothing; drop `enforce` or `exceed = \"soft\"`",
            ));
        }
        if let Exceed::Delay { .. } = exceed_value {
            let why = match policy.algorithm() {
                Algorithm::Gcra => None,
                Algorithm::Concurrency => Some(
                    "a concurrency limit frees a place when a request ends, at no time known \
                     ahead, so a request cannot be given a place later; use `deny` or `soft`",
                ),
                Algorithm::TokenBucket => Some(
                    "a token bucket keeps tokens, not the time a place is free; \
                     `gcra L/W burst B` decides exactly as `token-bucket L/W burst B` and \
                     reserves a later place",
                ),
                _ => Some(
                    "a window's future quota has no state to reserve a later place in; a \
                     `gcra` policy shapes the same rate",
                ),
            };
            if let Some(why) = why {
                return Err(FieldError::new(
                    "exceed",
                    format!("delay needs a gcra policy (the shaping algorithm): {why}"),
                ));
            }
        }
        if scope == Scope::Global {
            let unsupported = if block_ms > 0 {
                Some("block_for")
            } else if matches!(exceed_value, Exceed::Delay { .. }) {
                Some("exceed")
            } else {
                None
            };
            if let Some(name) = unsupported {
                return Err(FieldError::new(
                    name,
                    "not supported on global limits (a region decides them from its share and \
                     its leases, which keep no block and reserve no later place); set \
                     `scope = \"region\"` to decide the limit in each region alone",
                ));
            }
        }
        Ok(Exceeding {
            exceed: exceed_value,
            block_ms,
            enforce: enforce_value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: &str) -> Policy {
        spec.parse().expect("a policy")
    }

    #[test]
    fn bounds_are_the_configuration_files() {
        assert_eq!(timeout_ms(MAX_TIMEOUT_MS), Ok(MAX_TIMEOUT_MS));
        assert_eq!(timeout_ms(0).unwrap_err().field, "timeout_ms");
        assert_eq!(denial_cache_ms(0), Ok(0));
        let e = denial_cache_ms(super::super::MAX_DENIAL_CACHE_MS + 1).unwrap_err();
        assert_eq!(
            (e.field, e.problem.as_str()),
            ("denial_cache_ms", "600001 is outside 0..=600000")
        );
        assert_eq!(time_mode(None, false), Ok(TimeMode::Server));
        assert_eq!(time_mode(None, true), Ok(TimeMode::Local));
        assert_eq!(time_mode(Some("server"), true).unwrap_err().field, "time");
    }

    #[test]
    fn exceeding_is_checked_field_by_field_then_together() {
        let gcra = policy("gcra 10/1s burst 20");
        let check = |shadow, exceed, block_for, enforce| {
            Exceeding::check(&gcra, Scope::Region, shadow, exceed, block_for, enforce)
        };
        let ok = check(false, Some("delay 500ms"), Some("1d"), Some("10%")).unwrap();
        assert_eq!(
            (ok.exceed, ok.block_ms),
            (Exceed::Delay { max_ms: 500 }, 86_400_000)
        );
        let refused = [
            (check(false, None, Some("0s"), None), "block_for"),
            (check(false, None, Some("2d"), None), "block_for"),
            (check(false, Some("soft"), Some("1m"), None), "block_for"),
            (check(false, Some("soft"), None, Some("5%")), "enforce"),
            (check(true, Some("delay 1s"), None, None), "exceed"),
            (check(true, None, None, Some("5%")), "enforce"),
        ];
        for (result, field) in refused {
            assert_eq!(result.unwrap_err().field, field);
        }
        let fixed = Exceeding::check(
            &policy("fixed 5/1m"),
            Scope::Region,
            false,
            Some("delay 1s"),
            None,
            None,
        );
        assert!(fixed.unwrap_err().problem.contains("gcra"));
        let global = Exceeding::check(&gcra, Scope::Global, false, None, Some("1m"), None);
        assert_eq!(global.unwrap_err().field, "block_for");
    }
}
