//! The data behind the boundary charts: for one policy's worst window, the count admitted in the
//! trailing window over time — for the policy and for the exact log on the same requests — so a
//! fixed window's 2× burst across an edge is plain to see.

use edgelimit::algorithm::State;
use edgelimit::Policy;

use super::metrics::WorstWindow;
use crate::error::SimError;
use crate::exact::reference::reference;

/// One point of a step function: from `t_ms` on, the value is `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Point {
    /// UTC epoch ms.
    pub t_ms: u64,
    /// Cost admitted in the trailing window at `t_ms`.
    pub count: u64,
}

/// A boundary chart's data.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BoundarySeries {
    /// The policy.
    pub spec: String,
    /// The exact log it is compared with.
    pub reference: String,
    /// The client whose worst window this is.
    pub client: String,
    /// The chart's span (UTC epoch ms).
    pub from_ms: u64,
    /// The chart's end.
    pub to_ms: u64,
    /// The trailing window counted over (the reference window).
    pub window_ms: u64,
    /// The reference limit (the line a correct limiter stays under).
    pub limit: u64,
    /// Window edges inside the span (fixed window and sliding counter only): aligned ones, or a
    /// calendar fixed window's period boundaries.
    pub edges: Vec<u64>,
    /// The policy's trailing count.
    pub policy: Vec<Point>,
    /// The exact log's trailing count on the same requests.
    pub exact: Vec<Point>,
    /// Requests the client sent in the span, as `(time_ms, admitted by the policy)`.
    pub requests: Vec<(u64, bool)>,
}

/// Builds the chart data for `policy` around `worst`, from all of that client's events in time
/// order (keys are independent, so replaying one client alone decides exactly as the full run).
pub fn boundary_series(
    policy: &Policy,
    worst: &WorstWindow,
    events: &[(u64, i64)],
) -> Result<BoundarySeries, SimError> {
    let exact_policy = reference(policy)?;
    let w = exact_policy.window_ms();
    let from_ms = worst.end_ms.saturating_sub(2 * w);
    let to_ms = worst.end_ms.saturating_add(w);
    let mut state = State::fresh(policy.algorithm());
    let mut exact_state = State::fresh(exact_policy.algorithm());
    let mut admitted = Vec::new();
    let mut exact_admitted = Vec::new();
    let mut requests = Vec::new();
    for &(t, cost) in events {
        let ok = state.apply(policy, t, cost).decision.allowed;
        let exact_ok = exact_state.apply(&exact_policy, t, cost).decision.allowed;
        if ok && cost > 0 {
            admitted.push((t, cost as u64));
        }
        if exact_ok && cost > 0 {
            exact_admitted.push((t, cost as u64));
        }
        if (from_ms..=to_ms).contains(&t) {
            requests.push((t, ok));
        }
    }
    let edges = match policy.algorithm() {
        _ if policy.calendar().is_some() => period_edges(policy, from_ms, to_ms),
        edgelimit::Algorithm::FixedWindow | edgelimit::Algorithm::SlidingCounter => {
            let pw = policy.window_ms();
            let first = from_ms.div_ceil(pw) * pw;
            (0..)
                .map(|k| first + k * pw)
                .take_while(|&e| e <= to_ms)
                .take(200)
                .collect()
        }
        _ => Vec::new(),
    };
    Ok(BoundarySeries {
        spec: policy.to_string(),
        reference: exact_policy.to_string(),
        client: worst.client.clone(),
        from_ms,
        to_ms,
        window_ms: w,
        limit: exact_policy.limit(),
        edges,
        policy: trailing_steps(&admitted, w, from_ms, to_ms),
        exact: trailing_steps(&exact_admitted, w, from_ms, to_ms),
        requests,
    })
}

/// A calendar fixed window's period boundaries in `[from, to]`, at most 200 of them.
fn period_edges(policy: &Policy, from: u64, to: u64) -> Vec<u64> {
    let Some(calendar) = policy.calendar() else {
        return Vec::new();
    };
    let (start, end) = calendar.period_of(from);
    let first = if start == from { start } else { end };
    std::iter::successors(Some(first), |&e| Some(calendar.period_of(e).1))
        .take_while(|&e| e <= to)
        .take(200)
        .collect()
}

/// The step function "cost admitted in `(t − w, t]`" over `[from, to]`: it changes only when an
/// admission enters (at `a`) or leaves (at `a + w`), so those are the only points needed.
fn trailing_steps(admitted: &[(u64, u64)], w: u64, from: u64, to: u64) -> Vec<Point> {
    let mut prefix = Vec::with_capacity(admitted.len() + 1);
    prefix.push(0u64);
    for &(_, c) in admitted {
        prefix.push(prefix.last().copied().unwrap_or(0) + c);
    }
    // Cost admitted at times ≤ x.
    let upto = |x: u64| prefix[admitted.partition_point(|&(t, _)| t <= x)];
    let count = |x: u64| upto(x) - if x >= w { upto(x - w) } else { 0 };
    let mut times: Vec<u64> = vec![from, to];
    for &(a, _) in admitted {
        for t in [a, a + w] {
            if (from..=to).contains(&t) {
                times.push(t);
            }
        }
    }
    times.sort_unstable();
    times.dedup();
    let mut points: Vec<Point> = Vec::with_capacity(times.len());
    for t in times {
        let c = count(t);
        if points.last().is_none_or(|p| p.count != c) || t == to {
            points.push(Point { t_ms: t, count: c });
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_enter_and_leave() {
        let pts = trailing_steps(&[(10, 1), (12, 2)], 5, 0, 20);
        let v: Vec<(u64, u64)> = pts.iter().map(|p| (p.t_ms, p.count)).collect();
        assert_eq!(v, vec![(0, 0), (10, 1), (12, 3), (15, 2), (17, 0), (20, 0)]);
    }

    #[test]
    fn a_calendar_window_marks_its_periods_boundaries() {
        // 2026-01-15 and 2026-04-15 00:00 UTC; the month starts at 00:00 UTC+02:00 of the 1st.
        let (from, to) = (1_768_435_200_000, 1_776_211_200_000);
        let policy: Policy = "fixed 10/month utc+02:00".parse().unwrap();
        let hour = 3_600_000;
        assert_eq!(
            period_edges(&policy, from, to),
            vec![
                1_769_904_000_000 - 2 * hour,
                1_772_323_200_000 - 2 * hour,
                1_775_001_600_000 - 2 * hour
            ]
        );
        assert_eq!(period_edges(&policy, from, from + hour), Vec::<u64>::new());
        let start = 1_769_904_000_000 - 2 * hour;
        assert_eq!(period_edges(&policy, start, start + 1), vec![start]);
    }
}
