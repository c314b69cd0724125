//! One policy replay from start to finish: read (with progress), replay, then — for the charts —
//! a second pass collecting the worst clients' requests. Used by `sim`, `sim replay` and the
//! tests.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use edgelimit::Policy;

use super::boundary::{boundary_series, BoundarySeries};
use super::engine::Replay;
use super::report::Report;
use super::shards::ShardedReplay;
use super::store::{connect, is_external, StoreChoice};
use crate::error::SimError;
use crate::input::Source;
use crate::progress::Progress;
use crate::readers::{ReadOptions, TraceReader};

/// Events handed to the engine at a time.
const CHUNK: usize = 1024;

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The trace.
    pub source: Source,
    /// How to read it.
    pub read: ReadOptions,
    /// The policies, in report order.
    pub policies: Vec<Policy>,
    /// Where decisions are made.
    pub store: StoreChoice,
    /// Show a progress bar (only drawn when standard error is a terminal).
    pub progress: bool,
    /// Compute the boundary charts' data (a second pass over the trace).
    pub boundaries: bool,
    /// Threads for a memory replay (`--threads`): above 1, the clients are split over that
    /// many replay threads while this one reads (`ShardedReplay`); the report is the same.
    /// A store replay runs on one.
    pub threads: usize,
}

/// Replays a trace and measures everything the reports show.
pub fn run(options: &RunOptions) -> Result<Report, SimError> {
    let started = Instant::now();
    let mut progress = Progress::new(options.progress, &options.source);
    let mut reader = TraceReader::open(&options.source, options.read.clone(), progress.counter())?;
    let mut replay = Replay::new(&options.policies)?;
    if replay.has_concurrency() && is_external(&options.store) {
        return Err(SimError::Usage(format!(
            "--store {}: a concurrency policy replays in memory only (a store replay sends \
             checks, not the releases when requests land); drop --store, or the concurrency \
             policy",
            options.store
        )));
    }
    if options.threads > 1 && !is_external(&options.store) {
        return run_sharded(options, started, progress, reader);
    }
    let mut store = connect(&options.store, &options.policies)?;
    // Events go to the engine in runs so it can read ahead (see `Replay::step_all`).
    let mut chunk = Vec::with_capacity(CHUNK);
    for ev in reader.by_ref() {
        let ev = ev?;
        match store.as_mut() {
            None => {
                chunk.push(ev);
                if chunk.len() == CHUNK {
                    replay.step_all(&chunk);
                    chunk.clear();
                }
            }
            Some(store) => store.push(ev, &mut replay)?,
        }
        progress.tick();
    }
    replay.step_all(&chunk);
    if let Some(store) = store.as_mut() {
        store.flush(&mut replay)?;
    }
    progress.finish();
    let stats = reader.stats();
    let interner = reader.into_interner();
    let policies = replay.finish(&interner);
    let elapsed = started.elapsed();
    let mut report = Report::new(
        stats,
        policies,
        options.store.to_string(),
        is_external(&options.store).then(|| replay.mismatches()),
        elapsed,
    );
    if options.boundaries {
        report.boundaries = boundaries(options, &report)?;
    }
    Ok(report)
}

/// [`run`] over `options.threads` replay threads, this one reading.
fn run_sharded(
    options: &RunOptions,
    started: Instant,
    mut progress: Progress,
    mut reader: TraceReader,
) -> Result<Report, SimError> {
    let mut replay = ShardedReplay::new(&options.policies, options.threads)?;
    for ev in reader.by_ref() {
        replay.push(ev?);
        progress.tick();
    }
    progress.finish();
    let stats = reader.stats();
    let interner = reader.into_interner();
    let policies = replay.finish(&interner);
    let mut report = Report::new(
        stats,
        policies,
        options.store.to_string(),
        None,
        started.elapsed(),
    );
    if options.boundaries {
        report.boundaries = boundaries(options, &report)?;
    }
    Ok(report)
}

/// The second pass: every request of each policy's worst client, then the chart data.
fn boundaries(options: &RunOptions, report: &Report) -> Result<Vec<BoundarySeries>, SimError> {
    let mut wanted: HashMap<u32, Vec<(u64, i64)>> = report
        .policies
        .iter()
        .filter_map(|p| p.worst_window.as_ref())
        .map(|w| (w.client_id, Vec::new()))
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let reader = TraceReader::open(
        &options.source,
        options.read.clone(),
        Arc::new(AtomicU64::new(0)),
    )?;
    for ev in reader {
        let ev = ev?;
        if let Some(list) = wanted.get_mut(&ev.client) {
            list.push((ev.time_ms, ev.cost));
        }
    }
    options
        .policies
        .iter()
        .zip(&report.policies)
        .filter_map(|(policy, result)| {
            let worst = result.worst_window.as_ref()?;
            Some(boundary_series(policy, worst, &wanted[&worst.client_id]))
        })
        .collect()
}
