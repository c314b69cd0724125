//! The command line. `sim` alone replays the bundled trace; `sim replay`, `sim suggest`,
//! `sim generate` and `sim bench` do the rest. The interface of `sim replay` is relied on by scripts: keep it
//! (`--config` and its companions are additions beside `--policy`).

use std::fs;
use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use edgelimit::Policy;

use crate::bench::{self, BenchOptions};
use crate::bundled;
use crate::config::{self, outage::Outage, run_config_on, EdgeRunOptions, RegionOptions};
use crate::generate::{write_csv, Generator, Kind};
use crate::input::Source;
use crate::policy::{self, run, RunOptions, StoreChoice};
use crate::readers::time::LATEST_MS;
use crate::readers::{Format, Key, ReadOptions, RequestOptions};
use crate::regions::{AssignSpec, RttSpec};
use crate::suggest::{self, run_suggest, By, Share, SuggestOptions, DEFAULT_WINDOWS_MS};

/// Replay traffic through edgelimit's algorithms and see what each policy admits.
#[derive(Debug, Parser)]
#[command(name = "sim", version, args_conflicts_with_subcommands = true)]
pub struct Cli {
    /// What to do; with none, replays the bundled real trace and writes report.html.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Options for the bundled replay.
    #[command(flatten)]
    pub bundled: Outputs,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Replay a trace file (`-` for standard input; gzip is detected).
    Replay(Box<ReplayArgs>),
    /// Write a synthetic trace as CSV to standard output.
    Generate(GenerateArgs),
    /// Measure parse and replay throughput.
    Bench(BenchArgs),
    /// Suggest the least limit per algorithm and window that spares all but a share of clients.
    Suggest(Box<SuggestArgs>),
}

/// `sim suggest`.
#[derive(Debug, Args)]
pub struct SuggestArgs {
    /// The trace file, `-` for standard input [default: the bundled trace].
    #[arg(value_name = "TRACE")]
    pub trace: Option<PathBuf>,
    /// The format (guessed from the first line when omitted).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// The identifier: ip, host, or a field name.
    #[arg(long, default_value = "ip", value_parser = parse_key)]
    pub key: Key,
    /// Fail on the first bad line (with file:line and the field) instead of counting it.
    #[arg(long)]
    pub strict: bool,
    /// How late a line may arrive and still be put in time order (e.g. 60s, 0 for none).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub reorder_window: u64,
    /// A window to search every algorithm at (repeat for several) [default: 1s, 1m, 1h].
    #[arg(long = "window", value_name = "WINDOW", value_parser = parse_duration)]
    pub windows: Vec<u64>,
    /// The share that may be denied at least once (e.g. 0.1% or 0.001).
    #[arg(long, default_value = "0.1%", value_parser = parse_share)]
    pub spare: Share,
    /// What the share counts: clients denied at least once, or requests denied.
    #[arg(long, value_enum, default_value_t = By::Clients)]
    pub by: By,
    /// Suggest a policy for each rate limit of a Worker configuration (a wrangler.toml or its
    /// EDGELIMIT_CONFIG table), at the limit's own algorithm and window, identified as the
    /// Worker identifies requests.
    #[arg(long, value_name = "FILE", conflicts_with = "windows")]
    pub config: Option<PathBuf>,
    /// With --config: the host of requests whose lines carry none (Apache/nginx logs).
    #[arg(long, value_name = "NAME", requires = "config", default_value = "")]
    pub host: String,
    /// With --config: the names of the request headers HAProxy captured, in order.
    #[arg(long, value_name = "NAMES", requires = "config", value_delimiter = ',')]
    pub captured_headers: Vec<String>,
    /// Threads to search on [default: every core]; the output is the same for any number.
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,
    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the HTML report here.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Write the suggested limits here as shadow rules, a configuration `sim replay --config`
    /// reads and `wrangler.toml` takes.
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    pub write_config: Option<PathBuf>,
    /// Print nothing but errors (the reports are still written).
    #[arg(long, short)]
    pub quiet: bool,
}

/// Policies and outputs, shared by `sim` and `sim replay`.
#[derive(Debug, Args)]
pub struct Outputs {
    /// A policy spec, e.g. 'gcra 10/1s burst 20' (repeat for several; default: a set of five).
    #[arg(long = "policy", value_name = "SPEC")]
    pub policies: Vec<String>,
    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the HTML report here (`sim` alone defaults to report.html).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Print nothing but errors (the reports are still written).
    #[arg(long, short)]
    pub quiet: bool,
}

