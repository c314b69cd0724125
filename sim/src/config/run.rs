//! One configuration replay from start to finish: read requests, replay them through the
//! configuration (and the baseline, side by side), and build the report.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::Instant;

use edgelimit_engine::config::file as config_file;

use super::decisions::DecisionLog;
use super::engine::{EdgeReplay, PREPARE_AHEAD};
use super::outage::{Outage, Outages};
use super::overrides::Overrides;
use super::parallel;
use super::report::{ConfigReport, RegionReport, RegionsReport};
use super::whatif::{Answered, WhatIfTally};
use crate::error::SimError;
use crate::input::Source;
use crate::progress::Progress;
use crate::readers::{Format, ReadOptions, Request, RequestOptions, TraceReader};
use crate::regions::{AssignSpec, Attribution, Regions, Rtt, RttSpec};

/// What to replay and how.
#[derive(Debug, Clone)]
pub struct EdgeRunOptions {
    /// The trace.
    pub source: Source,
    /// How to read it.
    pub read: ReadOptions,
    /// What request lines lack.
    pub request: RequestOptions,
    /// The configuration.
    pub config: PathBuf,
    /// The configuration to compare with (`--baseline`).
    pub baseline: Option<PathBuf>,
    /// Tiers, overrides and lists for the configuration, as `edgelimit-admin` commands
    /// (`--overrides`).
    pub overrides: Option<PathBuf>,
    /// The same for the baseline (`--baseline-overrides`).
    pub baseline_overrides: Option<PathBuf>,
    /// Spans of trace time the store is down.
    pub outages: Vec<Outage>,
    /// Show a progress bar (only drawn when standard error is a terminal).
    pub progress: bool,
    /// Where requests are decided and how far from the home, for a configuration with a
    /// `global` section.
    pub regions: RegionOptions,
    /// Write every limit's decision here, as CSV (`--decisions`).
    pub decisions: Option<PathBuf>,
}

/// `--assign-regions` and `--rtt`: only for a configuration with a `global` section.
#[derive(Debug, Clone, Default)]
pub struct RegionOptions {
    /// A region for each request the trace places nowhere, by a hash of its client.
    pub assign: Option<AssignSpec>,
    /// The latencies between the regions and the home (defaults when `None`).
    pub rtt: Option<RttSpec>,
}

/// Replays a trace through a configuration (and its baseline), on one thread.
pub fn run_config(options: &EdgeRunOptions) -> Result<ConfigReport, SimError> {
    run_config_on(options, 1)
}

/// Replays a trace through a configuration (and its baseline) over `threads` threads where it
/// can be split (`parallel`), on one where it cannot: the report is the same either way.
pub fn run_config_on(options: &EdgeRunOptions, threads: usize) -> Result<ConfigReport, SimError> {
    if threads > 1 {
        let config = config_file::load(&options.config)?;
        if parallel::one_thread_reason(&config, options).is_none() {
            if let Ok(run) = parallel::run_threads(options, config, threads)? {
                return Ok(run.report);
            }
        }
    }
    run_one(options)
}

