//! The real trace compiled into the binary, and the policies `sim` replays when given nothing.

use crate::input::Source;

/// `data/apache_logs.gz`: 10,000 real Apache combined-log requests (see `data/README.md` for the
/// source and licence). Compiled in so `sim` runs from any directory with no download.
pub const TRACE: &[u8] = include_bytes!("../data/apache_logs.gz");

/// The name the bundled trace goes by in reports.
pub const NAME: &str = "bundled:apache_logs (elastic/examples, 10,000 requests, May 2015)";

/// Policies chosen to bind on this trace. Its traffic comes in one-minute slices (minute :05 of
/// each hour) in which a few clients send 50–108 requests, up to 7 in one second. A one-minute
/// window would align with the slices and hide every boundary; ten seconds at 10 requests binds
/// on the heavy clients and puts window edges inside their bursts, which is where the algorithms
/// differ. The buckets refill one per second with a burst of 10: the same sustained rate and
/// largest burst, so all five are held against the same exact `sliding-log 10/10s`.
pub const DEFAULT_POLICIES: [&str; 5] = [
    "fixed 10/10s",
    "sliding-log 10/10s",
    "sliding-counter 10/10s",
    "token-bucket 1/1s burst 10",
    "gcra 1/1s burst 10",
];

/// The bundled trace as a source.
pub fn source() -> Source {
    Source::Bytes {
        name: NAME.to_string(),
        data: TRACE,
    }
}
