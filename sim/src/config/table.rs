//! The configuration report as terminal text (through the report kit): totals, one row per rule
//! and per limit, the most limited identifiers, and — when asked — outages, agreement with the
//! Worker's log, what-if.

use std::borrow::Cow;
use std::fmt::Write;

use super::overrides::AppliedOverrides;
use super::report::{ConfigReport, GlobalReport, RegionsReport};
use crate::readers::time::format_utc;
use crate::regions::Attribution;
use crate::report::text::{aligned, trace_header};
use crate::report::words::fit;

/// The regions' requests, how they were placed, and the latencies carried.
fn regions_line(r: &RegionsReport) -> String {
    let requests: Vec<String> = r
        .regions
        .iter()
        .map(|g| format!("{} {}", g.name, g.requests))
        .collect();
    // In order of precedence; a region the trace named reads "named".
    let by: Vec<String> = Attribution::ALL
        .iter()
        .filter_map(|by| {
            let n = r.attributed_by.get(by.as_str()).copied().unwrap_or(0);
            let word = match by {
                Attribution::Named => "named",
                other => other.as_str(),
            };
            (n > 0).then(|| format!("{word} {n}"))
        })
        .collect();
    let latencies: Vec<String> = r
        .regions
        .iter()
        .map(|g| format!("{} {} ms", g.name, g.home_one_way_ms))
        .collect();
    let mut line = format!(
        "regions {} (placed by {}",
        requests.join(", "),
        by.join(", ")
    );
    if r.unknown_places > 0 {
        let _ = write!(
            line,
            "; {} with an unknown country or continent",
            r.unknown_places
        );
    }
    let _ = write!(
        line,
        ")\n        one way to the home: {}; {} ms within a region",
        latencies.join(", "),
        r.local_one_way_ms
    );
    line
}

