//! One `sim suggest` run: read the trace into streams (the `--key`, or each limit of a
//! configuration), search every algorithm and window of each, verify every suggestion by
//! replaying it, and build the report.

use std::collections::BTreeMap;
use std::path::PathBuf;

use edgelimit::{Algorithm, Identifier};
use edgelimit_engine::config::file as config_file;

use super::peaks::PeakRates;
use super::report::{SuggestReport, Suggestion};
use super::search::{search, Found};
use super::target::{By, Share};
use super::traffic::Traffic;
use super::verify::verify;
use crate::error::SimError;
use crate::event::{Event, Interner};
use crate::input::Source;
use crate::progress::Progress;
use crate::readers::{ReadOptions, RequestOptions, TraceReader};
use crate::report::words::window_text;

/// The windows searched when none is given: a second, a minute and an hour.
pub const DEFAULT_WINDOWS_MS: [u64; 3] = [1_000, 60_000, 3_600_000];

/// What to search and how.
#[derive(Debug, Clone)]
pub struct SuggestOptions {
    /// The trace.
    pub source: Source,
    /// How to read it.
    pub read: ReadOptions,
    /// With `--config`: what request lines lack.
    pub request: RequestOptions,
    /// With `--config`: the configuration, whose limits are searched (each at its own
    /// algorithm and window) instead of every algorithm at `windows`.
    pub config: Option<PathBuf>,
    /// The windows (without `--config`).
    pub windows: Vec<u64>,
    /// What is spared.
    pub by: By,
    /// The share that may be denied.
    pub spare: Share,
    /// Threads for the search and the checks (the result is the same for any number).
    pub threads: usize,
    /// Show a progress bar while reading.
    pub progress: bool,
}

/// What one stream is searched for: each algorithm at each window.
#[derive(Debug)]
struct Stream {
    traffic: Traffic,
    limit: Option<String>,
    rules: Vec<String>,
    searches: Vec<(Algorithm, u64)>,
}

/// Runs `sim suggest`.
pub fn run_suggest(options: &SuggestOptions) -> Result<SuggestReport, SimError> {
    if options.threads == 0 {
        return Err(SimError::Usage("--threads must be at least 1".into()));
    }
    let (trace, streams) = match &options.config {
        None => read_key(options)?,
        Some(path) => read_config(options, path)?,
    };
    let mut suggestions = Vec::new();
    let mut peaks = Vec::new();
    for stream in &streams {
        let traffic = &stream.traffic;
        let allowed = options.spare.of(match options.by {
            By::Clients => traffic.clients() as u64,
            By::Requests => traffic.requests(),
        });
        let found: Vec<Found> = stream
            .searches
            .iter()
            .map(|&(algorithm, window_ms)| {
                search(
                    traffic,
                    algorithm,
                    window_ms,
                    options.by,
                    allowed,
                    options.threads,
                )
            })
            .collect();
        let checked = verify(traffic, &found, options.by, allowed, options.threads)?;
        let first = suggestions.len();
        for (f, c) in found.into_iter().zip(checked) {
            let s = c.as_ref().map(|c| &c.suggested);
            suggestions.push(Suggestion {
                limit: stream.limit.clone(),
                rules: stream.rules.clone(),
                algorithm: f.algorithm.to_string(),
                window: window_text(f.window_ms),
                window_ms: f.window_ms,
                clients: traffic.clients() as u64,
                requests: traffic.requests(),
                policy: f.policy.map(|p| p.to_string()),
                suggested_limit: f.policy.map(|p| p.limit()),
                suggested_burst: f.policy.map(|p| p.burst()),
                clients_denied: s.map(|s| s.clients_denied),
                requests_denied: s.map(|s| s.requests_denied),
                max_admitted_in_window: s.map(|s| s.max_admitted_in_window),
                max_window_multiple: s.map(|s| s.max_window_multiple),
                one_less: c.and_then(|c| c.one_less),
                curve: f.curve,
            });
        }
        peaks.extend(stream_peaks(stream, &suggestions[first..], options));
    }
    Ok(SuggestReport::new(
        trace,
        options.by,
        options.spare,
        options.config.as_ref().map(|p| p.display().to_string()),
        suggestions,
        peaks,
    ))
}

