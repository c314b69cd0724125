//! `sim bench`: parse throughput of combined logs and replay throughput of five policies over a
//! generated trace, on one core, with peak memory from `/proc/self/status`.

use std::io::{BufReader, Read};
use std::sync::Arc;
use std::time::Instant;

use edgelimit::Policy;

use crate::bundled;
use crate::error::SimError;
use crate::generate::{Generator, Kind};
use crate::readers::{Format, ReadOptions, TraceReader};
use crate::replay::Replay;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Events in the generated replay trace.
    pub events: u64,
    /// Megabytes of combined log to parse.
    pub parse_mb: u64,
    /// Clients in the generated trace.
    pub clients: u32,
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

/// Runs both benchmarks.
pub fn run(options: &BenchOptions) -> Result<Vec<BenchRow>, SimError> {
    let mut rows = Vec::new();
    // Parse: the bundled combined log, decompressed once, read over and over — once with the
    // reorder buffer off (the parser and interner alone) and once as `sim replay` reads (60 s).
    let mut log = Vec::new();
    flate2::read::GzDecoder::new(bundled::TRACE)
        .read_to_end(&mut log)
        .map_err(|e| SimError::io("bundled trace", e))?;
    let log = Arc::new(log);
    let copies = (options.parse_mb * 1_000_000)
        .div_ceil(log.len() as u64)
        .max(1);
    let bytes = copies * log.len() as u64;
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
        let started = Instant::now();
        let cpu0 = cpu_seconds();
        let mut n = 0u64;
        for ev in TraceReader::from_reader(Box::new(reader), "bench".into(), read) {
            ev?;
            n += 1;
        }
        let s = started.elapsed().as_secs_f64();
        let cpu = cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
        rows.push(row(name.into(), n, s, cpu, Some(bytes)));
    }

    // Replay: a heavy-tailed trace, streamed from the generator so memory stays O(clients).
    // Generating costs time too, so it is timed alone and subtracted.
    let generator = || {
        Generator::new(
            Kind::HeavyTailed {
                rate: 20_000.0,
                clients: options.clients,
                alpha: 1.1,
            },
            42,
            options.events,
            1_700_000_000_000,
        )
    };
    let started = Instant::now();
    let cpu0 = cpu_seconds();
    let mut checksum = 0u64;
    for ev in generator() {
        checksum = checksum.wrapping_add(ev.time_ms ^ u64::from(ev.client));
    }
    let generate_s = started.elapsed().as_secs_f64();
    let generate_cpu = cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    std::hint::black_box(checksum);
    let policies: Vec<Policy> = BENCH_POLICIES
        .iter()
        .map(|s| {
            s.parse()
                .map_err(|e: edgelimit::PolicyError| SimError::Usage(e.to_string()))
        })
        .collect::<Result<_, _>>()?;
    let mut replay = Replay::new(&policies)?;
    let started = Instant::now();
    let cpu0 = cpu_seconds();
    // Replay reads events in runs, as `run` does from a trace.
    let mut chunk = Vec::with_capacity(CHUNK);
    for ev in generator() {
        chunk.push(ev);
        if chunk.len() == CHUNK {
            replay.step_all(&chunk);
            chunk.clear();
        }
    }
    replay.step_all(&chunk);
    let total_s = started.elapsed().as_secs_f64();
    let total_cpu = cpu_seconds().zip(cpu0).map(|(b, a)| b - a);
    let n = replay.events();
    let cpu = total_cpu.zip(generate_cpu).map(|(t, g)| (t - g).max(0.01));
    rows.push(row(
        format!("replay 5 policies + metrics ({} clients)", options.clients),
        n,
        total_s - generate_s,
        cpu,
        None,
    ));
    rows.push(row(
        "  (generator alone, subtracted above)".into(),
        n,
        generate_s,
        generate_cpu,
        None,
    ));
    Ok(rows)
}

/// CPU seconds (user + system) this process has used, from `/proc/self/stat` (clock ticks at the
/// usual 100 Hz).
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th there.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let utime: f64 = fields.next()?.parse().ok()?;
    let stime: f64 = fields.next()?.parse().ok()?;
    Some((utime + stime) / 100.0)
}

fn row(name: String, events: u64, wall: f64, cpu: Option<f64>, bytes: Option<u64>) -> BenchRow {
    let wall = wall.max(1e-9);
    BenchRow {
        name,
        events,
        seconds: wall,
        events_per_s: events as f64 / wall,
        cpu_seconds: cpu,
        events_per_cpu_s: cpu.filter(|&c| c > 0.0).map(|c| events as f64 / c),
        mb_per_s: bytes.map(|b| b as f64 / 1e6 / wall),
    }
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
        "{:<46} {:>10} {:>8} {:>12} {:>8} {:>12} {:>6}\n",
        "benchmark (one thread)", "events", "wall s", "events/s", "cpu s", "events/cpu-s", "MB/s"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<46} {:>10} {:>8.2} {:>12.0} {:>8} {:>12} {:>6}\n",
            r.name,
            r.events,
            r.seconds,
            r.events_per_s,
            r.cpu_seconds.map_or("-".into(), |c| format!("{c:.2}")),
            r.events_per_cpu_s.map_or("-".into(), |e| format!("{e:.0}")),
            r.mb_per_s.map_or("-".into(), |m| format!("{m:.0}"))
        ));
    }
    if let Some(kib) = peak_memory_kib() {
        out.push_str(&format!(
            "peak memory (VmHWM): {:.1} MiB\n",
            kib as f64 / 1024.0
        ));
    }
    out
}
