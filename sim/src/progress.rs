//! Progress while a trace is replayed: the bytes read out of the trace's size, with rate and ETA,
//! drawn on standard error only when it is a terminal (and the user did not ask for quiet).

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::input::Source;

/// Items (events or requests) between two redraws: often enough to move, rarely enough to cost
/// nothing against a replay.
const EVERY: u64 = 1 << 14;

/// The progress of one replay (see the module).
#[derive(Debug)]
pub(crate) struct Progress {
    bar: ProgressBar,
    /// Raw bytes read so far, counted by the trace's reader.
    read: Arc<AtomicU64>,
    items: u64,
}

impl Progress {
    /// Progress over reading `source`; hidden unless `enabled` and standard error is a terminal.
    pub(crate) fn new(enabled: bool, source: &Source) -> Progress {
        Progress {
            bar: bar(enabled, source.size()),
            read: Arc::new(AtomicU64::new(0)),
            items: 0,
        }
    }

    /// The counter to open the trace with (`TraceReader::open`): it counts the raw bytes read.
    pub(crate) fn counter(&self) -> Arc<AtomicU64> {
        self.read.clone()
    }

    /// One item replayed; the bar moves every [`EVERY`] of them.
    pub(crate) fn tick(&mut self) {
        self.items += 1;
        if self.items.is_multiple_of(EVERY) {
            self.bar.set_position(self.read.load(Ordering::Relaxed));
        }
    }

    /// Clears the bar: the report follows.
    pub(crate) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

fn bar(enabled: bool, len: Option<u64>) -> ProgressBar {
    if !enabled || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = match len {
        Some(len) => ProgressBar::new(len).with_style(
            ProgressStyle::with_template(
                "{spinner} replaying {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner(),
    };
    bar.set_draw_target(ProgressDrawTarget::stderr());
    bar
}