/// `sim replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The trace file, `-` for standard input.
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// The format (guessed from the first line when omitted).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// The identifier: ip, host, or a field name.
    #[arg(long, default_value = "ip", value_parser = parse_key)]
    pub key: Key,
    /// Where decisions are made: memory, redis://…, redis+cluster://…, upstash+http(s)://….
    #[arg(long, default_value = "memory", value_parser = StoreParser)]
    pub store: StoreChoice,
    /// Fail on the first bad line (with file:line and the field) instead of counting it.
    #[arg(long)]
    pub strict: bool,
    /// How late a line may arrive and still be put in time order (e.g. 60s, 0 for none).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub reorder_window: u64,
    /// Replay a Worker configuration instead of bare policies: a wrangler.toml (its
    /// [vars.EDGELIMIT_CONFIG]) or that table alone, as TOML or JSON.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// With --config: also replay this configuration and report what changes from it.
    #[arg(long, value_name = "FILE", requires = "config")]
    pub baseline: Option<PathBuf>,
    /// With --config: tiers, overrides and deny/allow lists in force from the first request,
    /// as edgelimit-admin commands one per line (`tier set per-ip 203.0.113.7 pro`, `deny add ip
    /// 198.51.100.0/24`); checked against --config. Not applied to --baseline.
    #[arg(long, value_name = "FILE", requires = "config")]
    pub overrides: Option<PathBuf>,
    /// With --baseline: the same for the baseline configuration (compare a configuration with
    /// and without its tiers by giving it as both --config and --baseline).
    #[arg(long, value_name = "FILE", requires = "baseline")]
    pub baseline_overrides: Option<PathBuf>,
    /// With --config: the store is unreachable from FROM to TO (trace time: RFC 3339, a Unix
    /// time, or +DURATION after the first request); repeat for several.
    #[arg(long = "outage", value_name = "FROM..TO", requires = "config", value_parser = parse_outage)]
    pub outages: Vec<Outage>,
    /// With --config: the host of requests whose lines carry none (Apache/nginx logs).
    #[arg(long, value_name = "NAME", requires = "config", default_value = "")]
    pub host: String,
    /// With --config: the names of the request headers HAProxy captured, in order
    /// (default: host).
    #[arg(long, value_name = "NAMES", requires = "config", value_delimiter = ',')]
    pub captured_headers: Vec<String>,
    /// With --config: write every limit's decision here as CSV, one row per request and limit
    /// decided, in trace order (time_ms,region,rule,limit,identifier,status,reason).
    #[arg(long, value_name = "FILE", requires = "config")]
    pub decisions: Option<PathBuf>,
    /// With a --config that has a `global` section: the region of each request its line places
    /// nowhere (no region, colo, country or continent), by a hash of its client, in these
    /// fractions, e.g. eu=0.5,us=0.3,ap=0.2 [default: the first region].
    #[arg(long, value_name = "REGION=FRACTION,…", requires = "config", value_parser = parse_assign)]
    pub assign_regions: Option<AssignSpec>,
    /// With a --config that has a `global` section: one-way latencies in ms, home=MS from every
    /// region to the home, REGION=MS from one, local=MS from a request to its own region's store
    /// [default: home=50,local=1].
    #[arg(long, value_name = "SPEC", requires = "config", value_parser = parse_rtt)]
    pub rtt: Option<RttSpec>,
    /// Threads to replay on [default: every core; with --config, one]: the clients (with
    /// --config, groups of requests sharing no state) are split over them, the output is the
    /// same for any number. A store replay (--store) runs on one, and so does a --config replay
    /// whose state spans identifiers: a `global` section, --baseline, --overrides, --outage,
    /// idempotent, concurrency or settled limits, the Worker's own log, a denial cache that
    /// could fill.
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,
    /// Policies and outputs.
    #[command(flatten)]
    pub out: Outputs,
}

/// The kinds of synthetic trace.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GenKind {
    /// A Poisson process over uniform clients.
    Poisson,
    /// On/off bursts.
    Bursty,
    /// Many clients with Pareto-distributed rates.
    HeavyTailed,
    /// `limit` requests just before a window edge and `limit` just after.
    Boundary,
}