/// The report as text.
pub fn render(report: &ConfigReport) -> String {
    let mut out = trace_header(&report.trace);
    let limits: usize = report.rules.iter().map(|r| r.limits.len()).sum();
    let _ = writeln!(
        out,
        "config  {}: {} rules, {limits} limits, one isolate; replayed in {} ms\n",
        report.config,
        report.rules.len(),
        report.elapsed_ms
    );
    if let Some(r) = &report.regions {
        let _ = writeln!(out, "{}", regions_line(r));
    }
    if let Some(d) = &report.decisions {
        let _ = writeln!(out, "decisions {}: {} rows", d.file, d.rows);
    }
    if let Some(o) = &report.overrides {
        let _ = writeln!(out, "{}", overrides_line(o));
    }
    let statuses: Vec<String> = report
        .statuses
        .iter()
        .filter(|(s, _)| **s != 200)
        .map(|(s, n)| format!("{s}: {n}"))
        .collect();
    let _ = writeln!(
        out,
        "requests {}: {} forwarded, {} refused ({}); {} matched no enforced rule",
        report.requests,
        report.admitted,
        report.denied,
        if statuses.is_empty() {
            "none".to_string()
        } else {
            statuses.join(", ")
        },
        report.unmatched
    );
    let ambiguous = match report.ambiguous_requests {
        0 => String::new(),
        n => format!("; {n} refused as ambiguous (a field sent twice, an unreadable path)"),
    };
    let _ = writeln!(
        out,
        "         {} lacked an identifier{ambiguous}; shadow rules would have refused {}\n",
        report.missing_identifiers, report.shadow_would_deny
    );
    if let Some(exceeding) = &report.exceeding {
        let waits = exceeding.waits_ms.as_ref().map_or(String::new(), |w| {
            format!(
                " (wait ms: mean {:.0}, p50 {}, p90 {}, p99 {}, max {})",
                w.mean, w.p50, w.p90, w.p99, w.max
            )
        });
        let _ = writeln!(
            out,
            "         soft limits tagged {} for the origin; staged limits would have refused {} \
             more; blocks refused {}; {} waited{waits}\n",
            exceeding.soft_tagged,
            exceeding.staged_shadow_denied,
            exceeding.blocked,
            exceeding.delayed
        );
    }
    let header = [
        "rule / limit",
        "matched",
        "admitted",
        "denied",
        "429s",
        "missing",
        "max/window",
        "×limit",
        "false allow",
        "false deny",
    ];
    let mut rows = Vec::new();
    for rule in &report.rules {
        rows.push(vec![
            format!(
                "{}{}",
                rule.name,
                if rule.shadow { " (shadow)" } else { "" }
            ),
            rule.matched.to_string(),
            rule.admitted.to_string(),
            rule.denied.to_string(),
        ]);
        for l in &rule.limits {
            let b = &l.boundary;
            rows.push(vec![
                format!("  {}  {}  {}", l.name, l.policy, l.identifier),
                l.checked.to_string(),
                String::new(),
                l.denied.to_string(),
                l.answered.to_string(),
                l.missing.to_string(),
                b.max_admitted_in_window.to_string(),
                format!("{:.2}×", b.max_window_multiple),
                b.false_allows.to_string(),
                b.false_denies.to_string(),
            ]);
        }
    }
    out.push_str(&aligned(&header, &rows));
    let _ = writeln!(
        out,
        "\nA rule's admitted/denied: what happened to the requests it matched (a shadow rule: what \
         it would have done). A limit's row: requests it decided, those it alone refused, the \
         refusals that named it (429s/503s), requests without its identifier; max/window and \
         false allow/deny against the exact sliding log of its reference, replayed alongside."
    );
    let mut listed = String::new();
    for rule in report.rules.iter().filter(|r| r.listed + r.allowlisted > 0) {
        let _ = writeln!(
            listed,
            "  {}: {} refused by a deny list (403), {} exempted by an allow list",
            rule.name, rule.listed, rule.allowlisted
        );
    }
    if !listed.is_empty() {
        let _ = write!(
            out,
            "\ndeny and allow lists (a listed request counts on no limit)\n{listed}"
        );
    }
    let mut tops = String::new();
    for rule in &report.rules {
        for l in rule.limits.iter().filter(|l| !l.top_identifiers.is_empty()) {
            let list: Vec<String> = l
                .top_identifiers
                .iter()
                .take(5)
                .map(|t| format!("{} ({})", shortened(&t.identifier), t.denied))
                .collect();
            let _ = writeln!(tops, "  {} / {}: {}", rule.name, l.name, list.join(", "));
        }
    }
    if !tops.is_empty() {
        let _ = write!(out, "\nmost limited identifiers\n{tops}");
    }
    let mut peaks = String::new();
    for rule in &report.rules {
        for l in &rule.limits {
            let Some(f) = &l.boundary.in_flight else {
                continue;
            };
            let list: Vec<String> = f
                .top_peaks
                .iter()
                .take(5)
                .map(|p| format!("{} ({})", shortened(&p.identifier), p.peak))
                .collect();
            let _ = writeln!(
                peaks,
                "  {} / {}: {}; {} requests released after their duration, {} held to the timeout",
                rule.name,
                l.name,
                if list.is_empty() {
                    "-".to_string()
                } else {
                    list.join(", ")
                },
                f.requests_with_duration,
                f.requests_without_duration
            );
        }
    }
    if !peaks.is_empty() {
        let _ = write!(
            out,
            "\npeak in flight (concurrency limits; max/window is the peak, false allow/deny \
             against the exact in-flight count)\n{peaks}"
        );
    }
    if let Some(g) = &report.global {
        out.push_str(&global_section(g));
    }
    if let Some(o) = &report.outage {
        let spans: Vec<String> = o
            .spans
            .iter()
            .map(|s| format!("{} → {}", format_utc(s.from_ms), format_utc(s.to_ms)))
            .collect();
        let _ = writeln!(
            out,
            "\noutage  {}: {} requests while the store was down; {} answered 503 (fail closed), \
             {} limit decisions failed open, {} made by the fallback",
            spans.join(", "),
            o.requests,
            o.failed_closed,
            o.failed_open,
            o.fallback_decisions
        );
        for rule in &report.rules {
            for l in rule
                .limits
                .iter()
                .filter(|l| l.boundary.fallback_decided > 0)
            {
                let b = &l.boundary;
                let _ = writeln!(
                    out,
                    "        {} / {} fallback: {} decisions, {} over-admitted, {} under-admitted against the exact log",
                    rule.name, l.name, b.fallback_decided, b.fallback_false_allows, b.fallback_false_denies
                );
            }
        }
    }
    if let Some(a) = &report.against_log {
        let _ = writeln!(
            out,
            "\nagainst the Worker's log: {} requests compared, {} differ ({} in status)",
            a.compared, a.mismatches, a.status_mismatches
        );
        for s in &a.samples {
            let _ = writeln!(out, "  {s}");
        }
    }
    if let Some(w) = &report.whatif {
        let _ = writeln!(
            out,
            "\nwhat-if: {} against the baseline {}: {} requests 200 → refused, {} refused → 200",
            report.config, w.baseline, w.newly_denied, w.newly_admitted
        );
        if let Some(o) = &w.baseline_overrides {
            let _ = writeln!(out, "baseline {}", overrides_line(o));
        }
        let header = [
            "rule",
            "matched",
            "200→refused",
            "refused→200",
            "most affected",
        ];
        let rows: Vec<Vec<String>> = w
            .rules
            .iter()
            .map(|r| {
                let note = match (r.in_baseline, r.in_candidate) {
                    (true, false) => " (removed)",
                    (false, true) => " (new)",
                    _ => "",
                };
                let affected: Vec<String> = r
                    .top_identifiers
                    .iter()
                    .take(3)
                    .map(|a| {
                        format!(
                            "{} (+{}/−{})",
                            shortened(&a.identifier),
                            a.newly_denied,
                            a.newly_admitted
                        )
                    })
                    .collect();
                vec![
                    format!("{}{note}", r.name),
                    r.matched.to_string(),
                    r.newly_denied.to_string(),
                    r.newly_admitted.to_string(),
                    affected.join(", "),
                ]
            })
            .collect();
        out.push_str(&aligned(&header, &rows));
    }
    out
}