/// The replay on one thread.
fn run_one(options: &EdgeRunOptions) -> Result<ConfigReport, SimError> {
    let started = Instant::now();
    let config = config_file::load(&options.config)?;
    let baseline = options
        .baseline
        .as_deref()
        .map(config_file::load)
        .transpose()?;
    // Every file is read and checked before the trace is opened: a bad line fails at once.
    let overrides = options
        .overrides
        .as_deref()
        .map(|path| Overrides::load(path, &config, &options.config.display().to_string()))
        .transpose()?;
    let baseline_overrides = match (&options.baseline_overrides, &baseline, &options.baseline) {
        (Some(path), Some(config), Some(file)) => {
            Some(Overrides::load(path, config, &file.display().to_string())?)
        }
        (Some(_), _, _) => {
            return Err(SimError::Usage(
                "--baseline-overrides applies to the --baseline configuration: give --baseline"
                    .into(),
            ))
        }
        _ => None,
    };
    let placing = regions_of(&config, options)?;
    let decisions = options
        .decisions
        .as_deref()
        .map(|path| DecisionLog::create_with(path, placing.is_some()))
        .transpose()?;
    let mut progress = Progress::new(options.progress, &options.source);
    let mut reader = TraceReader::open_requests(
        &options.source,
        options.read.clone(),
        options.request.clone(),
        progress.counter(),
    )?;
    let rtt = placing.map(|(regions, rtt)| {
        reader.set_regions(regions);
        rtt
    });
    let mut candidate = EdgeReplay::with_overrides(
        config,
        Outages::new(options.outages.clone()),
        true,
        overrides,
    )?;
    if let (Some(global), Some(rtt)) = (&candidate.config().global, &rtt) {
        let names = global.regions.iter().map(|r| r.name.clone()).collect();
        candidate.set_regions(names, rtt.clone())?;
    }
    if let Some(log) = decisions {
        candidate.write_decisions(log);
    }
    let mut whatif = match baseline {
        Some(config) => {
            let names = |c: &edgelimit_engine::Config| -> Vec<String> {
                c.rules.iter().map(|r| r.name.clone()).collect()
            };
            let tally = WhatIfTally::new(
                options
                    .baseline
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                &names(&config),
                &names(candidate.config()),
            );
            let replay = EdgeReplay::with_overrides(
                config,
                Outages::new(options.outages.clone()),
                false,
                baseline_overrides,
            )?;
            Some((replay, tally))
        }
        None => None,
    };
    let mut answered = Answered::default();
    let mut before = Answered::default();
    // Requests read and prepared, not yet stepped: each is prepared `PREPARE_AHEAD` requests
    // before its step.
    let mut ahead: VecDeque<Request> = VecDeque::with_capacity(PREPARE_AHEAD + 1);
    loop {
        if let Some(request) = reader.next_request().transpose()? {
            candidate.prepare(&request);
            if let Some((replay, _)) = whatif.as_mut() {
                replay.prepare(&request);
            }
            ahead.push_back(request);
            if ahead.len() <= PREPARE_AHEAD {
                continue;
            }
        }
        let Some(request) = ahead.pop_front() else {
            break;
        };
        candidate.step(&request, &mut answered)?;
        if let Some((replay, tally)) = whatif.as_mut() {
            replay.step(&request, &mut before)?;
            tally.add(&before, &answered);
        }
        reader.recycle(request);
        progress.tick();
    }
    progress.finish();
    let decisions = candidate.finish_decisions()?;
    let regions = match (reader.regions(), &rtt) {
        (Some(regions), Some(rtt)) => Some(regions_report(regions, rtt)),
        _ => None,
    };
    let against_log = candidate
        .log_check()
        .filter(|_| reader.stats().format == Some(Format::Edgelimit))
        .map(|c| c.finish());
    Ok(ConfigReport {
        regions,
        global: candidate.global_report(),
        decisions,
        overrides: candidate.applied_overrides().cloned(),
        outage: (!options.outages.is_empty()).then(|| candidate.outage_report()),
        against_log,
        whatif: whatif.map(|(replay, tally)| {
            let mut whatif = tally.finish();
            whatif.baseline_overrides = replay.applied_overrides().cloned();
            whatif
        }),
        ..ConfigReport::of_totals(
            options.config.display().to_string(),
            reader.stats(),
            started.elapsed().as_millis() as u64,
            candidate.totals(),
            candidate.rule_reports(),
            candidate.series().clone(),
        )
    })
}

/// The configuration's regions, placing requests as `options` says, and the latencies between
/// them and the home; `None` without a `global` section, where `--assign-regions` and `--rtt`
/// have nothing to apply to.
fn regions_of(
    config: &edgelimit_engine::Config,
    options: &EdgeRunOptions,
) -> Result<Option<(Regions, Rtt)>, SimError> {
    let Some(global) = &config.global else {
        for (flag, given) in [
            ("--assign-regions", options.regions.assign.is_some()),
            ("--rtt", options.regions.rtt.is_some()),
        ] {
            if given {
                return Err(SimError::Usage(format!(
                    "{flag} applies to the regions of a configuration's `global` section, and {} \
                     has none",
                    options.config.display()
                )));
            }
        }
        return Ok(None);
    };
    let assignment = options
        .regions
        .assign
        .as_ref()
        .map(|spec| spec.resolve(global))
        .transpose()
        .map_err(SimError::Usage)?;
    let rtt = match &options.regions.rtt {
        Some(spec) => spec.resolve(global).map_err(SimError::Usage)?,
        None => Rtt::defaults(global),
    };
    Ok(Some((Regions::new(global, assignment), rtt)))
}

/// What `regions` placed, with the latencies `rtt` carries.
fn regions_report(regions: &Regions, rtt: &Rtt) -> RegionsReport {
    let counts = regions.counts();
    RegionsReport {
        regions: regions
            .names()
            .iter()
            .zip(&counts.requests)
            .enumerate()
            .map(|(at, (name, requests))| RegionReport {
                name: name.clone(),
                requests: *requests,
                home_one_way_ms: rtt.home_one_way_ms(at),
            })
            .collect(),
        attributed_by: Attribution::ALL
            .iter()
            .zip(counts.by)
            .map(|(by, n)| (by.as_str(), n))
            .collect(),
        unknown_places: counts.unknown_places,
        local_one_way_ms: rtt.local_one_way_ms(),
    }
}
