//! The bundled trace through the three-rule configuration (`sim/data/three-rules.toml`): the
//! per-rule counts of `sim replay --config` against an independent computation written here —
//! its own reading of the combined log, its own rule matching, and its own exact sliding log and
//! fixed windows, deciding every enforced limit of a request together, all or nothing
//! (docs/design.md §2, §6).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::Read;
use std::path::PathBuf;

use edgelimit_sim::config::{run_config, ConfigReport, EdgeRunOptions, RegionOptions};
use edgelimit_sim::input::Source;
use edgelimit_sim::readers::{ReadOptions, RequestOptions};

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("data")
        .join(name)
}

/// One request of the combined log, read without the simulator's readers.
struct Line {
    time_ms: u64,
    ip: String,
    path: String,
    agent: Option<String>,
}

fn month(name: &str) -> u32 {
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    months.iter().position(|m| *m == name).expect("a month") as u32 + 1
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days(year: i64, month: u32, day: u32) -> i64 {
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m as i64 + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `17/May/2015:10:05:03 +0000` as epoch ms.
fn clf_time(s: &str) -> u64 {
    let (date, zone) = s.split_once(' ').expect("a zone");
    let mut parts = date.split([':', '/']);
    let mut next = || parts.next().expect("a date part");
    let (d, mo, y) = (next(), next(), next());
    let (h, mi, se) = (next(), next(), next());
    let seconds = days(y.parse().unwrap(), month(mo), d.parse().unwrap()) * 86_400
        + h.parse::<i64>().unwrap() * 3600
        + mi.parse::<i64>().unwrap() * 60
        + se.parse::<i64>().unwrap();
    let sign = if zone.starts_with('-') { -1 } else { 1 };
    let offset = sign
        * (zone[1..3].parse::<i64>().unwrap() * 3600 + zone[3..5].parse::<i64>().unwrap() * 60);
    ((seconds - offset) * 1000) as u64
}

/// The quoted fields of a combined-log line, in order (`\"` kept as it is: it only has to tell
/// agents apart).
fn quoted(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find('"') {
        let after = &rest[open + 1..];
        let mut end = None;
        let bytes = after.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => i += 2,
                b'"' => {
                    end = Some(i);
                    break;
                }
                _ => i += 1,
            }
        }
        let Some(end) = end else { break };
        out.push(&after[..end]);
        rest = &after[end + 1..];
    }
    out
}

fn read_trace() -> Vec<Line> {
    let mut text = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(data("apache_logs.gz")).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let mut lines: Vec<Line> = text
        .lines()
        .map(|line| {
            let ip = line.split(' ').next().unwrap().to_string();
            let open = line.find('[').unwrap();
            let close = line.find(']').unwrap();
            let q = quoted(line);
            let target = q[0].split(' ').nth(1).expect("a method and a target");
            let path = target.split(['?', '#']).next().unwrap().to_string();
            let agent = q
                .get(2)
                .map(|a| a.trim())
                .filter(|a| !a.is_empty() && *a != "-");
            Line {
                time_ms: clf_time(&line[open + 1..close]),
                ip,
                path,
                agent: agent.map(str::to_string),
            }
        })
        .collect();
    // Lines arrive up to a minute late (written when the response ended): in time order, ties
    // in file order.
    lines.sort_by_key(|l| l.time_ms);
    lines
}

/// An exact sliding log: admitted request times per identifier; a request `window` old no longer
/// counts.
struct SlidingLog {
    limit: usize,
    window: u64,
    log: HashMap<String, VecDeque<u64>>,
}

impl SlidingLog {
    fn new(limit: usize, window: u64) -> SlidingLog {
        SlidingLog {
            limit,
            window,
            log: HashMap::new(),
        }
    }
    fn would_admit(&mut self, id: &str, t: u64) -> bool {
        let log = self.log.entry(id.to_string()).or_default();
        while log.front().is_some_and(|&s| s + self.window <= t) {
            log.pop_front();
        }
        log.len() < self.limit
    }
    fn charge(&mut self, id: &str, t: u64) {
        self.log.get_mut(id).unwrap().push_back(t);
    }
}

/// A fixed window aligned to the epoch.
struct Fixed {
    limit: u64,
    window: u64,
    count: HashMap<String, (u64, u64)>,
}

impl Fixed {
    fn new(limit: u64, window: u64) -> Fixed {
        Fixed {
            limit,
            window,
            count: HashMap::new(),
        }
    }
    fn used(&self, id: &str, t: u64) -> u64 {
        match self.count.get(id) {
            Some(&(w, n)) if w == t / self.window => n,
            _ => 0,
        }
    }
    fn would_admit(&self, id: &str, t: u64) -> bool {
        self.used(id, t) < self.limit
    }
    fn charge(&mut self, id: &str, t: u64) {
        let n = self.used(id, t);
        self.count.insert(id.to_string(), (t / self.window, n + 1));
    }
}

