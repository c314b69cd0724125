//! Bad input gives a clear error naming file, line and field, or a counted skip — never a panic.

use std::io::Write;

use edgelimit_sim::readers::{Format, ReadOptions, TraceReader};
use edgelimit_sim::{Event, SimError};

const GOOD: &str = r#"83.149.9.216 - - [17/May/2015:10:05:03 +0000] "GET /presentations/logstash-monitorama-2013/images/kibana-search.png HTTP/1.1" 200 203023 "http://semicomplete.com/presentations/logstash-monitorama-2013/" "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_9_1) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/32.0.1700.77 Safari/537.36""#;

fn read(data: Vec<u8>, options: ReadOptions) -> (Result<Vec<Event>, SimError>, TraceReader) {
    let mut reader = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(data)),
        "trace.log".into(),
        options,
    );
    let events: Result<Vec<Event>, SimError> = reader.by_ref().collect();
    (events, reader)
}

fn trace_with_bad_lines() -> Vec<u8> {
    let mut t = String::new();
    t.push_str(GOOD);
    t.push('\n');
    t.push_str(&GOOD[..60]); // truncated inside the request
    t.push('\n');
    t.push_str(&GOOD.replace("10:05:03", "10:65:03")); // bad timestamp
    t.push('\n');
    t.push_str(GOOD);
    t.push('\n');
    t.into_bytes()
}

#[test]
fn bad_lines_are_counted_with_line_numbers() {
    let (events, reader) = read(trace_with_bad_lines(), ReadOptions::default());
    assert_eq!(events.unwrap().len(), 2);
    let s = reader.stats();
    assert_eq!(s.bad_lines, 2);
    assert_eq!(
        (s.bad_samples[0].line, s.bad_samples[0].field),
        (2, "request")
    );
    assert_eq!(
        (s.bad_samples[1].line, s.bad_samples[1].field),
        (3, "timestamp")
    );
}

#[test]
fn strict_stops_at_the_first_with_file_line_and_field() {
    let options = ReadOptions {
        strict: true,
        ..ReadOptions::default()
    };
    let (events, _) = read(trace_with_bad_lines(), options);
    let err = events.unwrap_err().to_string();
    assert!(
        err.starts_with("trace.log:2: request: truncated line"),
        "{err}"
    );
}

#[test]
fn an_empty_file_is_a_clear_error() {
    let (events, _) = read(Vec::new(), ReadOptions::default());
    let err = events.unwrap_err().to_string();
    assert_eq!(err, "trace.log: no events in the trace (the file is empty)");
}

#[test]
fn binary_garbage_is_skipped_then_reported() {
    let mut garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    garbage.extend_from_slice(b"\n\x00\xff\xfe[\n");
    for format in [
        None,
        Some(Format::Clf),
        Some(Format::Logpush),
        Some(Format::Haproxy),
    ] {
        let options = ReadOptions {
            format,
            ..ReadOptions::default()
        };
        let (events, reader) = read(garbage.clone(), options);
        let err = events.unwrap_err().to_string();
        assert!(err.contains("no events in the trace"), "{err}");
        assert!(err.contains("line 1"), "{err}");
        assert!(reader.stats().bad_lines >= 1);
    }
}

#[test]
fn gzip_is_detected_by_its_magic_bytes() {
    let dir = std::env::temp_dir().join(format!("sim-gzip-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Named .log, but gzip inside.
    let path = dir.join("access.log");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    for _ in 0..3 {
        writeln!(gz, "{GOOD}").unwrap();
    }
    std::fs::write(&path, gz.finish().unwrap()).unwrap();
    let source = edgelimit_sim::input::Source::File(path.clone());
    let reader = TraceReader::open(&source, ReadOptions::default(), Default::default()).unwrap();
    let events: Vec<Event> = reader.map(Result::unwrap).collect();
    assert_eq!(events.len(), 3);
    let missing = edgelimit_sim::input::Source::File(dir.join("nope.log"));
    let err = TraceReader::open(&missing, ReadOptions::default(), Default::default()).unwrap_err();
    assert!(err.to_string().contains("nope.log"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn lines_later_than_the_window_are_clamped_and_counted() {
    let line = |t: &str| GOOD.replace("10:05:03", t);
    let text = [
        line("10:05:03"),
        line("10:07:00"),
        line("10:05:00"),
        line("10:07:01"),
    ]
    .join("\n");
    let options = ReadOptions {
        reorder_window_ms: 10_000,
        ..ReadOptions::default()
    };
    let (events, reader) = read(text.into_bytes(), options);
    let times: Vec<u64> = events
        .unwrap()
        .iter()
        .map(|e| e.time_ms % 1_000_000)
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    assert_eq!(reader.stats().reorder.late_clamped, 1);
}
