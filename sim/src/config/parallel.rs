//! A configuration replay spread over threads, exact: the requests are split into groups that
//! share no state (`groups`: no limit's identifier, no shared bucket in common), whole groups go
//! to each thread, each thread replays its requests in trace order through its own
//! `EdgeReplay`, and their counts are merged into exactly what one replay reports — counts add
//! up, the worst windows and most denied identifiers are chosen as one replay chooses them, the
//! charts' buckets start where one replay's start, and `--decisions` rows are put back in trace
//! order.
//!
//! What spans groups keeps the replay on one thread ([`one_thread_reason`]); the isolate's
//! denial cache does too when it could have been full (`denial_spans`), found after the
//! threads ran: the replay is then made again on one thread.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use edgelimit::Algorithm;
use edgelimit_engine::Config;

use super::decisions::{DecisionLog, DecisionsReport};
use super::denial_spans::DenialSpans;
use super::engine::{EdgeReplay, Share, PREPARE_AHEAD};
use super::groups::{Assignment, ThreadedGrouping};
use super::outage::Outages;
use super::report::{ConfigReport, RuleReport};
use super::run::EdgeRunOptions;
use super::series::Series;
use super::tally::{merged_top, Totals};
use super::truth::Boundary;
use super::whatif::Answered;
use crate::error::SimError;
use crate::input::Source;
use crate::policy::thread_cpu_seconds;
use crate::progress::Progress;
use crate::readers::{Request, TraceReader};

/// Requests handed to a thread at a time.
const BLOCK: usize = 1 << 12;

/// Blocks queued per thread before the reader waits.
const QUEUE: usize = 8;

/// Why a configuration replay with these options runs on one thread, if it must: what it
/// decides with spans the groups a split keeps apart.
pub fn one_thread_reason(config: &Config, options: &EdgeRunOptions) -> Option<&'static str> {
    let limits = || config.rules.iter().flat_map(|r| &r.limits);
    if config.global.is_some() {
        return Some(
            "a `global` section: a global limit's pool is shared by every identifier of a region",
        );
    }
    if options.regions.assign.is_some() || options.regions.rtt.is_some() {
        return Some("--assign-regions and --rtt: regions are a `global` section's");
    }
    if options.baseline.is_some() || options.baseline_overrides.is_some() {
        return Some(
            "--baseline: the two configurations are compared request by request, and their \
             identifiers are not grouped together",
        );
    }
    if options.overrides.is_some() {
        return Some(
            "--overrides: the dynamic deny and allow lists are consulted on every request, with \
             the isolate's memory of their denials",
        );
    }
    if !options.outages.is_empty() {
        return Some("--outage: the isolate's fallback limiter decides every identifier while the store is down");
    }
    if limits().any(|l| l.idempotent) {
        return Some(
            "an idempotent limit: request ids are remembered, whichever identifier sends them",
        );
    }
    if limits().any(|l| {
        l.limit.policy.algorithm() == Algorithm::Concurrency
            || l.settle.is_some()
            || l.count_status.is_some()
    }) {
        return Some(
            "a concurrency limit or settled costs: requests landing are settled in time order \
             across identifiers",
        );
    }
    if matches!(&options.source, Source::File(p) if p == Path::new("-")) {
        return Some("standard input is read once, and the split takes two passes");
    }
    None
}

/// Why a replay split over threads was made again on one thread, found as it ran.
const WORKER_LOG: &str = "the trace is the Worker's own log (--format edgelimit), each line \
                          compared with the replay's in trace order";
const DENIAL_CACHE: &str = "the denial cache could have been full, and it then drops denials \
                            whoever they belong to";

