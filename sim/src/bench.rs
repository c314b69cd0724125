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
    /// Events per second.
    pub events_per_s: f64,
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
    // Parse: the bundled combined log, decompressed once, read over and over.
    let mut log = Vec::new();
    flate2::read::GzDecoder::new(bundled::TRACE)
        .read_to_end(&mut log)
        .map_err(|e| SimError::io("bundled trace", e))?;
    let copies = (options.parse_mb * 1_000_000)
        .div_ceil(log.len() as u64)
        .max(1);
    let bytes = copies * log.len() as u64;
    let reader = BufReader::with_capacity(
        1 << 16,
        Repeat {
            data: Arc::new(log),
            pos: 0,
            copies,
        },
    );
    let read = ReadOptions {
        format: Some(Format::Clf),
        // Each copy starts the clock again; a zero window just clamps those, leaving the parser
        // and interner as the measured work.
        reorder_window_ms: 0,
        ..ReadOptions::default()
    };
    let started = Instant::now();
    let mut n = 0u64;
    for ev in TraceReader::from_reader(Box::new(reader), "bench".into(), read) {
        ev?;
        n += 1;
    }
    let s = started.elapsed().as_secs_f64();
    rows.push(BenchRow {
        name: "parse combined log (+ intern)".into(),
        events: n,
        seconds: s,
        events_per_s: n as f64 / s,
        mb_per_s: Some(bytes as f64 / 1e6 / s),
    });

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
    let mut checksum = 0u64;
    for ev in generator() {
        checksum = checksum.wrapping_add(ev.time_ms ^ u64::from(ev.client));
    }
    let generate_s = started.elapsed().as_secs_f64();
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
    for ev in generator() {
        replay.step(ev);
    }
    let total_s = started.elapsed().as_secs_f64();
    let s = (total_s - generate_s).max(1e-9);
    let n = replay.events();
    rows.push(BenchRow {
        name: format!("replay 5 policies + metrics ({} clients)", options.clients),
        events: n,
        seconds: s,
        events_per_s: n as f64 / s,
        mb_per_s: None,
    });
    rows.push(BenchRow {
        name: "  (generator alone, subtracted above)".into(),
        events: n,
        seconds: generate_s,
        events_per_s: n as f64 / generate_s,
        mb_per_s: None,
    });
    Ok(rows)
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
        "{:<48} {:>12} {:>9} {:>14} {:>9}\n",
        "benchmark (one core)", "events", "seconds", "events/s", "MB/s"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<48} {:>12} {:>9.2} {:>14.0} {:>9}\n",
            r.name,
            r.events,
            r.seconds,
            r.events_per_s,
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
