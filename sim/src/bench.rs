//! `sim bench`: parse throughput of combined logs, replay throughput of five policies over
//! generated traces and of a Worker configuration (`--config`) over requests built from one, and
//! the memory a trace of a million clients takes through `sim replay`'s reader — on one core —
//! then the policy replay on one thread and on `--threads` (`sim replay --threads`), for each
//! client count and for a large trace (`--large-events`, a month of logs at 100M), and the
//! configuration replay of that large trace; each row with its own peak memory from
//! `/proc/self/status`.

use std::io::{BufReader, Read};
use std::sync::Arc;
use std::time::Instant;

use edgelimit::Policy;

use crate::bundled;
use crate::config::groups::ThreadedGrouping;
use crate::config::outage::Outages;
use crate::config::parallel::ThreadedReplay;
use crate::config::whatif::Answered;
use crate::config::{EdgeReplay, PREPARE_AHEAD};
use crate::error::SimError;
use crate::event::Event;
use crate::generate::{CsvStream, Generator, Kind};
use crate::policy::{thread_cpu_seconds, Replay, ShardedReplay};
use crate::readers::{Format, ReadOptions, Request, TraceReader};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Events in each generated replay trace.
    pub events: u64,
    /// Requests in the configuration replay (`--config`; 0: skip it).
    pub config_events: u64,
    /// Megabytes of combined log to parse.
    pub parse_mb: u64,
    /// Clients in the generated traces: one replay row each.
    pub clients: Vec<u32>,
    /// Events in the memory row, read as CSV through `sim replay`'s reader (0: skip it).
    pub memory_events: u64,
    /// Clients in the memory row.
    pub memory_clients: u32,
    /// Requests in the large-trace rows (policy and configuration replay, each on one thread
    /// and on `threads`); 0 skips them.
    pub large_events: u64,
    /// Clients (identifiers) in the large-trace rows.
    pub large_clients: u32,
    /// Requests in the large configuration row (0: skip it): a configuration replay decides
    /// several times slower than a policy replay, so it has its own size.
    pub large_config_events: u64,
    /// Threads for the threaded rows (the machine's cores by default).
    pub threads: usize,
}

/// One benchmark's result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchRow {
    /// What was measured.
    pub name: String,
    /// Events processed.
    pub events: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Events per second of wall time.
    pub events_per_s: f64,
    /// CPU seconds this process spent (user + system), where `/proc` has it: on a shared
    /// machine, wall time includes waiting for a core and CPU time does not.
    pub cpu_seconds: Option<f64>,
    /// Events per CPU second.
    pub events_per_cpu_s: Option<f64>,
    /// Megabytes per second (parse only).
    pub mb_per_s: Option<f64>,
    /// The most memory the process held while this row ran (`VmHWM`, reset before each row),
    /// in KiB, where `/proc` has it.
    pub peak_memory_kib: Option<u64>,
    /// Threaded rows: the CPU seconds of the busiest thread (the reading one or a replay
    /// thread) — the wall time on a machine with a core free for each thread, which a machine
    /// shared with other work does not give (its wall time includes waiting for a core).
    pub busiest_thread_cpu_seconds: Option<f64>,
}

/// The policies the replay benchmark runs: one per algorithm, at a limit heavy clients reach.
pub const BENCH_POLICIES: [&str; 5] = [
    "fixed 100/1m",
    "sliding-log 100/1m",
    "sliding-counter 100/1m",
    "token-bucket 100/1m",
    "gcra 100/1m",
];

/// Events replayed per [`Replay::step_all`] call.
const CHUNK: usize = 1024;

/// Cycles over a buffer `copies` times, so gigabytes can be parsed without holding them.
struct Repeat {
    data: Arc<Vec<u8>>,
    pos: usize,
    copies: u64,
}

