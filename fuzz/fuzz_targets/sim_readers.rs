//! Every log reader of `sim` (CLF, HAProxy, Logpush, CSV/NDJSON, and format sniffing) on arbitrary
//! bytes, raw or gzip: through `edgelimit_sim::input::decompressing` (gzip found by its magic
//! bytes, as for a file) and `readers::TraceReader`. The first two bytes choose the format, the
//! identifier, strictness, the reorder window and how the rest arrives. Bad lines are counted or
//! (strict) an error naming the line; events come out in time order; never a panic.
#![no_main]

use std::io::{Cursor, Write};

use edgelimit_sim::input::decompressing;
use edgelimit_sim::readers::{Format, Key, ReadOptions, TraceReader};
use edgelimit_sim::SimError;
use flate2::write::GzEncoder;
use flate2::Compression;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let [mode, more, rest @ ..] = data else {
        return;
    };
    let format = match mode & 7 {
        1 => Some(Format::Clf),
        2 => Some(Format::Haproxy),
        3 => Some(Format::Logpush),
        4 => Some(Format::Csv),
        _ => None,
    };
    let key = match (mode >> 3) & 7 {
        0 | 1 => Key::Ip,
        2 => Key::Host,
        3 => Key::Field("user".into()),
        4 => Key::Field("agent".into()),
        5 => Key::Field("ClientRequestUserAgent".into()),
        6 => Key::Field("client".into()),
        _ => Key::Field("cost".into()),
    };
    let options = ReadOptions {
        format,
        key,
        strict: mode & 0x40 != 0,
        reorder_window_ms: match more & 3 {
            0 => 0,
            1 => 1,
            2 => 60_000,
            _ => u64::MAX,
        },
    };
    // One input in four arrives gzipped: compressing costs more than reading, and flate2 is not
    // what is under test here, the readers on what it unpacks are.
    let bytes = if more & 0x0C == 0x04 {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(rest).expect("writing to memory");
        gz.finish().expect("writing to memory")
    } else {
        rest.to_vec()
    };
    let input = match decompressing(Box::new(Cursor::new(bytes)), "fuzz") {
        Ok(input) => input,
        Err(SimError::Io { .. }) => return,
        Err(e) => panic!("opening memory failed with {e:?}"),
    };
    let strict = options.strict;
    let mut reader = TraceReader::from_reader(input, "fuzz".into(), options);
    let mut events = 0u64;
    let mut last_ms = 0u64;
    let mut max_client = None;
    for item in reader.by_ref() {
        match item {
            Ok(ev) => {
                assert!(ev.time_ms >= last_ms, "events out of order");
                last_ms = ev.time_ms;
                max_client = max_client.max(Some(ev.client));
                events += 1;
            }
            Err(SimError::BadLine { line, .. }) => {
                assert!(strict, "a bad line stopped a lenient read");
                assert!(line >= 1);
                break;
            }
            // A corrupt gzip stream, a trace with no event in it, or a key the format lacks.
            Err(SimError::Io { .. } | SimError::Empty { .. } | SimError::Usage(_)) => break,
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
    let stats = reader.stats();
    assert_eq!(stats.events, events);
    assert!(stats.bad_lines + stats.events <= stats.lines);
    assert!(stats.bad_samples.len() as u64 <= stats.bad_lines);
    if let Some(id) = max_client {
        assert!((id as usize) < reader.interner().len());
        reader.interner().name(id);
    }
    if events > 0 {
        assert!(stats.first_ms <= stats.last_ms);
    }
});