/// A replay over `threads` threads, or why it must be made on one (see
/// [`one_thread_reason`]; also when the trace is the Worker's own log, or when the isolate's
/// denial cache could have been full).
pub fn run_threads(
    options: &EdgeRunOptions,
    config: Config,
    threads: usize,
) -> Result<Result<ThreadedRun, &'static str>, SimError> {
    let started = Instant::now();
    let decisions = options
        .decisions
        .as_deref()
        .map(DecisionLog::create)
        .transpose()?;
    // The first pass: which requests share state, the identifiers extracted on the threads
    // that will replay.
    let pass_cpu = thread_cpu_seconds();
    let mut grouping = ThreadedGrouping::new(&config, threads);
    let mut progress = Progress::new(options.progress, &options.source);
    let mut reader = TraceReader::open_requests(
        &options.source,
        options.read.clone(),
        options.request.clone(),
        progress.counter(),
    )?;
    while let Some(request) = reader.next_request().transpose()? {
        if request.logged.is_some() {
            return Ok(Err(WORKER_LOG));
        }
        grouping.add(request, |done| reader.recycle(done));
        progress.tick();
    }
    progress.finish();
    let assignment = grouping.assign(threads, |done| reader.recycle(done));
    drop(reader);
    let grouping_cpu = thread_cpu_seconds().zip(pass_cpu).map(|(b, a)| b - a);
    // The second: each request to its thread.
    let mut progress = Progress::new(options.progress, &options.source);
    let mut reader = TraceReader::open_requests(
        &options.source,
        options.read.clone(),
        options.request.clone(),
        progress.counter(),
    )?;
    let mut replay = ThreadedReplay::new(&config, &assignment, decisions.is_some())?;
    while let Some(request) = reader.next_request().transpose()? {
        replay.push(request)?;
        replay.recycle(|spent| reader.recycle(spent));
        progress.tick();
    }
    progress.finish();
    let (merged, cpu) = replay.finish(&config, &assignment)?;
    if merged.denial_cache_could_fill {
        return Ok(Err(DENIAL_CACHE));
    }
    let decisions = match decisions {
        Some(log) => Some(merged.write_decisions(log, &assignment)?),
        None => None,
    };
    let report = ConfigReport {
        decisions,
        ..ConfigReport::of_totals(
            options.config.display().to_string(),
            reader.stats(),
            started.elapsed().as_millis() as u64,
            merged.totals.report(),
            merged.rules,
            merged.series,
        )
    };
    Ok(Ok(ThreadedRun {
        report,
        grouping_cpu_seconds: grouping_cpu,
        thread_cpu_seconds: cpu,
        requests_per_thread: assignment.requests,
        largest_group: assignment.largest_group,
    }))
}

/// A replay made over threads, with what it cost.
#[derive(Debug)]
pub struct ThreadedRun {
    /// The report, as one thread makes it.
    pub report: ConfigReport,
    /// CPU seconds the first pass (grouping) took, where `/proc` has them.
    pub grouping_cpu_seconds: Option<f64>,
    /// CPU seconds each replay thread took, where `/proc` has them.
    pub thread_cpu_seconds: Vec<Option<f64>>,
    /// Requests each replay thread replayed.
    pub requests_per_thread: Vec<u64>,
    /// Requests in the largest group sharing state.
    pub largest_group: u64,
}

/// A block of requests, each with its place in the trace.
type Block = Vec<(u64, Request)>;

/// What a replay thread hands back: its share's counts, the decision rows each of its
/// requests wrote (in its order), and its CPU seconds.
type Done = (Share, Vec<u32>, Option<PathBuf>, Option<f64>);

/// Threads replaying shares of a trace's requests, fed request by request in trace order.
#[derive(Debug)]
pub struct ThreadedReplay {
    thread_of: Arc<[u32]>,
    blocks: Vec<Block>,
    senders: Vec<SyncSender<Block>>,
    workers: Vec<JoinHandle<Result<Done, SimError>>>,
    /// Blocks of requests the threads are done with, to be filled again.
    spent: Receiver<Block>,
    /// Emptied blocks, to hand requests over in without allocating.
    free: Vec<Block>,
    place: u64,
    /// The decisions files of the threads, removed when done.
    _scratch: Option<tempfile::TempDir>,
}

impl ThreadedReplay {
    /// Threads replaying `config` as `assignment` splits the requests; with `decisions`, each
    /// writes its rows to a scratch file, put back in trace order by `Merged::write_decisions`.
    pub fn new(
        config: &Config,
        assignment: &Assignment,
        decisions: bool,
    ) -> Result<ThreadedReplay, SimError> {
        let scratch = decisions
            .then(|| tempfile::tempdir().map_err(|e| SimError::io(std::env::temp_dir(), e)))
            .transpose()?;
        let threads = assignment.requests.len();
        let (give_back, spent) = sync_channel(threads * QUEUE);
        let mut senders = Vec::with_capacity(threads);
        let mut workers = Vec::with_capacity(threads);
        for k in 0..threads {
            let (tx, rx) = sync_channel::<Block>(QUEUE);
            let mut replay = EdgeReplay::new(config.clone(), Outages::default(), false)?;
            replay.count_denials();
            if let Some(start) = assignment.first_matched_ms {
                replay.start_series_at(start);
            }
            let path = scratch
                .as_ref()
                .map(|dir| dir.path().join(format!("decisions-{k}.csv")));
            if let Some(path) = &path {
                replay.write_decisions(DecisionLog::create(path)?);
            }
            let give_back = give_back.clone();
            senders.push(tx);
            workers.push(std::thread::spawn(move || {
                let before = thread_cpu_seconds();
                let (share, rows) = replay_share(replay, rx, give_back)?;
                let cpu = thread_cpu_seconds().zip(before).map(|(b, a)| b - a);
                Ok((share, rows, path, cpu))
            }));
        }
        Ok(ThreadedReplay {
            thread_of: assignment.thread_of.clone().into(),
            blocks: (0..threads).map(|_| Vec::with_capacity(BLOCK)).collect(),
            senders,
            workers,
            spent,
            free: Vec::new(),
            place: 0,
            _scratch: scratch,
        })
    }