/// The configuration decided in its regions against the exact reference: one row per limit,
/// then every request and each region.
fn global_section(g: &GlobalReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nglobal limits in {} regions (static share {}, bucket leases {} ms, local round trip \
         {} ms) against the exact reference on one store",
        g.regions.len(),
        percent(g.static_share_ppm as f64 / 1e6),
        g.lease_ms,
        g.local_round_trip_ms
    );
    let header = [
        "limit / region",
        "requests",
        "admitted",
        "exact",
        "false denied",
        "over admitted",
        "max/window",
        "waited",
        "home trips/req",
        "calls/req",
        "p50 ms",
        "p99 ms",
    ];
    let mut rows = Vec::new();
    for l in &g.limits {
        let bound = match (l.max_admitted_in_window, l.limit) {
            (Some(max), Some(limit)) => format!("{max}/{limit}"),
            _ => "-".into(),
        };
        rows.push(vec![
            format!("  {}  {}  {}", l.name, l.policy, l.scope),
            l.requests.to_string(),
            l.admitted.to_string(),
            l.admitted_exact.to_string(),
            l.false_denied.to_string(),
            l.over_admitted.to_string(),
            bound,
            percent(l.waited_share),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ]);
    }
    rows.push(vec![
        "every request".into(),
        g.requests.to_string(),
        g.admitted.to_string(),
        g.admitted_exact.to_string(),
        g.false_denied.to_string(),
        g.over_admitted.to_string(),
        String::new(),
        percent(g.waited_share),
        format!("{:.3}", g.home_round_trips_per_request),
        format!("{:.3}", g.script_calls_per_request),
        g.latency.p50_ms.to_string(),
        g.latency.p99_ms.to_string(),
    ]);
    for r in &g.regions {
        rows.push(vec![
            format!("  {} (home {} ms)", r.name, r.home_round_trip_ms),
            r.requests.to_string(),
            r.admitted.to_string(),
            r.admitted_exact.to_string(),
            r.false_denied.to_string(),
            r.over_admitted.to_string(),
            String::new(),
            percent(r.waited_share),
            format!("{:.3}", r.home_round_trips_per_request),
            format!("{:.3}", r.script_calls_per_request),
            r.latency.p50_ms.to_string(),
            r.latency.p99_ms.to_string(),
        ]);
    }
    out.push_str(&aligned(&header, &rows));
    let _ = writeln!(
        out,
        "\nadmitted: requests admitted in the regions (a limit's row: by that limit); exact: by \
         the reference; false denied: admitted by the reference, refused in the regions; over \
         admitted: the reverse (a denial earlier leaves capacity for later); max/window: a fixed \
         window's most admitted for one identifier in one window, every region together, over \
         its limit; waited: requests that waited for the home; calls/req: script calls of \
         every store (the region's, the home's, the lenders') per request, one store deciding \
         every request making 1; p50/p99: the latency the round trips add ({} home round trips \
         in all).\nestimated cost: {} script calls, {} commands per million requests (Upstash \
         bills each script call as one command).",
        g.home_round_trips, g.script_calls, g.commands_per_million_requests
    );
    out
}

/// `0.25` as `25.0%`.
fn percent(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

/// `overrides FILE: 3 tiers, 1 override, 2 deny entries, 1 allow entry; applied at …`.
fn overrides_line(o: &AppliedOverrides) -> String {
    let at = o
        .applied_at_ms
        .map(|ms| format!("; applied at {}", format_utc(ms)))
        .unwrap_or_default();
    let ignored = if o.dynamic_lists || o.deny_entries + o.allow_entries == 0 {
        ""
    } else {
        " (dynamic_lists = false: the Worker reads no list entry, nor does the replay)"
    };
    format!("overrides {}: {}{at}{ignored}", o.file, o.summary())
}

/// Identifiers longer than this are cut in the table (user agents run to 150 characters); the
/// JSON keeps them whole.
const SHOWN_CHARS: usize = 40;

/// `id`, or its first characters and `…`.
fn shortened(id: &str) -> Cow<'_, str> {
    fit(id, SHOWN_CHARS, SHOWN_CHARS)
}