impl Read for Repeat {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.data.len() {
            if self.copies <= 1 {
                return Ok(0);
            }
            self.copies -= 1;
            self.pos = 0;
        }
        let n = buf.len().min(self.data.len() - self.pos);
        buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Wall time, CPU time and peak memory of one measured run.
struct Measured {
    wall: f64,
    cpu: Option<f64>,
    peak_kib: Option<u64>,
}

/// Runs `f` with the peak-memory mark reset first (the peak is then this run's own).
fn measure<T>(f: impl FnOnce() -> Result<T, SimError>) -> Result<(T, Measured), SimError> {
    reset_peak_memory();
    let started = Instant::now();
    let cpu0 = cpu_seconds();
    let out = f()?;
    let measured = Measured {
        wall: started.elapsed().as_secs_f64(),
        cpu: cpu_seconds().zip(cpu0).map(|(b, a)| b - a),
        peak_kib: peak_memory_kib(),
    };
    Ok((out, measured))
}

/// Runs every benchmark.
pub fn run(options: &BenchOptions) -> Result<Vec<BenchRow>, SimError> {
    let mut rows = parse_rows(options)?;
    let policies: Vec<Policy> = BENCH_POLICIES
        .iter()
        .map(|s| {
            s.parse()
                .map_err(|e: edgelimit::PolicyError| SimError::Usage(e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    for &clients in &options.clients {
        rows.extend(replay_rows(options.events, clients, &policies)?);
        if options.threads > 1 {
            for threads in [1, options.threads] {
                rows.push(threaded_row(options.events, clients, &policies, threads)?);
            }
        }
    }
    if options.config_events > 0 {
        rows.extend(config_rows(options.config_events, CONFIG_IDENTIFIERS)?);
        if options.threads > 1 {
            for threads in [1, options.threads] {
                rows.extend(config_threaded_row(
                    options.config_events,
                    CONFIG_IDENTIFIERS,
                    threads,
                )?);
            }
        }
    }
    if options.large_events > 0 {
        let mut counts = vec![1];
        if options.threads > 1 {
            counts.push(options.threads);
        }
        for threads in counts {
            rows.push(threaded_row(
                options.large_events,
                options.large_clients,
                &policies,
                threads,
            )?);
        }
    }
    if options.large_config_events > 0 {
        rows.extend(config_rows(
            options.large_config_events,
            options.large_clients,
        )?);
        if options.threads > 1 {
            for threads in [1, options.threads] {
                rows.extend(config_threaded_row(
                    options.large_config_events,
                    options.large_clients,
                    threads,
                )?);
            }
        }
    }
    if options.memory_events > 0 {
        rows.push(memory_row(options, &policies)?);
    }
    Ok(rows)
}

/// Parse: the bundled combined log, decompressed once, read over and over — once with the
/// reorder buffer off (the parser and interner alone) and once as `sim replay` reads (60 s).
fn parse_rows(options: &BenchOptions) -> Result<Vec<BenchRow>, SimError> {
    let mut log = Vec::new();
    flate2::read::GzDecoder::new(bundled::TRACE)
        .read_to_end(&mut log)
        .map_err(|e| SimError::io("bundled trace", e))?;
    let log = Arc::new(log);
    let copies = (options.parse_mb * 1_000_000)
        .div_ceil(log.len() as u64)
        .max(1);
    let bytes = copies * log.len() as u64;
    let mut rows = Vec::new();
    for (name, window) in [
        ("parse combined log (+ intern)", 0),
        ("  … + reorder buffer (60s), as replay reads", 60_000),
    ] {
        let reader = BufReader::with_capacity(
            1 << 16,
            Repeat {
                data: log.clone(),
                pos: 0,
                copies,
            },
        );
        // Each copy starts the clock again; those events are clamped, which costs the same.
        let read = ReadOptions {
            format: Some(Format::Clf),
            reorder_window_ms: window,
            ..ReadOptions::default()
        };
        let (n, m) = measure(|| {
            let mut n = 0u64;
            for ev in TraceReader::from_reader(Box::new(reader), "bench".into(), read) {
                ev?;
                n += 1;
            }
            Ok(n)
        })?;
        rows.push(row(name.into(), n, &m, Some(bytes)));
    }
    Ok(rows)
}

/// The replay benchmark's trace: heavy-tailed, streamed from the generator so memory stays
/// O(clients).
fn heavy_tailed(events: u64, clients: u32) -> Generator {
    Generator::new(
        Kind::HeavyTailed {
            rate: 20_000.0,
            clients,
            alpha: 1.1,
        },
        42,
        events,
        1_700_000_000_000,
    )
}

/// Events generated ahead of each timed stretch of replay: 1 MiB of events, small against the
/// replay's own state.
const BLOCK: usize = 1 << 16;

/// Replay of the five policies with every metric, events handed over in runs as `run` does.
/// Events are generated a block at a time and only the replay of each block is timed: timing
/// the generator alone and subtracting it (as this benchmark once did) undercounts it, because
/// interleaved with replay its tables miss in cache and it costs about twice as much.
fn replay_rows(events: u64, clients: u32, policies: &[Policy]) -> Result<Vec<BenchRow>, SimError> {
    let (n, total) = measure(|| {
        let mut replay = Replay::new(policies)?;
        let mut generator = heavy_tailed(events, clients);
        let mut block = Vec::with_capacity(BLOCK);
        let (mut wall, mut cpu) = (0.0, Some(0.0));
        loop {
            block.clear();
            block.extend(generator.by_ref().take(BLOCK));
            if block.is_empty() {
                break;
            }
            let started = Instant::now();
            let cpu0 = cpu_seconds();
            for chunk in block.chunks(CHUNK) {
                replay.step_all(chunk);
            }
            wall += started.elapsed().as_secs_f64();
            cpu = cpu
                .zip(cpu_seconds().zip(cpu0))
                .map(|(c, (b, a))| c + b - a);
        }
        Ok((replay.events(), wall, cpu))
    })?;
    let (n, wall, cpu) = n;
    let replay = Measured {
        wall,
        cpu,
        peak_kib: total.peak_kib,
    };
    Ok(vec![row(
        format!("replay 5 policies + metrics ({clients} clients)"),
        n,
        &replay,
        None,
    )])
}

/// Events generated once for the threaded rows, then replayed over and over.
const POOL: u64 = 4_000_000;

/// A replay of the five policies on `threads` threads as `sim replay --threads` runs it: one
/// thread hands events over (as the reader would), the replay threads step their clients (with
/// one thread, the reader's own thread replays, as `--threads 1` does). So that the generator
/// is not timed (it costs more than the replay), the trace is a pool of [`POOL`] generated
/// events played again and again, each time after the last (same clients, same gaps): the
/// states of every client live through the whole trace, as in a month of logs. The row's
/// peak memory is the replay's own (plus the pool's 24 bytes an event).
fn threaded_row(
    events: u64,
    clients: u32,
    policies: &[Policy],
    threads: usize,
) -> Result<BenchRow, SimError> {
    let pool: Vec<Event> = heavy_tailed(events.min(POOL), clients).collect();
    let span = match (pool.first(), pool.last()) {
        (Some(a), Some(b)) => b.time_ms - a.time_ms + 1,
        _ => 1,
    };
    // Each pass shifted after the last, in order.
    let len = pool.len().max(1) as u64;
    let trace = || {
        (0..events.min(len * u64::from(u32::MAX))).map(|i| {
            let ev = pool[(i % len) as usize];
            Event {
                time_ms: ev.time_ms + i / len * span,
                ..ev
            }
        })
    };
    let cpu0 = process_cpu_seconds();
    let ((n, busiest), mut m) = measure(|| {
        let reader0 = thread_cpu_seconds();
        if threads <= 1 {
            let mut replay = Replay::new(policies)?;
            let mut chunk = Vec::with_capacity(CHUNK);
            for ev in trace() {
                chunk.push(ev);
                if chunk.len() == CHUNK {
                    replay.step_all(&chunk);
                    chunk.clear();
                }
            }
            replay.step_all(&chunk);
            let results = replay.finish(&crate::event::Interner::new());
            let own = thread_cpu_seconds().zip(reader0).map(|(b, a)| b - a);
            Ok((results.first().map_or(0, |r| r.requests), own))
        } else {
            let mut replay = ShardedReplay::new(policies, threads)?;
            for ev in trace() {
                replay.push(ev);
            }
            let reading = thread_cpu_seconds().zip(reader0).map(|(b, a)| b - a);
            let (results, cpu) = replay.finish_timed(&crate::event::Interner::new());
            let busiest = cpu
                .into_iter()
                .chain([reading])
                .collect::<Option<Vec<f64>>>()
                .map(|all| all.into_iter().fold(0.0, f64::max));
            Ok((results.first().map_or(0, |r| r.requests), busiest))
        }
    })?;
    // Every thread's CPU time, not this one's alone.
    m.cpu = process_cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    let mut row = row(
        format!("replay 5 policies, {clients} clients, {threads} thread(s)"),
        n,
        &m,
        None,
    );
    row.busiest_thread_cpu_seconds = busiest;
    Ok(row)
}

/// The configuration the `--config` row replays: three rules, five limits, every algorithm, one
/// shadow rule, an API key hashed and a limit that skips requests without its header.
pub const BENCH_CONFIG: &str = include_str!("bench-config.toml");

/// Distinct identifiers in the configuration row's trace.
pub const CONFIG_IDENTIFIERS: u32 = 100_000;

/// One generated event as a request: client `c` is the address `10.x.y.z`, holds API key
/// `c mod 20000`, writes (POST, with a user header) one request in eight, and asks for a static
/// file one in five (no rule but the shadow one).
fn bench_request(ev: &Event, out: &mut Request, text: &mut String) {
    use std::fmt::Write as _;
    let c = ev.client;
    out.clear();
    out.time_ms = ev.time_ms;
    let write = ev.time_ms.is_multiple_of(8);
    out.set_method(if write { b"POST" } else { b"GET" });
    out.set_host(b"api.example.com");
    text.clear();
    if ev.time_ms.is_multiple_of(5) {
        let _ = write!(text, "/static/{}.css", c % 50);
    } else {
        let _ = write!(text, "/api/items/{}?page={}", c % 1000, ev.time_ms % 7);
    }
    out.set_target(text.as_bytes());
    text.clear();
    let _ = write!(text, "10.{}.{}.{}", c >> 16 & 255, c >> 8 & 255, c & 255);
    out.set_client_ip(text.as_bytes());
    text.clear();
    let _ = write!(text, "Bearer key-{}", c % 20_000);
    out.add_header(b"authorization", text.as_bytes());
    if write {
        text.clear();
        let _ = write!(text, "user-{}", c % 5_000);
        out.add_header(b"x-user", text.as_bytes());
    }
}

/// Requests built ahead of each timed stretch of the configuration replay.
const REQUEST_BLOCK: usize = 1 << 14;

/// The configuration row: requests built from a heavy-tailed trace of [`CONFIG_IDENTIFIERS`]
/// clients, replayed through [`BENCH_CONFIG`] with every per-rule and per-limit tally on.
/// Requests are built a block at a time and only the replay of each block is timed, as
/// [`replay_rows`] times only the replay of generated events (the generator's tables and the
/// request text would otherwise be counted, and interleaved they miss in cache).
fn config_rows(events: u64, identifiers: u32) -> Result<Vec<BenchRow>, SimError> {
    let (n, total) = measure(|| {
        let config = edgelimit_engine::config::file::parse(BENCH_CONFIG, "bench")?;
        let mut replay = EdgeReplay::new(config, Outages::default(), false)?;
        let mut answered = Answered::default();
        let mut generator = heavy_tailed(events, identifiers);
        let mut block = vec![Request::default(); REQUEST_BLOCK];
        let mut text = String::new();
        let (mut n, mut wall, mut cpu) = (0u64, 0.0, Some(0.0));
        loop {
            let mut built = 0;
            // The block first: `zip` then draws no event it would drop.
            for (request, ev) in block.iter_mut().zip(generator.by_ref()) {
                bench_request(&ev, request, &mut text);
                built += 1;
            }
            if built == 0 {
                break;
            }
            let started = Instant::now();
            let cpu0 = cpu_seconds();
            // As `sim replay` does: each request prepared a few ahead of its step.
            let block = &block[..built];
            for request in block.iter().take(PREPARE_AHEAD) {
                replay.prepare(request);
            }
            for (i, request) in block.iter().enumerate() {
                if let Some(ahead) = block.get(i + PREPARE_AHEAD) {
                    replay.prepare(ahead);
                }
                replay.step(request, &mut answered)?;
            }
            wall += started.elapsed().as_secs_f64();
            cpu = cpu
                .zip(cpu_seconds().zip(cpu0))
                .map(|(c, (b, a))| c + b - a);
            n += built as u64;
        }
        Ok((n, wall, cpu))
    })?;
    let (n, wall, cpu) = n;
    let replay = Measured {
        wall,
        cpu,
        peak_kib: total.peak_kib,
    };
    Ok(vec![row(
        format!("replay --config, 3 rules 5 limits ({identifiers} ids)"),
        n,
        &replay,
        None,
    )])
}

/// The configuration replay end to end as `sim replay --config --threads N` runs it, each
/// request built from the generated trace where the replay would read and parse it: on one
/// thread, built, prepared and stepped by one thread; on more, a first pass building every
/// request to find the groups sharing state (`config::groups`: the identifiers extracted on
/// the replay threads, the groups joined on the building one), then a second building each
/// again and handing it to its replay thread, and the threads' counts merged. The requests are
/// built twice, as a trace is read twice. `busiest cpu s` is the critical path: the first
/// pass, then the busier of the handing thread and the replay threads, then the merge — the
/// wall time on a machine with a core free for each thread.
/// With more than one thread, two rows follow: the CPU seconds of the first pass and of the
/// busiest replay thread. A row whose denial cache could have been full says so: `sim replay`
/// would then replay on one thread (`config::parallel`).
fn config_threaded_row(
    events: u64,
    identifiers: u32,
    threads: usize,
) -> Result<Vec<BenchRow>, SimError> {
    let config = edgelimit_engine::config::file::parse(BENCH_CONFIG, "bench")?;
    let cpu0 = process_cpu_seconds();
    let since = |a: Option<f64>| thread_cpu_seconds().zip(a).map(|(b, a)| b - a);
    let ((n, critical, parts), mut m) = measure(|| {
        let start = thread_cpu_seconds();
        let mut text = String::new();
        if threads <= 1 {
            let mut replay = EdgeReplay::new(config.clone(), Outages::default(), false)?;
            let mut answered = Answered::default();
            let mut ahead: std::collections::VecDeque<Request> =
                std::collections::VecDeque::with_capacity(PREPARE_AHEAD + 1);
            let mut spare: Vec<Request> = Vec::new();
            let mut events = heavy_tailed(events, identifiers);
            let mut n = 0u64;
            loop {
                if let Some(ev) = events.next() {
                    let mut request = spare.pop().unwrap_or_default();
                    bench_request(&ev, &mut request, &mut text);
                    replay.prepare(&request);
                    ahead.push_back(request);
                    if ahead.len() <= PREPARE_AHEAD {
                        continue;
                    }
                }
                let Some(request) = ahead.pop_front() else {
                    break;
                };
                replay.step(&request, &mut answered)?;
                spare.push(request);
                n += 1;
            }
            let _ = replay.rule_reports();
            return Ok((n, since(start), None));
        }
        let mut spare: Vec<Request> = Vec::new();
        let mut grouping = ThreadedGrouping::new(&config, threads);
        for ev in heavy_tailed(events, identifiers) {
            let mut request = spare.pop().unwrap_or_default();
            bench_request(&ev, &mut request, &mut text);
            grouping.add(request, |done| spare.push(done));
        }
        let assignment = grouping.assign(threads, |done| spare.push(done));
        let grouped = since(start);
        let handing = thread_cpu_seconds();
        let mut replay = ThreadedReplay::new(&config, &assignment, false)?;
        for ev in heavy_tailed(events, identifiers) {
            let mut request = spare.pop().unwrap_or_default();
            bench_request(&ev, &mut request, &mut text);
            replay.push(request)?;
            replay.recycle(|spent| spare.push(spent));
        }
        let handed = since(handing);
        let merging = thread_cpu_seconds();
        let (merged, cpu) = replay.finish(&config, &assignment)?;
        let merge = since(merging);
        // The replay threads ran while this one handed requests over; the merge after both.
        let busiest_replay = cpu
            .into_iter()
            .collect::<Option<Vec<f64>>>()
            .map(|all| all.into_iter().fold(0.0, f64::max));
        let critical = busiest_replay
            .zip(handed)
            .map(|(replay, handed)| replay.max(handed))
            .zip(grouped.zip(merge))
            .map(|(busiest, (grouped, merge))| grouped + busiest + merge);
        // Where the denial cache could have filled, `sim replay` would replay on one thread.
        let exact = !merged.denial_cache_could_fill;
        Ok((
            merged.requests(),
            critical,
            Some((grouped, busiest_replay, exact)),
        ))
    })?;
    m.cpu = process_cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    let inexact = match parts {
        Some((_, _, false)) => " (cache full: 1 thread)",
        _ => "",
    };
    let mut row = row(
        format!("replay --config end to end ({identifiers} ids), {threads} thread(s){inexact}"),
        n,
        &m,
        None,
    );
    row.busiest_thread_cpu_seconds = critical;
    let mut rows = vec![row];
    if let Some((grouped, busiest_replay, _)) = parts {
        for (name, cpu) in [
            ("  … first pass: requests built, grouped", grouped),
            ("  … busiest replay thread", busiest_replay),
        ] {
            let part = Measured {
                wall: cpu.unwrap_or(0.0),
                cpu,
                peak_kib: None,
            };
            rows.push(self::row(name.into(), n, &part, None));
        }
    }
    Ok(rows)
}

/// `sim replay` end to end but for the file: a generated CSV trace (uniform clients, so nearly
/// all of them appear) streamed through the reader (parse, intern, reorder) into the replay.
/// Its peak memory is what a trace with that many clients costs.
fn memory_row(options: &BenchOptions, policies: &[Policy]) -> Result<BenchRow, SimError> {
    let clients = options.memory_clients;
    let events = options.memory_events;
    let ((n, seen), m) = measure(|| {
        let generator = Generator::new(
            Kind::Poisson {
                rate: 20_000.0,
                clients,
            },
            7,
            events,
            1_700_000_000_000,
        );
        let input = BufReader::with_capacity(1 << 16, CsvStream::new(generator));
        let mut reader =
            TraceReader::from_reader(Box::new(input), "bench.csv".into(), ReadOptions::default());
        let mut replay = Replay::new(policies)?;
        let mut chunk = Vec::with_capacity(CHUNK);
        for ev in reader.by_ref() {
            chunk.push(ev?);
            if chunk.len() == CHUNK {
                replay.step_all(&chunk);
                chunk.clear();
            }
        }
        replay.step_all(&chunk);
        Ok((replay.events(), reader.interner().len()))
    })?;
    Ok(row(
        format!("read CSV + replay ({seen} of {clients} clients)"),
        n,
        &m,
        None,
    ))
}

/// CPU seconds every thread of this process has run (user + system, 10 ms ticks).
fn process_cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

/// CPU seconds this thread has run: from `/proc/thread-self/schedstat` (nanoseconds) where
/// the kernel keeps it, else user + system time from `/proc/self/stat` (10 ms ticks).
pub fn cpu_seconds() -> Option<f64> {
    if let Some(ns) = std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .filter(|&ns| ns > 0)
    {
        return Some(ns as f64 / 1e9);
    }
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th there.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn row(name: String, events: u64, m: &Measured, bytes: Option<u64>) -> BenchRow {
    let wall = m.wall.max(1e-9);
    BenchRow {
        name,
        events,
        seconds: wall,
        events_per_s: events as f64 / wall,
        cpu_seconds: m.cpu,
        events_per_cpu_s: m.cpu.filter(|&c| c > 0.0).map(|c| events as f64 / c),
        mb_per_s: bytes.map(|b| b as f64 / 1e6 / wall),
        peak_memory_kib: m.peak_kib,
        busiest_thread_cpu_seconds: None,
    }
}

/// Resets the peak resident memory mark to the current resident size (Linux: `5` to
/// `/proc/self/clear_refs`), so the next [`peak_memory_kib`] is the peak since now. Where that is
/// not possible the mark keeps the process's peak, which is at least as large.
fn reset_peak_memory() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Peak resident memory (`VmHWM`) in KiB, where `/proc` has it.
pub fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The table `sim bench` prints.
pub fn render(rows: &[BenchRow]) -> String {
    let mut out = format!(
        "{:<56} {:>10} {:>8} {:>12} {:>8} {:>12} {:>6} {:>9} {:>13}\n",
        "benchmark",
        "events",
        "wall s",
        "events/s",
        "cpu s",
        "events/cpu-s",
        "MB/s",
        "peak MiB",
        "busiest cpu s"
    );
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    for r in rows {
        out.push_str(&format!(
            "{:<56} {:>10} {:>8.2} {:>12.0} {:>8} {:>12} {:>6} {:>9} {:>13}\n",
            r.name,
            r.events,
            r.seconds,
            r.events_per_s,
            or_dash(r.cpu_seconds.map(|c| format!("{c:.2}"))),
            or_dash(r.events_per_cpu_s.map(|e| format!("{e:.0}"))),
            or_dash(r.mb_per_s.map(|m| format!("{m:.0}"))),
            or_dash(
                r.peak_memory_kib
                    .map(|k| format!("{:.1}", k as f64 / 1024.0))
            ),
            or_dash(r.busiest_thread_cpu_seconds.map(|c| format!("{c:.2}"))),
        ));
    }
    out
}