/// Per rule: matched, admitted, denied.
type Counts = BTreeMap<&'static str, (u64, u64, u64)>;

/// The three-rule configuration, computed directly: `site` (per IP, sliding log 20/10s and fixed
/// 60/1m) on every request, `images` (per IP, fixed 10/1m) on `/images/`, both enforced limits
/// sets decided together; `slides` (shadow, per user agent, fixed 10/10s, skipped without one)
/// on `/presentations/`.
/// Whether the request path refuses `path` as unreadable (docs/configuration.md, "How a
/// request's path and host are read"), in the two ways this trace's bots write one: a raw `;`
/// (path parameters, which Java servers strip) and an encoded control character (`%09`).
fn unreadable(path: &str) -> bool {
    let control =
        |escape: &str| u8::from_str_radix(escape, 16).is_ok_and(|b| b < 0x20 || b == 0x7F);
    path.contains(';')
        || path
            .match_indices('%')
            .any(|(i, _)| path.get(i + 1..i + 3).is_some_and(control))
}

fn independent(lines: &[Line]) -> (Counts, u64) {
    let mut per_ip = SlidingLog::new(20, 10_000);
    let mut per_ip_minute = Fixed::new(60, 60_000);
    let mut images_ip = Fixed::new(10, 60_000);
    let mut slides_agent = Fixed::new(10, 10_000);
    let mut counts = Counts::new();
    let mut admitted_total = 0;
    for l in lines {
        if unreadable(&l.path) {
            // Refused with 400 before any rule is matched.
            continue;
        }
        let t = l.time_ms;
        let image = l.path.starts_with("/images/");
        let admit = per_ip.would_admit(&l.ip, t)
            && per_ip_minute.would_admit(&l.ip, t)
            && (!image || images_ip.would_admit(&l.ip, t));
        if admit {
            per_ip.charge(&l.ip, t);
            per_ip_minute.charge(&l.ip, t);
            if image {
                images_ip.charge(&l.ip, t);
            }
            admitted_total += 1;
        }
        let mut tally = |rule: &'static str, admitted: bool| {
            let c = counts.entry(rule).or_default();
            c.0 += 1;
            if admitted {
                c.1 += 1;
            } else {
                c.2 += 1;
            }
        };
        tally("site", admit);
        if image {
            tally("images", admit);
        }
        if l.path.starts_with("/presentations/") {
            let would = match &l.agent {
                None => true,
                Some(agent) => {
                    let ok = slides_agent.would_admit(agent, t);
                    if ok {
                        slides_agent.charge(agent, t);
                    }
                    ok
                }
            };
            tally("slides", would);
        }
    }
    (counts, admitted_total)
}

fn replay() -> ConfigReport {
    run_config(&EdgeRunOptions {
        source: Source::File(data("apache_logs.gz")),
        read: ReadOptions::default(),
        request: RequestOptions::default(),
        config: data("three-rules.toml"),
        baseline: None,
        overrides: None,
        baseline_overrides: None,
        outages: Vec::new(),
        progress: false,
        regions: RegionOptions::default(),
        decisions: None,
    })
    .expect("the bundled trace replays")
}

#[test]
fn per_rule_counts_match_an_independent_computation() {
    let lines = read_trace();
    let (expected, admitted) = independent(&lines);
    let report = replay();
    assert_eq!(report.trace.bad_lines, 0);
    assert_eq!(report.requests, lines.len() as u64);
    assert_eq!(report.admitted, admitted);
    assert_eq!(report.denied, lines.len() as u64 - admitted);
    let refused = lines.iter().filter(|l| unreadable(&l.path)).count() as u64;
    assert_eq!(
        refused, 3,
        "two bots' `;` and one `%09` in the bundled trace"
    );
    assert_eq!(
        report.unmatched, refused,
        "`site` matches every request the path can read"
    );
    let got: Counts = report
        .rules
        .iter()
        .map(|r| {
            let name: &'static str = match r.name.as_str() {
                "site" => "site",
                "images" => "images",
                "slides" => "slides",
                other => panic!("unexpected rule {other}"),
            };
            (name, (r.matched, r.admitted, r.denied))
        })
        .collect();
    eprintln!("rule: (matched, admitted, denied): {got:?}");
    assert_eq!(got, expected);
    // The computation is worth comparing only if every rule refused something.
    for (rule, (_, _, denied)) in &expected {
        assert!(
            *denied > 0,
            "{rule} never denied: the test would check nothing"
        );
    }
}
