//! One policy's tallies during replay, and the finished, serialisable result.
//!
//! Definitions (each per request, in trace order):
//! - **false allow**: the policy admitted a request the exact log (replayed alongside as its own
//!   limiter, with its own admissions) denied; **false deny**: the reverse. Cloudflare's "wrongly
//!   allowed" / "wrongly limited" shares are these over all requests.
//! - **rate error**: before each request, the quota the policy believes used (`capacity −
//!   remaining`) against what the policy really admitted for that client in the trailing
//!   reference window; reported as the mean absolute difference, and as its sum over the sum of
//!   real counts (Cloudflare's "average difference between real and approximate rate"). Only for
//!   the window algorithms: a bucket's state is a debt that drains continuously, not an estimate
//!   of a windowed count, so the comparison would measure the definition, not an error.
//! - **max admitted in window**: the most cost the policy admitted for one client in any span of
//!   the reference window (exact, every start time, not only aligned windows).

use edgelimit::Policy;

use crate::event::Interner;
use crate::exact::pct;
use crate::readers::time::format_utc;
/// Running tallies of one policy.
#[derive(Debug)]
pub(crate) struct Tally {
    pub(crate) admitted: u64,
    pub(crate) denied: u64,
    pub(crate) false_allows: u64,
    pub(crate) false_denies: u64,
    pub(crate) abs_rate_error: u128,
    pub(crate) real_rate: u128,
    pub(crate) max_in_window: u64,
    pub(crate) worst: Option<(u32, u64, u64)>,
    /// The place in the trace (0 for its first event) of the request that set `worst`: of
    /// equal maxima found on different threads, the earliest is the one one thread finds.
    pub(crate) worst_seq: u64,
    pub(crate) max_log_entries: usize,
}

impl Tally {
    pub(crate) fn new() -> Tally {
        Tally {
            admitted: 0,
            denied: 0,
            false_allows: 0,
            false_denies: 0,
            abs_rate_error: 0,
            real_rate: 0,
            max_in_window: 0,
            worst: None,
            worst_seq: 0,
            max_log_entries: 0,
        }
    }

    /// Adds the tallies of `other`, which counted other clients of the same trace, as if one
    /// tally had counted them all in trace order; `other`'s client ids become `global(id)`.
    pub(crate) fn merge(&mut self, other: &Tally, global: impl Fn(u32) -> u32) {
        self.admitted += other.admitted;
        self.denied += other.denied;
        self.false_allows += other.false_allows;
        self.false_denies += other.false_denies;
        self.abs_rate_error += other.abs_rate_error;
        self.real_rate += other.real_rate;
        self.max_log_entries = self.max_log_entries.max(other.max_log_entries);
        if let Some((client, start, end)) = other.worst {
            let later_tie = self.worst.is_some()
                && other.max_in_window == self.max_in_window
                && other.worst_seq > self.worst_seq;
            if other.max_in_window > self.max_in_window
                || (other.max_in_window == self.max_in_window && !later_tie)
            {
                self.max_in_window = other.max_in_window;
                self.worst = Some((global(client), start, end));
                self.worst_seq = other.worst_seq;
            }
        }
    }
}

/// A policy's mistake on one request, against its exact reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mistake {
    /// Admitted, where the reference denied.
    FalseAllow,
    /// Denied, where the reference admitted.
    FalseDeny,
}

impl Tally {
    /// Counts one request of `cost`: whether the policy `allowed` it (after which it counts
    /// `used` as taken) and whether its reference did; `real` is the cost the policy really
    /// admitted for the client in the trailing reference window before the request.
    #[inline]
    pub(crate) fn count(
        &mut self,
        allowed: bool,
        used: u64,
        reference_allowed: bool,
        cost: i64,
        real: u64,
    ) -> Option<Mistake> {
        // The quota the policy saw as used before this request.
        let taken = if allowed { cost.max(0) as u64 } else { 0 };
        let used_before = used.saturating_sub(taken);
        self.abs_rate_error += u128::from(real.abs_diff(used_before));
        self.real_rate += u128::from(real);
        if allowed {
            self.admitted += 1;
            (!reference_allowed).then(|| {
                self.false_allows += 1;
                Mistake::FalseAllow
            })
        } else {
            self.denied += 1;
            reference_allowed.then(|| {
                self.false_denies += 1;
                Mistake::FalseDeny
            })
        }
    }
}