    /// The next request of the trace, to its thread.
    pub fn push(&mut self, request: Request) -> Result<(), SimError> {
        let place = self.place;
        self.place += 1;
        let thread = *self.thread_of.get(place as usize).ok_or_else(|| {
            SimError::Usage("the trace changed between the two passes of a split replay".into())
        })? as usize;
        let block = &mut self.blocks[thread];
        block.push((place, request));
        if block.len() == BLOCK {
            let empty = self.free.pop().unwrap_or_else(|| Vec::with_capacity(BLOCK));
            let full = std::mem::replace(block, empty);
            // A thread gone (it failed) tells why when it is joined.
            let _ = self.senders[thread].send(full);
        }
        Ok(())
    }

    /// Hands the requests the threads are done with to `reuse` (to be filled again), keeping
    /// their blocks for the next requests.
    pub fn recycle(&mut self, mut reuse: impl FnMut(Request)) {
        while let Ok(mut block) = self.spent.try_recv() {
            for (_, request) in block.drain(..) {
                reuse(request);
            }
            if self.free.len() < self.senders.len() * QUEUE {
                self.free.push(block);
            }
        }
    }

    /// Waits for every thread and merges what they counted.
    pub fn finish(
        mut self,
        config: &Config,
        assignment: &Assignment,
    ) -> Result<(Merged, Vec<Option<f64>>), SimError> {
        if self.place != assignment.thread_of.len() as u64 {
            return Err(SimError::Usage(
                "the trace changed between the two passes of a split replay".into(),
            ));
        }
        for (block, tx) in self.blocks.drain(..).zip(&self.senders) {
            if !block.is_empty() {
                let _ = tx.send(block);
            }
        }
        self.senders.clear();
        let mut shares = Vec::with_capacity(self.workers.len());
        let mut cpu = Vec::with_capacity(self.workers.len());
        for worker in self.workers.drain(..) {
            // Requests handed back meanwhile are dropped: nothing waits on them.
            while self.spent.try_recv().is_ok() {}
            let (share, rows, path, seconds) = worker
                .join()
                .map_err(|_| SimError::Usage("a replay thread panicked".into()))??;
            cpu.push(seconds);
            shares.push((share, rows, path));
        }
        let merged = Merged::of(config, assignment.step_back_ms, shares);
        Ok((
            Merged {
                _scratch: self._scratch.take(),
                ..merged
            },
            cpu,
        ))
    }
}

/// Replays every block of `blocks` in order, each request prepared a few ahead of its step as
/// one replay does; hands the requests back through `give_back`, in the blocks they came in.
fn replay_share(
    mut replay: EdgeReplay,
    blocks: Receiver<Block>,
    give_back: SyncSender<Block>,
) -> Result<(Share, Vec<u32>), SimError> {
    let mut answered = Answered::default();
    let mut rows = Vec::new();
    let mut ahead: VecDeque<(u64, Request)> = VecDeque::with_capacity(PREPARE_AHEAD + 1);
    let mut done: Block = Vec::with_capacity(BLOCK);
    let mut empty: Vec<Block> = Vec::new();
    let mut step = |replay: &mut EdgeReplay,
                    (place, request): (u64, Request),
                    done: &mut Block,
                    empty: &mut Vec<Block>|
     -> Result<(), SimError> {
        let before = replay.decision_rows();
        replay.step_at(place, &request, &mut answered)?;
        if let (Some(before), Some(after)) = (before, replay.decision_rows()) {
            rows.push((after - before) as u32);
        }
        done.push((place, request));
        if done.len() == BLOCK {
            let next = empty.pop().unwrap_or_else(|| Vec::with_capacity(BLOCK));
            // The reader may be gone or full: the requests are then dropped.
            let _ = give_back.try_send(std::mem::replace(done, next));
        }
        Ok(())
    };
    for mut block in blocks {
        for (place, request) in block.drain(..) {
            replay.prepare(&request);
            ahead.push_back((place, request));
            if ahead.len() > PREPARE_AHEAD {
                let next = ahead.pop_front().expect("requests ahead");
                step(&mut replay, next, &mut done, &mut empty)?;
            }
        }
        if empty.len() < QUEUE {
            empty.push(block);
        }
    }
    while let Some(next) = ahead.pop_front() {
        step(&mut replay, next, &mut done, &mut empty)?;
    }
    Ok((replay.into_share()?, rows))
}

