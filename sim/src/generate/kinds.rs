//! The synthetic traces. Each is an iterator of events in time order, so replay can consume it
//! directly (the benchmark does) or `sim generate` can write it as CSV.

use super::rng::Rng;
use crate::event::Event;

/// Which trace to generate, with its parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A Poisson process of `rate` requests/s spread uniformly over `clients`.
    Poisson {
        /// Requests per second, all clients together.
        rate: f64,
        /// Distinct clients.
        clients: u32,
    },
    /// On/off traffic: `rate × burst_factor` while on, `rate / burst_factor` while off, with
    /// exponentially distributed on and off periods of mean `period_ms`.
    Bursty {
        /// The base rate (requests/s).
        rate: f64,
        /// Distinct clients.
        clients: u32,
        /// How much faster the on periods are (and slower the off periods).
        burst_factor: f64,
        /// The mean length of an on or off period (ms).
        period_ms: f64,
    },
    /// Many clients whose rates follow a Pareto law (shape `alpha`): a few send most requests.
    HeavyTailed {
        /// Requests per second, all clients together.
        rate: f64,
        /// Distinct clients.
        clients: u32,
        /// The Pareto shape (smaller: heavier tail; 1.1 is typical of web traffic).
        alpha: f64,
    },
    /// The boundary attack on a fixed window of `limit` per `window_ms`: `limit` requests in the
    /// last millisecond before a window edge, `limit` more in its first millisecond, repeated every
    /// `rounds` windows apart, from one client.
    Boundary {
        /// The limit attacked.
        limit: u64,
        /// The window attacked (ms).
        window_ms: u64,
        /// How many attacks.
        rounds: u64,
    },
}

/// A generated trace: `events` events from `start_ms`, seeded.
#[derive(Debug, Clone)]
pub struct Generator {
    kind: Kind,
    rng: Rng,
    now: f64,
    left: u64,
    /// Cumulative client weights (heavy-tailed only).
    weights: Vec<f64>,
    on: bool,
    switch_at: f64,
    round: u64,
    index: u64,
}

impl Generator {
    /// A generator of `events` events (for `Boundary`: `2·limit·rounds`, whatever `events` says).
    pub fn new(kind: Kind, seed: u64, events: u64, start_ms: u64) -> Generator {
        let mut rng = Rng::new(seed);
        let weights = match &kind {
            Kind::HeavyTailed { clients, alpha, .. } => {
                let mut acc = 0.0;
                (0..*clients)
                    .map(|_| {
                        acc += rng.unit().powf(-1.0 / alpha.max(0.01));
                        acc
                    })
                    .collect()
            }
            _ => Vec::new(),
        };
        let left = match &kind {
            Kind::Boundary { limit, rounds, .. } => 2 * limit * rounds,
            _ => events,
        };
        let switch_at = match &kind {
            Kind::Bursty { period_ms, .. } => start_ms as f64 + rng.exp(*period_ms),
            _ => f64::INFINITY,
        };
        Generator {
            kind,
            rng,
            now: start_ms as f64,
            left,
            weights,
            on: true,
            switch_at,
            round: 0,
            index: 0,
        }
    }

    fn client_uniform(&mut self, clients: u32) -> u32 {
        self.rng.below(u64::from(clients.max(1))) as u32
    }
}

impl Iterator for Generator {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let (time_ms, client) = match self.kind.clone() {
            Kind::Poisson { rate, clients } => {
                self.now += self.rng.exp(1000.0 / rate.max(1e-9));
                (self.now as u64, self.client_uniform(clients))
            }
            Kind::Bursty {
                rate,
                clients,
                burst_factor,
                period_ms,
            } => {
                let r = if self.on {
                    rate * burst_factor
                } else {
                    rate / burst_factor
                };
                self.now += self.rng.exp(1000.0 / r.max(1e-9));
                while self.now > self.switch_at {
                    self.on = !self.on;
                    self.switch_at += self.rng.exp(period_ms);
                }
                (self.now as u64, self.client_uniform(clients))
            }
            Kind::HeavyTailed { rate, .. } => {
                self.now += self.rng.exp(1000.0 / rate.max(1e-9));
                let total = self.weights.last().copied().unwrap_or(1.0);
                let x = self.rng.unit() * total;
                let c = self.weights.partition_point(|&w| w < x);
                (
                    self.now as u64,
                    c.min(self.weights.len().saturating_sub(1)) as u32,
                )
            }
            Kind::Boundary {
                limit, window_ms, ..
            } => {
                // Round r attacks the edge at (2r + 1)·W past the start (one quiet window between
                // attacks, so each attack stands alone): `limit` at edge − 1, `limit` at edge.
                if self.index == 2 * limit {
                    self.index = 0;
                    self.round += 1;
                }
                let base = (self.now as u64).div_ceil(window_ms) * window_ms;
                let edge = base + (2 * self.round + 1) * window_ms;
                let t = if self.index < limit { edge - 1 } else { edge };
                self.index += 1;
                (t, 0)
            }
        };
        Some(Event::new(time_ms, client, 1))
    }
}

