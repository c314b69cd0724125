//! Every suggestion replayed before it is shown: the suggested policy and the one a step smaller
//! go through the policy replay's engine (`policy::Replay`, the code `sim replay` runs) over the
//! whole trace in order, which gives the requests denied and the most admitted in any window;
//! the clients denied come from replaying each client alone with the library's step. Both
//! counts of requests denied must agree, the suggestion must meet the target and the one
//! smaller must not, or the run fails rather than print a wrong answer.

use edgelimit::Policy;

use super::parallel::per_client;
use super::search::{denied, Found};
use super::target::By;
use super::traffic::Traffic;
use crate::error::SimError;
use crate::policy::Replay;

/// Events handed to the engine at a time.
const CHUNK: usize = 1024;

/// What one policy did over the trace.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Replayed {
    /// The policy, as `--policy` takes it.
    pub policy: String,
    /// Clients denied at least once.
    pub clients_denied: u64,
    /// Requests denied.
    pub requests_denied: u64,
    /// The most cost it admitted from one client in any span of the window (the exact sliding
    /// count of what it let through).
    pub max_admitted_in_window: u64,
    /// That as a multiple of the limit: above 1 at window boundaries for `fixed` and
    /// `sliding-counter`, and for the buckets' bursts.
    pub max_window_multiple: f64,
}

/// A found suggestion and the one a step smaller, replayed.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The suggestion.
    pub suggested: Replayed,
    /// One step smaller.
    pub one_less: Option<Replayed>,
}

/// Replays every found suggestion and its one-smaller policy over `traffic`, and holds them to
/// the target (`allowed` clients or requests, `by`).
pub fn verify(
    traffic: &Traffic,
    found: &[Found],
    by: By,
    allowed: u64,
    threads: usize,
) -> Result<Vec<Option<Checked>>, SimError> {
    let policies: Vec<Policy> = found
        .iter()
        .flat_map(|f| f.policy.iter().chain(f.one_less.iter()).copied())
        .collect();
    if policies.is_empty() {
        return Ok(found.iter().map(|_| None).collect());
    }
    let mut replay = Replay::new(&policies)?;
    for chunk in traffic.events().chunks(CHUNK) {
        replay.step_all(chunk);
    }
    let results = replay.finish(traffic.interner());
    let mut results = results.into_iter();
    let mut checked = Vec::with_capacity(found.len());
    for f in found {
        let Some(policy) = f.policy else {
            checked.push(None);
            continue;
        };
        let mut replayed = |p: Policy| -> Result<Replayed, SimError> {
            let engine = results
                .next()
                .ok_or_else(|| SimError::Verification("a result is missing".into()))?;
            let per_client = per_client(traffic, threads, |c| denied(&p, traffic.client(c)));
            let requests_denied: u64 = per_client.iter().sum();
            if requests_denied != engine.denied {
                return Err(SimError::Verification(format!(
                    "{p}: the engine denied {} requests, the client-by-client replay {requests_denied}",
                    engine.denied
                )));
            }
            Ok(Replayed {
                policy: p.to_string(),
                clients_denied: per_client.iter().filter(|&&d| d > 0).count() as u64,
                requests_denied,
                max_admitted_in_window: engine.max_admitted_in_window,
                max_window_multiple: engine.max_window_multiple,
            })
        };
        let suggested = replayed(policy)?;
        let one_less = f.one_less.map(&mut replayed).transpose()?;
        let measure = |r: &Replayed| match by {
            By::Clients => r.clients_denied,
            By::Requests => r.requests_denied,
        };
        if measure(&suggested) > allowed {
            return Err(SimError::Verification(format!(
                "{} denies {} {by}, more than the {allowed} allowed",
                suggested.policy,
                measure(&suggested)
            )));
        }
        if let Some(less) = &one_less {
            if measure(less) <= allowed {
                return Err(SimError::Verification(format!(
                    "{} (one less) denies {} {by}, within the {allowed} allowed",
                    less.policy,
                    measure(less)
                )));
            }
        }
        checked.push(Some(Checked {
            suggested,
            one_less,
        }));
    }
    Ok(checked)
}