/// `sim generate`.
#[derive(Debug, Args)]
pub struct GenerateArgs {
    /// Which trace.
    #[arg(value_enum)]
    pub kind: GenKind,
    /// The seed: the same seed gives the same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Events to generate (not for boundary, which makes 2 × limit × rounds).
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    /// Requests per second, all clients together.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Distinct clients.
    #[arg(long, default_value_t = 100)]
    pub clients: u32,
    /// Pareto shape for heavy-tailed.
    #[arg(long, default_value_t = 1.1)]
    pub alpha: f64,
    /// On/off rate ratio for bursty.
    #[arg(long, default_value_t = 10.0)]
    pub burst_factor: f64,
    /// Mean on/off period for bursty.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub period: u64,
    /// The limit attacked (boundary).
    #[arg(long, default_value_t = 100)]
    pub limit: u64,
    /// The window attacked (boundary).
    #[arg(long, default_value = "1m", value_parser = parse_duration)]
    pub window: u64,
    /// Attacks (boundary).
    #[arg(long, default_value_t = 3)]
    pub rounds: u64,
    /// The first timestamp (UTC epoch ms).
    #[arg(long, default_value_t = 1_700_000_000_000)]
    pub start_ms: u64,
}

/// `sim bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Events in the replay benchmark.
    #[arg(long, default_value_t = 10_000_000)]
    pub events: u64,
    /// Requests in the configuration replay (0 to skip it).
    #[arg(long, default_value_t = 2_000_000)]
    pub config_events: u64,
    /// Megabytes of combined log to parse.
    #[arg(long, default_value_t = 500)]
    pub parse_mb: u64,
    /// Clients in the generated traces, comma-separated: one replay row each.
    #[arg(long, value_delimiter = ',', default_value = "10000,100000")]
    pub clients: Vec<u32>,
    /// Events in the memory row (a CSV trace read as `sim replay` reads it); 0 skips it.
    #[arg(long, default_value_t = 5_000_000)]
    pub memory_events: u64,
    /// Clients in the memory row.
    #[arg(long, default_value_t = 1_000_000)]
    pub memory_clients: u32,
    /// Requests in the large-trace policy rows, on one thread and on --threads (0 skips them;
    /// a month of a busy site's logs is about 100000000).
    #[arg(long, default_value_t = 20_000_000)]
    pub large_events: u64,
    /// Clients in the large-trace rows.
    #[arg(long, default_value_t = 1_000_000)]
    pub large_clients: u32,
    /// Requests in the large-trace configuration row (0 skips it).
    #[arg(long, default_value_t = 5_000_000)]
    pub large_config_events: u64,
    /// Threads for the threaded rows [default: every core].
    #[arg(long, value_name = "N", value_parser = parse_threads)]
    pub threads: Option<usize>,
    /// Also write the results as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

fn parse_threads(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("`{s}`: give a number of threads, 1 or more")),
    }
}

fn parse_share(s: &str) -> Result<Share, String> {
    s.parse()
}