/// The span of the reference window in which a policy admitted the most for one client.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorstWindow {
    /// The client.
    pub client: String,
    /// The client's dense id in this trace.
    #[serde(skip)]
    pub client_id: u32,
    /// The first admission in the span (UTC epoch ms).
    pub start_ms: u64,
    /// The last admission in the span (UTC epoch ms).
    pub end_ms: u64,
    /// `end_ms` as UTC text.
    pub end_utc: String,
}

/// How many clients fall in each error-share bucket.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ErrorBucket {
    /// The bucket, e.g. `1–5%`.
    pub label: &'static str,
    /// Clients whose (false allows + false denies) / requests falls in it.
    pub clients: u64,
}

/// One client's errors.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ClientError {
    /// The client.
    pub client: String,
    /// Its requests.
    pub requests: u64,
    /// Requests admitted that the exact log denied.
    pub false_allows: u64,
    /// Requests denied that the exact log admitted.
    pub false_denies: u64,
}

/// The per-client error distribution.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PerClient {
    /// Clients in the trace.
    pub clients: u64,
    /// Clients with at least one false allow or false deny.
    pub clients_with_errors: u64,
    /// Clients by error share.
    pub histogram: Vec<ErrorBucket>,
    /// The clients with the most errors (up to 10).
    pub top: Vec<ClientError>,
}

/// Everything measured for one policy. Counts are requests; windows sum cost (1 per log line).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PolicyResult {
    /// The policy, as written back by the library (canonical spec).
    pub spec: String,
    /// The algorithm.
    pub algorithm: String,
    /// Limit per window (refill per window for the buckets).
    pub limit: u64,
    /// The window in ms.
    pub window_ms: u64,
    /// The burst (capacity) for the buckets; the limit for the windows.
    pub burst: u64,
    /// The exact sliding log it is compared with (see `exact::reference`).
    pub reference: String,
    /// Requests replayed.
    pub requests: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied.
    pub denied: u64,
    /// The most admitted for one client in any span of the reference window.
    pub max_admitted_in_window: u64,
    /// `max_admitted_in_window` over the reference limit (2.0 = twice the limit).
    pub max_window_multiple: f64,
    /// Where that happened.
    pub worst_window: Option<WorstWindow>,
    /// Admitted by the policy, denied by the exact log.
    pub false_allows: u64,
    /// Denied by the policy, admitted by the exact log.
    pub false_denies: u64,
    /// `false_allows / requests`, in percent (Cloudflare measured 0.003% for its counter).
    pub wrongly_allowed_pct: f64,
    /// `false_denies / requests`, in percent.
    pub wrongly_limited_pct: f64,
    /// Mean |real − believed| count in the window, per request. `None` for the buckets, whose
    /// state is a decaying debt rather than an estimate of a windowed count.
    pub mean_abs_rate_error: Option<f64>,
    /// Σ|real − believed| / Σ real, in percent (Cloudflare measured 6% for its counter); `None`
    /// for the buckets.
    pub rate_error_pct: Option<f64>,
    /// The per-client error distribution.
    pub per_client: PerClient,
    /// Keys holding state at the end of the replay.
    pub keys: u64,
    /// Bytes all keys' states take at the end of the replay (in-process representation).
    pub state_bytes: u64,
    /// The most bytes one key's state took at any time.
    pub state_bytes_per_key_max: u64,
    /// For a concurrency policy: its flights (see `exact::inflight`). For it the window fields
    /// above read as: `max_admitted_in_window` the peak in flight, `reference` the exact
    /// in-flight count, the rate error |really in flight − leases the policy counted|.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlightResult>,
}