/// Writes a trace as CSV with a `timestamp_ms,client,cost` header (clients named `c<id>`).
pub fn write_csv(
    events: impl Iterator<Item = Event>,
    out: &mut impl std::io::Write,
) -> std::io::Result<u64> {
    out.write_all(CSV_HEADER)?;
    let mut n = 0;
    for e in events {
        write_csv_line(&e, out)?;
        n += 1;
    }
    Ok(n)
}

const CSV_HEADER: &[u8] = b"timestamp_ms,client,cost\n";

fn write_csv_line(e: &Event, out: &mut impl std::io::Write) -> std::io::Result<()> {
    writeln!(out, "{},c{},{}", e.time_ms, e.client, e.cost)
}

/// The CSV [`write_csv`] writes, as a reader that generates it as it is read: a trace of any
/// length in constant memory (the benchmark reads one through `sim replay`'s reader).
#[derive(Debug)]
pub struct CsvStream<I> {
    events: I,
    buf: Vec<u8>,
    pos: usize,
}

impl<I: Iterator<Item = Event>> CsvStream<I> {
    /// Streams `events` as CSV, header first.
    pub fn new(events: I) -> CsvStream<I> {
        CsvStream {
            events,
            buf: CSV_HEADER.to_vec(),
            pos: 0,
        }
    }
}

impl<I: Iterator<Item = Event>> std::io::Read for CsvStream<I> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
            for e in self.events.by_ref().take(1024) {
                write_csv_line(&e, &mut self.buf)?;
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_ordered_seeded_and_sized() {
        let kinds = [
            Kind::Poisson {
                rate: 100.0,
                clients: 10,
            },
            Kind::Bursty {
                rate: 100.0,
                clients: 10,
                burst_factor: 10.0,
                period_ms: 2000.0,
            },
            Kind::HeavyTailed {
                rate: 100.0,
                clients: 1000,
                alpha: 1.1,
            },
        ];
        for kind in kinds {
            let a: Vec<Event> = Generator::new(kind.clone(), 3, 5000, 1_000_000).collect();
            let b: Vec<Event> = Generator::new(kind.clone(), 3, 5000, 1_000_000).collect();
            assert_eq!(a, b);
            assert_eq!(a.len(), 5000);
            assert!(
                a.windows(2).all(|w| w[0].time_ms <= w[1].time_ms),
                "{kind:?}"
            );
        }
    }

    #[test]
    fn the_stream_reads_as_written() {
        use std::io::Read;
        let kind = Kind::Poisson {
            rate: 100.0,
            clients: 50,
        };
        let mut written = Vec::new();
        write_csv(Generator::new(kind.clone(), 9, 3000, 0), &mut written).unwrap();
        let mut streamed = Vec::new();
        CsvStream::new(Generator::new(kind, 9, 3000, 0))
            .read_to_end(&mut streamed)
            .unwrap();
        assert_eq!(streamed, written);
        assert_eq!(written.iter().filter(|&&b| b == b'\n').count(), 3001);
    }

    #[test]
    fn boundary_attack_straddles_edges() {
        let kind = Kind::Boundary {
            limit: 3,
            window_ms: 1000,
            rounds: 2,
        };
        let t: Vec<u64> = Generator::new(kind, 0, 0, 0).map(|e| e.time_ms).collect();
        assert_eq!(
            t,
            vec![999, 999, 999, 1000, 1000, 1000, 2999, 2999, 2999, 3000, 3000, 3000]
        );
    }
}