/// Threads to use: `--threads`, or every core the machine offers.
pub fn threads(given: Option<usize>) -> usize {
    given.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn parse_key(s: &str) -> Result<Key, String> {
    s.parse()
}

fn parse_outage(s: &str) -> Result<Outage, String> {
    s.parse()
}

/// `--store`, whose refusal quotes the store redacted: clap's own message for a value parser's
/// error would repeat the value as given, password and all.
#[derive(Debug, Clone, Copy)]
struct StoreParser;

impl clap::builder::TypedValueParser for StoreParser {
    type Value = StoreChoice;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<StoreChoice, clap::Error> {
        let refused = |problem: String| {
            clap::Error::raw(
                clap::error::ErrorKind::ValueValidation,
                format!("--store: {problem}\n"),
            )
            .with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| refused("is not UTF-8".to_string()))?;
        StoreChoice::parse(text).map_err(|e| refused(e.to_string()))
    }
}

fn parse_assign(s: &str) -> Result<AssignSpec, String> {
    s.parse()
}

fn parse_rtt(s: &str) -> Result<RttSpec, String> {
    s.parse()
}

fn parse_duration(s: &str) -> Result<u64, String> {
    if s.trim() == "0" {
        return Ok(0);
    }
    edgelimit::policy::parse_window(s)
}

/// Runs the command line.
pub fn main(cli: Cli) -> Result<()> {
    match cli.command {
        None => {
            let mut out = cli.bundled;
            out.html.get_or_insert_with(|| PathBuf::from("report.html"));
            replay(
                bundled::source(),
                ReadOptions::default(),
                StoreChoice::Memory,
                &out,
                &bundled::DEFAULT_POLICIES,
                threads(None),
            )
        }
        Some(Command::Replay(args)) if args.config.is_some() => replay_config(&args),
        Some(Command::Replay(args)) => {
            let read = ReadOptions {
                format: args.format,
                key: args.key.clone(),
                strict: args.strict,
                reorder_window_ms: args.reorder_window,
            };
            replay(
                Source::File(args.trace.clone()),
                read,
                args.store.clone(),
                &args.out,
                &bundled::DEFAULT_POLICIES,
                threads(args.threads),
            )
        }
        Some(Command::Generate(args)) => generate(&args),
        Some(Command::Suggest(args)) => suggest(&args),
        Some(Command::Bench(args)) => {
            let rows = bench::run(&BenchOptions {
                events: args.events,
                config_events: args.config_events,
                parse_mb: args.parse_mb,
                clients: args.clients,
                memory_events: args.memory_events,
                memory_clients: args.memory_clients,
                large_events: args.large_events,
                large_clients: args.large_clients,
                large_config_events: args.large_config_events,
                threads: threads(args.threads),
            })?;
            print!("{}", bench::render(&rows));
            if let Some(path) = args.json {
                let json = serde_json::json!({ "rows": rows });
                fs::write(&path, serde_json::to_string_pretty(&json)?)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Ok(())
        }
    }
}

fn replay(
    source: Source,
    read: ReadOptions,
    store: StoreChoice,
    out: &Outputs,
    defaults: &[&str],
    threads: usize,
) -> Result<()> {
    let specs: Vec<&str> = if out.policies.is_empty() {
        defaults.to_vec()
    } else {
        out.policies.iter().map(String::as_str).collect()
    };
    let policies = specs
        .iter()
        .map(|s| s.parse::<Policy>())
        .collect::<Result<Vec<_>, _>>()?;
    let boundaries = out.html.is_some();
    // The charts take a second pass over the trace: standard input is kept in a temporary file
    // for it (removed when the report is made), since it can be read only once.
    let spooled = match &source {
        Source::File(path) if boundaries && path.as_os_str() == "-" => Some(spool_stdin()?),
        _ => None,
    };
    let source = match &spooled {
        Some(file) => Source::Spooled(file.path().to_path_buf()),
        None => source,
    };
    let report = run(&RunOptions {
        source,
        read,
        policies,
        store,
        progress: !out.quiet,
        boundaries,
        threads,
    })?;
    emit(
        out,
        || report.to_json(),
        || policy::html::render(&report),
        || policy::table::render(&report),
    )
}

/// Standard input, copied whole into a temporary file (deleted when dropped).
fn spool_stdin() -> Result<tempfile::NamedTempFile> {
    let mut file = tempfile::NamedTempFile::new().context("making a temporary file for stdin")?;
    std::io::copy(&mut std::io::stdin().lock(), &mut file)
        .context("keeping standard input for a second pass over it")?;
    Ok(file)
}

/// Writes a report where `out` asks — JSON and HTML files, the text on standard output unless
/// quiet, then the files written — each rendering made only when asked for.
fn emit(
    out: &Outputs,
    json: impl FnOnce() -> String,
    html: impl FnOnce() -> String,
    text: impl FnOnce() -> String,
) -> Result<()> {
    if let Some(path) = &out.json {
        fs::write(path, json()).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &out.html {
        fs::write(path, html()).with_context(|| format!("writing {}", path.display()))?;
    }
    if !out.quiet {
        let mut stdout = std::io::stdout().lock();
        write!(stdout, "{}", text())?;
        for (what, path) in [("JSON", &out.json), ("HTML", &out.html)] {
            if let Some(p) = path {
                writeln!(stdout, "{what} report: {}", p.display())?;
            }
        }
    }
    Ok(())
}

/// `sim replay TRACE --config FILE`.
fn replay_config(args: &ReplayArgs) -> Result<()> {
    if !args.out.policies.is_empty() {
        bail!("--config replays a Worker configuration, --policy bare policies: give one or the other");
    }
    if args.store != StoreChoice::Memory {
        bail!("--config replays on the library's in-memory store (--store memory)");
    }
    if args.key != Key::Ip {
        bail!("--config takes each limit's identifier from the configuration: drop --key");
    }
    // One thread unless asked: split, the replay reads the whole trace before it starts, which
    // on few cores costs more than the split gains (docs/sim-reference.md, "Every core").
    let threads = args.threads.unwrap_or(1);
    // Split over threads, the replay reads the trace twice (`config::parallel`): standard
    // input is kept in a temporary file for it (removed when the report is made).
    let spooled = match args.trace.as_os_str() == "-" && threads > 1 {
        true => Some(spool_stdin()?),
        false => None,
    };
    let options = EdgeRunOptions {
        source: match &spooled {
            Some(file) => Source::Spooled(file.path().to_path_buf()),
            None => Source::File(args.trace.clone()),
        },
        read: ReadOptions {
            format: args.format,
            key: Key::Ip,
            strict: args.strict,
            reorder_window_ms: args.reorder_window,
        },
        request: RequestOptions {
            host: args.host.clone(),
            captured_headers: args
                .captured_headers
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
        },
        config: args.config.clone().unwrap_or_default(),
        baseline: args.baseline.clone(),
        overrides: args.overrides.clone(),
        baseline_overrides: args.baseline_overrides.clone(),
        outages: args.outages.clone(),
        progress: !args.out.quiet,
        regions: RegionOptions {
            assign: args.assign_regions.clone(),
            rtt: args.rtt.clone(),
        },
        decisions: args.decisions.clone(),
    };
    let report = run_config_on(&options, threads)?;
    emit(
        &args.out,
        || report.to_json(),
        || config::html::render(&report),
        || config::table::render(&report),
    )
}

/// `sim suggest TRACE`.
fn suggest(args: &SuggestArgs) -> Result<()> {
    if args.config.is_some() && args.key != Key::Ip {
        bail!("--config takes each limit's identifier from the configuration: drop --key");
    }
    let windows = if args.windows.is_empty() && args.config.is_none() {
        DEFAULT_WINDOWS_MS.to_vec()
    } else {
        args.windows.clone()
    };
    let mut report = run_suggest(&SuggestOptions {
        source: args
            .trace
            .clone()
            .map_or_else(bundled::source, Source::File),
        read: ReadOptions {
            format: args.format,
            key: args.key.clone(),
            strict: args.strict,
            reorder_window_ms: args.reorder_window,
        },
        request: RequestOptions {
            host: args.host.clone(),
            captured_headers: args
                .captured_headers
                .iter()
                .map(|h| h.trim().to_ascii_lowercase())
                .collect(),
        },
        config: args.config.clone(),
        windows,
        by: args.by,
        spare: args.spare,
        threads: threads(args.threads),
        progress: !args.quiet,
    })?;
    if let Some(path) = &args.write_config {
        let Some(block) = &report.configuration else {
            bail!("--write-config: no window has a suggestion to write");
        };
        let text = format!(
            "# Suggested by `sim suggest` on {}: each limit in a shadow rule, decided and reported,\n\
             # never refusing. Then move it to an enforcing rule with enforce = \"10%\", then 100%.\n\n{block}",
            report.trace.name
        );
        fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        report.configuration_file = Some(path.display().to_string());
    }
    let out = Outputs {
        policies: Vec::new(),
        json: args.json.clone(),
        html: args.html.clone(),
        quiet: args.quiet,
    };
    emit(
        &out,
        || report.to_json(),
        || suggest::html::render(&report),
        || suggest::table::render(&report),
    )
}

fn generate(args: &GenerateArgs) -> Result<()> {
    let kind = match args.kind {
        GenKind::Poisson => Kind::Poisson {
            rate: args.rate,
            clients: args.clients,
        },
        GenKind::Bursty => Kind::Bursty {
            rate: args.rate,
            clients: args.clients,
            burst_factor: args.burst_factor,
            period_ms: args.period as f64,
        },
        GenKind::HeavyTailed => Kind::HeavyTailed {
            rate: args.rate,
            clients: args.clients,
            alpha: args.alpha,
        },
        GenKind::Boundary => {
            if args.limit == 0 || args.window < 2 {
                bail!("--limit must be ≥ 1 and --window ≥ 2ms for a boundary attack");
            }
            Kind::Boundary {
                limit: args.limit,
                window_ms: args.window,
                rounds: args.rounds,
            }
        }
    };
    if args.rate <= 0.0 || !args.rate.is_finite() {
        bail!("--rate must be a positive number of requests per second");
    }
    if args.start_ms > LATEST_MS {
        bail!(
            "--start-ms must be at most {LATEST_MS} (9999-12-31), the latest time a trace may hold"
        );
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    write_csv(
        Generator::new(kind, args.seed, args.events, args.start_ms),
        &mut out,
    )
    .context("writing the trace")?;
    out.flush().context("writing the trace")?;
    Ok(())
}