/// What a concurrency policy's replay measured beyond the counts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InFlightResult {
    /// The lease timeout (ms): how long a request without a duration holds its lease.
    pub timeout_ms: u64,
    /// The most leases one client had in flight at once (requests the policy admitted, each for
    /// its duration): above the limit only when leases time out before their requests end.
    pub peak_in_flight: u64,
    /// Requests whose line carried a duration (released that long after their start).
    pub requests_with_duration: u64,
    /// Requests without one (holding their lease until the timeout).
    pub requests_without_duration: u64,
    /// The clients with the highest peaks (up to 10).
    pub top: Vec<PeakInFlight>,
}

/// One client's peak in flight.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PeakInFlight {
    /// The client.
    pub client: String,
    /// The most leases it had in flight at once.
    pub peak: u64,
    /// When it first reached it (UTC epoch ms).
    pub at_ms: u64,
    /// `at_ms` as UTC text.
    pub at_utc: String,
}

/// Builds the result from a finished tally.
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish(
    policy: &Policy,
    reference: &Policy,
    tally: &Tally,
    per_client: impl Iterator<Item = [u32; 2]>,
    requests_per_client: &[u32],
    interner: &Interner,
    footprint: (usize, usize),
    key_bytes_max: usize,
) -> PolicyResult {
    let requests = tally.admitted + tally.denied;
    let buckets = policy.algorithm().takes_burst();
    const LABELS: [&str; 5] = ["0%", "<1%", "1–5%", "5–20%", "≥20%"];
    let mut histogram = [0u64; 5];
    let mut top = Vec::new();
    for (id, ([fa, fd], &n)) in per_client.zip(requests_per_client).enumerate() {
        if n == 0 {
            continue;
        }
        let share = f64::from(fa + fd) / f64::from(n);
        let bucket = match share {
            _ if fa + fd == 0 => 0,
            s if s < 0.01 => 1,
            s if s < 0.05 => 2,
            s if s < 0.20 => 3,
            _ => 4,
        };
        histogram[bucket] += 1;
        if fa + fd > 0 {
            top.push((fa + fd, id as u32, n, fa, fd));
        }
    }
    top.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let clients_with_errors = top.len() as u64;
    let top = top
        .into_iter()
        .take(10)
        .map(|(_, id, n, fa, fd)| ClientError {
            client: interner.name(id),
            requests: u64::from(n),
            false_allows: u64::from(fa),
            false_denies: u64::from(fd),
        })
        .collect();
    let clients = requests_per_client.iter().filter(|&&n| n > 0).count() as u64;
    PolicyResult {
        spec: policy.to_string(),
        algorithm: policy.algorithm().to_string(),
        limit: policy.limit(),
        window_ms: policy.window_ms(),
        burst: policy.capacity(),
        reference: reference.to_string(),
        requests,
        admitted: tally.admitted,
        denied: tally.denied,
        max_admitted_in_window: tally.max_in_window,
        max_window_multiple: tally.max_in_window as f64 / reference.limit() as f64,
        worst_window: tally.worst.map(|(client, start_ms, end_ms)| WorstWindow {
            client: interner.name(client),
            client_id: client,
            start_ms,
            end_ms,
            end_utc: format_utc(end_ms),
        }),
        false_allows: tally.false_allows,
        false_denies: tally.false_denies,
        wrongly_allowed_pct: pct(tally.false_allows, requests),
        wrongly_limited_pct: pct(tally.false_denies, requests),
        mean_abs_rate_error: (!buckets).then(|| {
            if requests == 0 {
                0.0
            } else {
                tally.abs_rate_error as f64 / requests as f64
            }
        }),
        rate_error_pct: (!buckets).then(|| {
            if tally.real_rate == 0 {
                0.0
            } else {
                tally.abs_rate_error as f64 * 100.0 / tally.real_rate as f64
            }
        }),
        per_client: PerClient {
            clients,
            clients_with_errors,
            histogram: LABELS
                .iter()
                .zip(histogram)
                .map(|(&label, clients)| ErrorBucket { label, clients })
                .collect(),
            top,
        },
        keys: footprint.0 as u64,
        state_bytes: footprint.1 as u64,
        state_bytes_per_key_max: key_bytes_max as u64,
        in_flight: None,
    }
}
