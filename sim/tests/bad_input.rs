//! Bad input gives a clear error naming file, line and field, or a counted skip — never a panic.

use std::io::Write;

use proptest::prelude::*;

use edgelimit_sim::readers::time::LATEST_MS;
use edgelimit_sim::readers::{Format, ReadOptions, TraceReader, MAX_COST};
use edgelimit_sim::{Event, SimError};
use edgelimit_testkit::dir::TempDir;

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
        Some(Format::Csv),
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
    let dir = TempDir::new("sim-gzip");
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

/// Reads `text` as `format`, returning the events' times and the bad lines as (line, field).
fn times_and_bad_lines(text: &str, format: Format) -> (Vec<u64>, Vec<(u64, &'static str)>) {
    let options = ReadOptions {
        format: Some(format),
        ..ReadOptions::default()
    };
    let (events, reader) = read(text.as_bytes().to_vec(), options);
    let times = events.map(|e| e.iter().map(|e| e.time_ms).collect());
    let stats = reader.stats();
    let bad = stats
        .bad_samples
        .iter()
        .map(|b| (b.line, b.field))
        .collect();
    (times.unwrap_or_default(), bad)
}

const HAPROXY: &str = r#"Feb  6 12:14:14 localhost haproxy[14389]: 10.0.1.2:33317 [06/Feb/2009:12:14:14.655] http-in static/srv1 10/0/30/69/109 200 2750 - - ---- 1/1/1/1/0 0/0 {1wt.eu} {} "GET /index.html HTTP/1.1""#;

/// 2020-02-29T00:00:00Z and 2000-02-29T00:00:00Z, for the leap days that do exist.
const LEAP_2020_MS: u64 = 1_582_934_400_000;
const LEAP_2000_MS: u64 = 951_782_400_000;

#[test]
fn dates_that_do_not_exist_are_bad_lines_in_every_reader() {
    // Each reader's date syntax: a day that does not exist, then real leap days.
    let clf = |date: &str| GOOD.replace("17/May/2015:10:05:03", date);
    let text = [
        clf("30/Feb/2020:00:00:00"),
        clf("29/Feb/1900:00:00:00"),
        clf("31/Apr/2021:00:00:00"),
        clf("29/Feb/2020:00:00:00"),
        clf("29/Feb/2000:00:00:00"),
    ]
    .join("\n");
    let (times, bad) = times_and_bad_lines(&text, Format::Clf);
    assert_eq!(
        bad,
        [(1, "timestamp"), (2, "timestamp"), (3, "timestamp")],
        "clf"
    );
    assert_eq!(times, [LEAP_2000_MS, LEAP_2020_MS], "clf");

    let ha = |date: &str| HAPROXY.replace("06/Feb/2009:12:14:14", date);
    let text = [ha("30/Feb/2020:00:00:00"), ha("29/Feb/2020:00:00:00")].join("\n");
    let (times, bad) = times_and_bad_lines(&text, Format::Haproxy);
    assert_eq!(bad, [(1, "accept_date")], "haproxy");
    assert_eq!(times, [LEAP_2020_MS + 655], "haproxy");

    let text =
        "timestamp,client\n2021-02-29T00:00:00Z,a\n2020-02-30T00:00:00Z,a\n2020-02-29T00:00:00Z,a";
    let (times, bad) = times_and_bad_lines(text, Format::Csv);
    assert_eq!(bad, [(2, "timestamp"), (3, "timestamp")], "csv");
    assert_eq!(times, [LEAP_2020_MS], "csv");

    let lp = |t: &str| format!(r#"{{"ClientIP":"1.2.3.4","EdgeStartTimestamp":"{t}"}}"#);
    let text = [lp("2021-02-29T00:00:00Z"), lp("2020-02-29T00:00:00Z")].join("\n");
    let (times, bad) = times_and_bad_lines(&text, Format::Logpush);
    assert_eq!(bad, [(1, "EdgeStartTimestamp")], "logpush");
    assert_eq!(times, [LEAP_2020_MS], "logpush");
}

#[test]
fn the_problem_says_why_the_date_is_wrong() {
    let options = ReadOptions {
        strict: true,
        ..ReadOptions::default()
    };
    let text = GOOD.replace("17/May/2015", "30/Feb/2020");
    let (events, _) = read(text.into_bytes(), options);
    let err = events.unwrap_err().to_string();
    assert_eq!(
        err,
        "trace.log:1: timestamp: 2020-02-30 does not exist (2020-02 has 29 days)"
    );
}

#[test]
fn times_before_1970_or_after_9999_are_bad_lines() {
    let clf = |date: &str| GOOD.replace("17/May/2015:10:05:03 +0000", date);
    let text = [
        clf("31/Dec/1969:23:59:59 +0000"),
        clf("01/Jan/1970:00:30:00 +0100"), // 23:30 UTC the day before
        clf("31/Dec/9999:23:59:59 -0100"), // 00:59 UTC in year 10000
        clf("01/Jan/1970:00:00:00 +0000"),
        clf("31/Dec/9999:23:59:59 +0000"),
    ]
    .join("\n");
    let (times, bad) = times_and_bad_lines(&text, Format::Clf);
    assert_eq!(bad, [(1, "timestamp"), (2, "timestamp"), (3, "timestamp")]);
    assert_eq!(times, [0, 253_402_300_799_000]);

    // CSV: milliseconds, Unix numbers of every unit, decimals and RFC 3339.
    let text = [
        "timestamp_ms,client",
        "-5,a",
        "253402300800000,a",
        "18446744073709551615,a",
        "1e300,a",
        "-0.5,a",
        "inf,a",
        "253402300799999,a",
    ]
    .join("\n");
    let (times, bad) = times_and_bad_lines(&text, Format::Csv);
    assert_eq!(bad.len(), 5, "{bad:?}"); // only five samples are kept
    assert!(
        bad.iter().all(|&(_, field)| field == "timestamp"),
        "{bad:?}"
    );
    assert_eq!(times, [253_402_300_799_999]);
    let text = "timestamp,client\n-1,a\n1e300,a\n9999-12-31T23:59:59.999-00:01,a\n1700000000,a";
    let (times, bad) = times_and_bad_lines(text, Format::Csv);
    assert_eq!(bad, [(2, "timestamp"), (3, "timestamp"), (4, "timestamp")]);
    assert_eq!(times, [1_700_000_000_000]);

    let lp = |t: &str| format!(r#"{{"ClientIP":"1.2.3.4","EdgeStartTimestamp":{t}}}"#);
    let text = [
        lp("-1"),
        lp("1e300"),
        lp("\"10000-01-01T00:00:00Z\""),
        lp("1700000000"),
    ]
    .join("\n");
    let (times, bad) = times_and_bad_lines(&text, Format::Logpush);
    let fields: Vec<_> = bad.iter().map(|b| b.0).collect();
    assert_eq!(fields, [1, 2, 3]);
    assert_eq!(times, [1_700_000_000_000]);
}

#[test]
fn costs_outside_one_to_two_to_the_fifty_are_bad_lines_naming_the_cost() {
    let text = [
        "timestamp_ms,client,cost",
        "1000,a,0",
        "1000,a,-1",
        "1000,a,9223372036854775808",
        "1000,a,1125899906842625", // 2^50 + 1
        "1000,a,1.5",
        "1000,a,1125899906842624", // 2^50: the largest capacity a policy can have
        "1000,a,7",
    ]
    .join("\n");
    let options = ReadOptions {
        format: Some(Format::Csv),
        ..ReadOptions::default()
    };
    let (events, reader) = read(text.into_bytes(), options);
    let costs: Vec<i64> = events.unwrap().iter().map(|e| e.cost).collect();
    assert_eq!(costs, [1 << 50, 7]);
    let stats = reader.stats();
    let bad: Vec<(u64, &str)> = stats
        .bad_samples
        .iter()
        .map(|b| (b.line, b.field))
        .collect();
    assert_eq!(
        bad,
        [
            (2, "cost"),
            (3, "cost"),
            (4, "cost"),
            (5, "cost"),
            (6, "cost")
        ]
    );
    assert!(stats.bad_samples[0].problem.contains("a cost is 1 to 2^50"));
    assert!(stats.bad_samples[1].problem.contains("refund"));
    assert!(stats.bad_samples[2].problem.contains("exceeds 2^50"));

    let json = |cost: &str| format!(r#"{{"timestamp_ms":1000,"client":"a","cost":{cost}}}"#);
    let text = [
        json("0"),
        json("-3"),
        json("9223372036854775808"),
        json("1e30"),
        json("\"2\""),
        json("2"),
    ]
    .join("\n");
    let (events, reader) = read(text.into_bytes(), ReadOptions::default());
    let costs: Vec<i64> = events.unwrap().iter().map(|e| e.cost).collect();
    assert_eq!(costs, [2]);
    let stats = reader.stats();
    assert_eq!(stats.bad_lines, 5);
    assert!(stats.bad_samples.iter().all(|b| b.field == "cost"));
}

#[test]
fn nul_bytes_make_a_bad_line_and_the_lines_after_still_count() {
    // What `copytruncate` log rotation leaves: a run of NULs where the writer's offset was,
    // running into the next line it writes.
    let mut text = vec![0u8; 4096];
    text.extend_from_slice(GOOD.as_bytes());
    text.push(b'\n');
    text.extend_from_slice(GOOD.replace("83.149", "83.\x0049").as_bytes());
    text.push(b'\n');
    text.extend_from_slice(GOOD.as_bytes());
    let (events, reader) = read(text, ReadOptions::default());
    assert_eq!(events.unwrap().len(), 1);
    let stats = reader.stats();
    assert_eq!(stats.bad_lines, 2);
    assert_eq!(
        (stats.bad_samples[0].line, stats.bad_samples[0].field),
        (1, "line")
    );
    assert!(stats.bad_samples[0]
        .problem
        .contains("NUL byte at column 1"));
    assert!(stats.bad_samples[1]
        .problem
        .contains("NUL byte at column 4"));
}

#[test]
fn long_lines_are_read_and_over_long_ones_skipped_without_holding_them() {
    // A real line with a 50,000-character URL is still a request; 50,000 characters of
    // nothing are a bad line; a line over the bound is a bad line named as such.
    let long_url = GOOD.replace(
        "GET /presentations",
        &format!("GET /{}", "a".repeat(50_000)),
    );
    let garbage = "x".repeat(50_000);
    let huge = "y".repeat(edgelimit_sim::readers::MAX_LINE_BYTES + 1);
    let text = [long_url.as_str(), &garbage, &huge, GOOD].join("\n");
    let (events, reader) = read(text.into_bytes(), ReadOptions::default());
    assert_eq!(events.unwrap().len(), 2);
    let stats = reader.stats();
    let bad: Vec<(u64, &str)> = stats
        .bad_samples
        .iter()
        .map(|b| (b.line, b.field))
        .collect();
    assert_eq!(bad, [(2, "host"), (3, "line")]);
    assert!(stats.bad_samples[1]
        .problem
        .contains("more than the 1048576"));
}

#[test]
fn a_trace_of_only_blank_lines_or_a_header_says_so() {
    let (events, _) = read(b"\n  \n\r\n".to_vec(), ReadOptions::default());
    let err = events.unwrap_err().to_string();
    assert_eq!(
        err,
        "trace.log: no events in the trace (3 lines, all blank, comments or a header)"
    );
    let (events, _) = read(
        b"timestamp_ms,client,cost\n".to_vec(),
        ReadOptions::default(),
    );
    assert!(events.unwrap_err().to_string().contains("1 lines"));
}

fn gzip_of(lines: usize) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    for i in 0..lines {
        // Distinct clients, so the stream does not compress to almost nothing.
        writeln!(
            gz,
            "{}",
            GOOD.replace("83.149.9.216", &format!("10.{}.{}.1", i / 256, i % 256))
        )
        .unwrap();
    }
    gz.finish().unwrap()
}

#[test]
fn a_truncated_gzip_is_an_error_naming_the_file_and_what_was_read() {
    let dir = TempDir::new("sim-truncated");
    let path = dir.join("access.log.gz");
    let whole = gzip_of(5_000);
    std::fs::write(&path, &whole[..whole.len() / 2]).unwrap();
    let source = edgelimit_sim::input::Source::File(path.clone());
    let reader = TraceReader::open(&source, ReadOptions::default(), Default::default()).unwrap();
    let mut events = 0;
    let mut error = None;
    for ev in reader {
        match ev {
            Ok(_) => events += 1,
            Err(e) => {
                error = Some(e);
                break;
            }
        }
    }
    let err = error.expect("a truncated gzip must not read as a complete trace");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("{}: truncated gzip", path.display())),
        "{text}"
    );
    // The lines read before the cut are counted (the reorder buffer had released some).
    let SimError::Read {
        lines,
        events: parsed,
        ..
    } = err
    else {
        panic!("{text}")
    };
    assert!(lines > 1_000 && lines < 5_000, "{text}");
    assert_eq!(parsed, lines);
    assert!(events <= parsed);
    assert!(text.contains(&format!("after {lines} lines")), "{text}");

    // A corrupt stream (its checksum no longer matches) is an error too, never a panic.
    let mut corrupt = whole.clone();
    let n = corrupt.len();
    corrupt[n - 6] ^= 0xff;
    std::fs::write(&path, &corrupt).unwrap();
    let reader = TraceReader::open(&source, ReadOptions::default(), Default::default()).unwrap();
    let err = reader
        .filter_map(Result::err)
        .next()
        .expect("a corrupt gzip is an error");
    assert!(
        err.to_string()
            .contains("not a valid gzip stream: corrupt gzip stream"),
        "{err}"
    );
}

/// A line of each format that reads, the seed of the mutations below.
const SEEDS: [&str; 6] = [
    GOOD,
    HAPROXY,
    r#"{"ClientIP":"198.51.100.7","ClientRequestHost":"example.com","EdgeStartTimestamp":1700000000123456789}"#,
    r#"{"timestamp_ms":1700000000001,"client":"dave","cost":2}"#,
    "timestamp_ms,client,cost\n1700000000000,alice,3",
    "2023-11-14T22:13:20.5+01:00,10.0.0.1,2",
];

const FORMATS: [Option<Format>; 5] = [
    None,
    Some(Format::Clf),
    Some(Format::Haproxy),
    Some(Format::Logpush),
    Some(Format::Csv),
];

/// Reads `data` every way there is — each format, guessed or not, counting or `--strict` — and
/// checks the reader's accounts: the test fails on a panic, and on counts that do not add up.
fn read_every_way(data: &[u8]) {
    for format in FORMATS {
        for strict in [false, true] {
            let options = ReadOptions {
                format,
                strict,
                reorder_window_ms: 1_000,
                ..ReadOptions::default()
            };
            let (events, reader) = read(data.to_vec(), options);
            let stats = reader.stats();
            assert!(stats.bad_lines + stats.events <= stats.lines, "{stats:?}");
            if let Ok(events) = events {
                assert_eq!(events.len() as u64, stats.events);
                assert!(events.windows(2).all(|w| w[0].time_ms <= w[1].time_ms));
                assert!(events.iter().all(|e| e.time_ms <= LATEST_MS));
                assert!(events
                    .iter()
                    .all(|e| (1..=MAX_COST as i64).contains(&e.cost)));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_a_reader(data in prop::collection::vec(any::<u8>(), 0..1500)) {
        read_every_way(&data);
    }

    /// Random bytes rarely get past a parser's first check; real lines with a few bytes
    /// changed, cut or doubled reach every field's code.
    #[test]
    fn mutated_lines_never_panic_a_reader(
        seed in 0..SEEDS.len(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0..4u8), 1..6),
        copies in 1..4usize,
    ) {
        let mut line = SEEDS[seed].as_bytes().to_vec();
        for (at, byte, how) in edits {
            let i = at.index(line.len() + 1);
            match how {
                0 => line.insert(i, byte),
                1 if i < line.len() => line[i] = byte,
                2 => line.truncate(i),
                _ => line.insert(i, b"0123456789:-/.+ ,"[byte as usize % 17]),
            }
        }
        let mut data = Vec::new();
        for _ in 0..copies {
            data.extend_from_slice(&line);
            data.push(b'\n');
        }
        read_every_way(&data);
    }

    #[test]
    fn random_bytes_after_the_gzip_magic_are_an_error_not_a_panic(
        tail in prop::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut data = vec![0x1f, 0x8b];
        data.extend_from_slice(&tail);
        let leaked: &'static [u8] = Box::leak(data.into_boxed_slice());
        let source = edgelimit_sim::input::Source::Bytes { name: "fuzz.gz".into(), data: leaked };
        if let Ok(reader) = TraceReader::open(&source, ReadOptions::default(), Default::default()) {
            for ev in reader {
                if ev.is_err() {
                    break;
                }
            }
        }
    }
}

/// Request mode (`--config`) reads the same lines through its own parsers: a NUL byte, a line
/// over the limit and a date that does not exist are counted bad lines there too, and the good
/// lines around them still become requests.
#[test]
fn request_mode_counts_nul_long_and_impossible_date_lines() {
    use edgelimit_sim::readers::{RequestOptions, MAX_LINE_BYTES};
    let mut t = Vec::new();
    t.extend_from_slice(GOOD.as_bytes());
    t.push(b'\n');
    t.extend_from_slice(&GOOD.as_bytes()[..40]);
    t.push(0);
    t.extend_from_slice(&GOOD.as_bytes()[40..]);
    t.push(b'\n');
    t.extend_from_slice(
        GOOD.replace("/presentations/", &"x".repeat(MAX_LINE_BYTES))
            .as_bytes(),
    );
    t.push(b'\n');
    t.extend_from_slice(GOOD.replace("17/May/2015", "31/Feb/2015").as_bytes());
    t.push(b'\n');
    t.extend_from_slice(GOOD.as_bytes());
    t.push(b'\n');
    let mut reader = TraceReader::requests_from_reader(
        Box::new(std::io::Cursor::new(t)),
        "trace.log".into(),
        ReadOptions {
            format: Some(Format::Clf),
            ..ReadOptions::default()
        },
        RequestOptions::default(),
    );
    let mut paths = Vec::new();
    while let Some(request) = reader.next_request() {
        let request = request.unwrap();
        paths.push(request.time_ms);
        reader.recycle(request);
    }
    assert_eq!(paths, vec![1_431_857_103_000; 2]);
    let s = reader.stats();
    assert_eq!(s.bad_lines, 3);
    let lines: Vec<(u64, &str)> = s.bad_samples.iter().map(|b| (b.line, b.field)).collect();
    assert_eq!(lines, vec![(2, "line"), (3, "line"), (4, "timestamp")]);
    assert!(
        s.bad_samples[0].problem.contains("NUL byte at column 41"),
        "{:?}",
        s.bad_samples[0]
    );
    assert!(
        s.bad_samples[1].problem.contains("bytes long"),
        "{:?}",
        s.bad_samples[1]
    );
    assert!(
        s.bad_samples[2].problem.contains("does not exist"),
        "{:?}",
        s.bad_samples[2]
    );
}