/// The clients' peak rates of `stream` at each of its windows, with the suggestion drawn
/// against them: without `--config` the sliding log's (exact: its limit is a peak of the
/// distribution, and what it admits in any window is what it names), with `--config` the
/// limit's own.
fn stream_peaks(
    stream: &Stream,
    suggestions: &[Suggestion],
    options: &SuggestOptions,
) -> Vec<PeakRates> {
    let mut windows: Vec<u64> = Vec::new();
    for &(_, window_ms) in &stream.searches {
        if !windows.contains(&window_ms) {
            windows.push(window_ms);
        }
    }
    windows
        .into_iter()
        .map(|window_ms| {
            let suggested = suggestions
                .iter()
                .filter(|s| s.window_ms == window_ms)
                .find(|s| options.config.is_some() || s.algorithm == Algorithm::SlidingLog.as_str())
                .and_then(|s| s.policy.clone().zip(s.suggested_limit));
            PeakRates::of(
                &stream.traffic,
                stream.limit.clone(),
                window_ms,
                suggested,
                options.threads,
            )
        })
        .collect()
}

/// The trace as one stream keyed by `--key`, searched for every rate algorithm at each window.
fn read_key(
    options: &SuggestOptions,
) -> Result<(crate::readers::ReadStats, Vec<Stream>), SimError> {
    if options.windows.is_empty() {
        return Err(SimError::Usage("give at least one --window".into()));
    }
    let mut progress = Progress::new(options.progress, &options.source);
    let mut reader = TraceReader::open(&options.source, options.read.clone(), progress.counter())?;
    let mut events = Vec::new();
    for ev in reader.by_ref() {
        events.push(ev?);
        progress.tick();
    }
    progress.finish();
    let stats = reader.stats();
    let traffic = Traffic::new(format!("key {}", stats.key), events, reader.into_interner());
    let searches = options
        .windows
        .iter()
        .flat_map(|&w| Algorithm::ALL.into_iter().map(move |a| (a, w)))
        .collect();
    Ok((
        stats,
        vec![Stream {
            traffic,
            limit: None,
            rules: Vec::new(),
            searches,
        }],
    ))
}

/// A limit's requests as they are read: its events and its identifiers' ids.
#[derive(Debug, Default)]
struct Gathering {
    events: Vec<Event>,
    interner: Interner,
    rules: Vec<String>,
    searches: Vec<(Algorithm, u64)>,
}

/// The trace as one stream per rate limit of the configuration (limits of one name share state,
/// so they are one stream), each searched at its own algorithm and window; a request counts
/// toward every limit of every rule it matches, identified as the Worker identifies it.
fn read_config(
    options: &SuggestOptions,
    path: &std::path::Path,
) -> Result<(crate::readers::ReadStats, Vec<Stream>), SimError> {
    let config = config_file::load(path)?;
    let mut gathering: BTreeMap<String, Gathering> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    for rule in &config.rules {
        for applied in &rule.limits {
            let policy = applied.limit.policy;
            if policy.algorithm() == Algorithm::Concurrency {
                continue;
            }
            let name = applied.limit.name.to_string();
            let g = gathering.entry(name.clone()).or_insert_with(|| {
                order.push(name.clone());
                Gathering::default()
            });
            if !g.rules.contains(&rule.name) {
                g.rules.push(rule.name.clone());
            }
            let search = (policy.algorithm(), policy.window_ms());
            if !g.searches.contains(&search) {
                g.searches.push(search);
            }
        }
    }
    if order.is_empty() {
        return Err(SimError::Usage(format!(
            "{}: the configuration has no rate limit to suggest a policy for",
            path.display()
        )));
    }
    let mut progress = Progress::new(options.progress, &options.source);
    let mut reader = TraceReader::open_requests(
        &options.source,
        options.read.clone(),
        options.request.clone(),
        progress.counter(),
    )?;
    while let Some(request) = reader.next_request() {
        let request = request?;
        for rule in config.matching(&request) {
            for applied in &rule.limits {
                let Some(g) = gathering.get_mut(&*applied.limit.name) else {
                    continue;
                };
                let Some(identifier): Option<Identifier> = applied.source.extract(&request) else {
                    continue;
                };
                let client = g.interner.intern(identifier.as_bytes()).ok_or_else(|| {
                    SimError::Usage("more than 2^32 identifiers for one limit".into())
                })?;
                g.events
                    .push(Event::new(request.time_ms, client, applied.cost));
            }
        }
        reader.recycle(request);
        progress.tick();
    }
    progress.finish();
    let stats = reader.stats();
    let streams = order
        .into_iter()
        .filter_map(|name| {
            let g = gathering.remove(&name)?;
            Some(Stream {
                traffic: Traffic::new(format!("limit {name}"), g.events, g.interner),
                limit: Some(name),
                rules: g.rules,
                searches: g.searches,
            })
        })
        .collect();
    Ok((stats, streams))
}