/// What the threads counted, merged into what one replay reports.
#[derive(Debug)]
pub struct Merged {
    totals: Totals,
    rules: Vec<RuleReport>,
    series: Series,
    /// Whether the isolate's denial cache could have been full (the split is then not exact).
    pub denial_cache_could_fill: bool,
    /// Per thread: the decision rows of each of its requests and its decisions file.
    decisions: Vec<(Vec<u32>, Option<PathBuf>)>,
    _scratch: Option<tempfile::TempDir>,
}

impl Merged {
    /// Requests replayed.
    pub fn requests(&self) -> u64 {
        self.totals.requests
    }

    fn of(
        config: &Config,
        step_back_ms: u64,
        shares: Vec<(Share, Vec<u32>, Option<PathBuf>)>,
    ) -> Merged {
        let mut totals = Totals::default();
        let mut tallies = None;
        let mut series: Option<Series> = None;
        let mut spans: Option<DenialSpans> = None;
        let mut boundaries: Vec<(Arc<str>, Vec<_>)> = Vec::new();
        let mut tops = Vec::new();
        let mut decisions = Vec::new();
        for (share, rows, path) in shares {
            totals.add(share.totals);
            match &mut tallies {
                None => tallies = Some(share.rules),
                Some(all) => {
                    for (mine, theirs) in all.iter_mut().zip(&share.rules) {
                        mine.add_counts(theirs);
                    }
                }
            }
            match &mut series {
                None => series = Some(share.series),
                Some(all) => all.merge(share.series),
            }
            if let Some(share_spans) = &share.denial_spans {
                spans
                    .get_or_insert_with(DenialSpans::default)
                    .merge(share_spans);
            }
            for (name, part) in share.boundaries {
                match boundaries.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, parts)) => parts.push(part),
                    None => boundaries.push((name, vec![part])),
                }
            }
            tops.push(share.tops);
            decisions.push((rows, path));
        }
        let boundaries: Vec<(Arc<str>, Boundary)> = boundaries
            .into_iter()
            .filter_map(|(name, parts)| Boundary::merged(&parts).map(|b| (name, b)))
            .collect();
        let tallies = tallies.unwrap_or_default();
        let rules = config
            .rules
            .iter()
            .zip(&tallies)
            .enumerate()
            .map(|(r, (rule, tally))| {
                let limits = rule
                    .limits
                    .iter()
                    .zip(&tally.limits)
                    .enumerate()
                    .map(|(l, (applied, t))| {
                        let top = merged_top(tops.iter().map(|share| share[r][l].clone()));
                        t.report_with(applied, top, &boundaries)
                    })
                    .collect();
                tally.report(rule, limits)
            })
            .collect();
        let denial_cache_could_fill =
            spans.is_some_and(|s| s.could_fill(config.denial_cache, step_back_ms));
        Merged {
            totals,
            rules,
            series: series.unwrap_or_else(|| Series::new(config.rules.len())),
            denial_cache_could_fill,
            decisions,
            _scratch: None,
        }
    }

    /// Writes the threads' decision rows to `log` in trace order: request by request, the
    /// next rows of the thread that replayed it.
    fn write_decisions(
        &self,
        mut log: DecisionLog,
        assignment: &Assignment,
    ) -> Result<DecisionsReport, SimError> {
        let mut shares = Vec::with_capacity(self.decisions.len());
        for (rows, path) in &self.decisions {
            let path = path
                .as_ref()
                .ok_or_else(|| SimError::Usage("a replay thread wrote no decisions file".into()))?;
            let file = File::open(path).map_err(|e| SimError::io(path, e))?;
            let reader = csv::ReaderBuilder::new()
                .has_headers(true)
                .from_reader(file);
            shares.push((reader, rows.iter()));
        }
        let mut record = csv::ByteRecord::new();
        for &thread in assignment.thread_of.iter() {
            let (reader, rows) = &mut shares[thread as usize];
            let count = rows.next().copied().unwrap_or(0);
            log.copy_rows(reader, u64::from(count), &mut record)?;
        }
        log.finish()
    }
}
