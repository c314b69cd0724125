//! Prometheus metrics for `GET /metrics`, kept with the official `prometheus-client` crate.
//!
//! Every name starts with `edgelimit_gateway_`:
//!
//! | metric | type | labels | counts |
//! | --- | --- | --- | --- |
//! | `http_requests_total` | counter | `route`, `status` | answered requests by [`Route`] and status code |
//! | `commands_total` | counter | `command` | commands Redis answered, by upper-case name |
//! | `redis_round_trip_seconds` | histogram | | round trips to Redis that got an answer |
//! | `redis_errors_total` | counter | | round trips that failed (no connection, timeout): the 503s |
//! | `auth_failures_total` | counter | | requests refused for their token: the 401s, `/metrics` included; each closes its connection |
//! | `connections_open` | gauge | | client connections open now |
//! | `connections_refused_total` | counter | | connections closed on arrival: their address held `max_connections_per_address` |
//! | `connections_evicted_total` | counter | | connections not yet authenticated closed to make room for a new one, every place taken |
//! | `connections_unauthenticated_timeouts_total` | counter | | connections closed for presenting no valid token within `unauthenticated_timeout` |
//! | `scripts` | gauge | | scripts the Upstash-flag rewrite remembers now (at most `max_scripts`) |
//! | `scripts_evicted_total` | counter | | scripts it let go to stay within `max_scripts` |
//! | `connections_max` | gauge | | `max_connections`, for the alerts to compare `connections_open` with |
//! | `scripts_max` | gauge | | `max_scripts`, for the alerts to compare `scripts` with |
//!
//! `command` is a name on the gateway's allow-list or `other`, so the page has a bounded number
//! of series whatever clients send. A command counts once Redis has answered it, its own errors
//! included; one refused by the allow-list or never sent does not. A `/multi-exec` counts its
//! commands, not the MULTI and EXEC around them.
//!
//! The hot path takes no lock but the histogram's own short one, never across an await: the
//! command counters are made when the gateway starts and found in a map that never changes.

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Registry, Unit};

/// The `Content-Type` of the page: the Prometheus text format, version 0.0.4, as every
/// edgelimit host serves its page ([`edgelimit::metrics::PROMETHEUS_CONTENT_TYPE`]), so one
/// scrape configuration reads them all.
pub const CONTENT_TYPE: &str = edgelimit::metrics::PROMETHEUS_CONTENT_TYPE;

/// The prefix of every metric name (the registry adds the `_` after it).
pub const PREFIX: &str = "edgelimit_gateway";

/// The label value for commands whose name is not on the allow-list.
pub const OTHER_COMMAND: &str = "other";

/// Upper bounds of the Redis round-trip buckets, in seconds: 100 µs (loopback) to 1 s (a
/// distant or overloaded Redis), about three buckets a decade.
pub const ROUND_TRIP_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// Command names longer than this are looked up through an allocated copy (none of Redis's are).
const NAME_BUFFER: usize = 32;

/// The kind of request, the `route` label of `http_requests_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `POST /`: one command as a JSON array.
    Single,
    /// `POST /pipeline`.
    Pipeline,
    /// `POST /multi-exec`.
    MultiExec,
    /// `GET` or `POST /<command>/<arg>/…`: the path form.
    Path,
}

impl Route {
    /// The label value: `single`, `pipeline`, `multi_exec` or `path`.
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Single => "single",
            Route::Pipeline => "pipeline",
            Route::MultiExec => "multi_exec",
            Route::Path => "path",
        }
    }

    /// The route an HTTP path is served by.
    pub fn of_path(path: &str) -> Route {
        match path {
            "/" => Route::Single,
            "/pipeline" => Route::Pipeline,
            "/multi-exec" => Route::MultiExec,
            _ => Route::Path,
        }
    }
}

impl EncodeLabelValue for Route {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), std::fmt::Error> {
        encoder.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    route: Route,
    status: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CommandLabels {
    command: String,
}

/// What the accept loop counts ([`crate::listener`]): made by [`Metrics::new`] when the page is
/// on, else counting for no one.
#[derive(Debug, Clone, Default)]
pub struct ConnectionCounters {
    pub(crate) open: Gauge,
    pub(crate) refused: Counter,
    pub(crate) evicted: Counter,
    pub(crate) unauthenticated_timeouts: Counter,
}

impl ConnectionCounters {
    /// Client connections open now.
    pub fn open(&self) -> i64 {
        self.open.get()
    }

    /// Connections closed on arrival for their address's cap.
    pub fn refused(&self) -> u64 {
        self.refused.get()
    }

    /// Connections not yet authenticated closed to make room for a new one.
    pub fn evicted(&self) -> u64 {
        self.evicted.get()
    }

    /// Connections closed for presenting no valid token in time.
    pub fn unauthenticated_timeouts(&self) -> u64 {
        self.unauthenticated_timeouts.get()
    }
}

/// What the script map counts ([`crate::command::Scripts`]).
#[derive(Debug, Clone, Default)]
pub struct ScriptCounters {
    pub(crate) entries: Gauge,
    pub(crate) evicted: Counter,
}

/// The gateway's metrics and the registry that writes them out.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    /// Upper-case command name → its counter, one per allow-list name, made at start.
    commands: HashMap<Box<[u8]>, Counter>,
    other_commands: Counter,
    round_trip: Histogram,
    redis_errors: Counter,
    auth_failures: Counter,
    connections: ConnectionCounters,
    /// The round trips' OpenTelemetry histogram, once [`crate::otel::export_metrics`] made
    /// it: each is recorded there too, as it is counted here.
    #[cfg(feature = "otel")]
    pub(crate) exported_round_trip:
        std::sync::OnceLock<edgelimit_otel::opentelemetry::metrics::Histogram<f64>>,
}

impl Metrics {
    /// Metrics with one command series per name on `allowed` (an entry such as `SCRIPT FLUSH`
    /// counts under its command, `SCRIPT`) and one for every other name, the script map's
    /// `scripts` counters, and connection counters for the accept loop ([`Metrics::connections`]).
    pub fn new(allowed: &BTreeSet<String>, scripts: &ScriptCounters) -> Metrics {
        let mut registry = Registry::with_prefix(PREFIX);
        let requests = Family::<RequestLabels, Counter>::default();
        // Each route's 200s from the start, at 0: the family is on the page before any request
        // (an exporter registers what the page declares; a rate starts from 0).
        for route in [
            Route::Single,
            Route::Pipeline,
            Route::MultiExec,
            Route::Path,
        ] {
            let _ = requests.get_or_create(&RequestLabels { route, status: 200 });
        }
        registry.register(
            "http_requests",
            "Requests answered, by route (single, pipeline, multi_exec, path) and status code",
            requests.clone(),
        );
        let command_family = Family::<CommandLabels, Counter>::default();
        registry.register(
            "commands",
            "Commands Redis answered (their own errors included), by name; names not on the \
             allow-list count as \"other\"",
            command_family.clone(),
        );
        let mut commands = HashMap::new();
        for entry in allowed {
            let Some(name) = entry.split_whitespace().next() else {
                continue;
            };
            let name = name.to_ascii_uppercase();
            if name == OTHER_COMMAND || commands.contains_key(name.as_bytes()) {
                continue;
            }
            let counter = command_family.get_or_create_owned(&CommandLabels {
                command: name.clone(),
            });
            commands.insert(name.into_bytes().into_boxed_slice(), counter);
        }
        let other_commands = command_family.get_or_create_owned(&CommandLabels {
            command: OTHER_COMMAND.to_string(),
        });
        let round_trip = Histogram::new(ROUND_TRIP_BUCKETS.iter().copied());
        registry.register_with_unit(
            "redis_round_trip",
            "Time from sending a request's commands to Redis to having its answer, for round \
             trips that got one",
            Unit::Seconds,
            round_trip.clone(),
        );
        let redis_errors = Counter::default();
        registry.register(
            "redis_errors",
            "Round trips to Redis that failed (no connection, timeout), each answered 503",
            redis_errors.clone(),
        );
        let auth_failures = Counter::default();
        registry.register(
            "auth_failures",
            "Requests refused with 401 for a missing or wrong token, /metrics included",
            auth_failures.clone(),
        );
        let connections = ConnectionCounters::default();
        registry.register(
            "connections_open",
            "Client connections open now",
            connections.open.clone(),
        );
        registry.register(
            "connections_refused",
            "Connections closed on arrival because their client address held its most \
             (max_connections_per_address)",
            connections.refused.clone(),
        );
        registry.register(
            "connections_evicted",
            "Connections not yet authenticated closed to make room for a new one, every place \
             (max_connections) taken",
            connections.evicted.clone(),
        );
        registry.register(
            "connections_unauthenticated_timeouts",
            "Connections closed for presenting no valid token within unauthenticated_timeout",
            connections.unauthenticated_timeouts.clone(),
        );
        registry.register(
            "scripts",
            "Scripts the rewrite of the Upstash-only flag remembers now (at most max_scripts)",
            scripts.entries.clone(),
        );
        registry.register(
            "scripts_evicted",
            "Scripts the rewrite of the Upstash-only flag let go to stay within max_scripts",
            scripts.evicted.clone(),
        );
        Metrics {
            registry,
            requests,
            commands,
            other_commands,
            round_trip,
            redis_errors,
            auth_failures,
            connections,
            #[cfg(feature = "otel")]
            exported_round_trip: std::sync::OnceLock::new(),
        }
    }

    /// The same page also stating the configuration's bounds, which the alerts compare the
    /// counters with (ops/prometheus): `connections_max` (`max_connections`) and `scripts_max`
    /// (`max_scripts`).
    pub fn with_bounds(mut self, max_connections: usize, max_scripts: usize) -> Metrics {
        for (name, help, value) in [
            (
                "connections_max",
                "Client connections the gateway serves at once at most (max_connections)",
                max_connections,
            ),
            (
                "scripts_max",
                "Scripts the rewrite of the Upstash-only flag remembers at most (max_scripts)",
                max_scripts,
            ),
        ] {
            let gauge: Gauge = Gauge::default();
            gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
            self.registry.register(name, help, gauge);
        }
        self
    }

    /// The accept loop's counters, registered on this page.
    pub fn connections(&self) -> ConnectionCounters {
        self.connections.clone()
    }

    /// Counts one answered request.
    pub fn request(&self, route: Route, status: u16) {
        self.requests
            .get_or_create(&RequestLabels { route, status })
            .inc();
    }

    /// Counts one command Redis answered, by its name as the client sent it (any case).
    pub fn command(&self, name: &[u8]) {
        let mut buffer = [0u8; NAME_BUFFER];
        let counter = if name.len() <= NAME_BUFFER {
            let upper = &mut buffer[..name.len()];
            upper.copy_from_slice(name);
            upper.make_ascii_uppercase();
            self.commands.get(&*upper)
        } else {
            self.commands.get(name.to_ascii_uppercase().as_slice())
        };
        counter.unwrap_or(&self.other_commands).inc();
    }

    /// Records one round trip to Redis that got an answer.
    pub fn redis_round_trip(&self, elapsed: Duration) {
        self.round_trip.observe(elapsed.as_secs_f64());
        #[cfg(feature = "otel")]
        if let Some(histogram) = self.exported_round_trip.get() {
            histogram.record(elapsed.as_secs_f64(), &[]);
        }
    }

    /// Counts one round trip to Redis that failed.
    pub fn redis_error(&self) {
        self.redis_errors.inc();
    }

    /// Counts one request refused for its token.
    pub fn auth_failure(&self) {
        self.auth_failures.inc();
    }

    /// The page: every metric in the Prometheus text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(openmetrics_to_text_format(&text))
    }
}

/// `prometheus-client`'s OpenMetrics page in the Prometheus text format 0.0.4: a counter's
/// `# HELP` and `# TYPE` name its samples' `…_total` (OpenMetrics names the family without
/// it), and the `# UNIT` and `# EOF` lines, which 0.0.4 lacks, are left out. The samples
/// themselves are the same in both formats.
fn openmetrics_to_text_format(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len());
    // prometheus-client writes a family's `# HELP` just before its `# TYPE`: held until the
    // `# TYPE` says whether the family is a counter.
    let mut help: Option<&str> = None;
    for line in openmetrics.lines() {
        if line.starts_with("# HELP ") {
            if let Some(held) = help.replace(line) {
                out.push_str(held);
                out.push('\n');
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let counter = rest.split_once(' ').filter(|(_, kind)| *kind == "counter");
            if let Some((name, _)) = counter {
                if let Some(held) = help.take() {
                    let text = held
                        .strip_prefix("# HELP ")
                        .and_then(|h| h.strip_prefix(name))
                        .unwrap_or("");
                    out.push_str(&format!("# HELP {name}_total{text}\n"));
                }
                out.push_str(&format!("# TYPE {name}_total counter\n"));
                continue;
            }
        }
        if let Some(held) = help.take() {
            out.push_str(held);
            out.push('\n');
        }
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    if let Some(held) = help {
        out.push_str(held);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    fn line<'a>(text: &'a str, start: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(start))
    }

    #[test]
    fn commands_count_by_allowed_name_in_any_case_and_the_rest_as_other() {
        let m = Metrics::new(
            &allowed(&["GET", "SET", "SCRIPT FLUSH"]),
            &ScriptCounters::default(),
        );
        m.command(b"get");
        m.command(b"GeT");
        m.command(b"SCRIPT");
        m.command(b"FLUSHALL");
        m.command(&[b'x'; 40]);
        let text = m.encode().unwrap();
        let series = |name: &str| {
            line(
                &text,
                &format!("edgelimit_gateway_commands_total{{command=\"{name}\"}} "),
            )
            .and_then(|l| l.rsplit(' ').next())
            .map(|v| v.to_string())
        };
        assert_eq!(series("GET").as_deref(), Some("2"));
        assert_eq!(series("SET").as_deref(), Some("0"));
        assert_eq!(series("SCRIPT").as_deref(), Some("1"));
        assert_eq!(series("other").as_deref(), Some("2"));
        assert_eq!(series("FLUSHALL"), None);
        assert_eq!(series("SCRIPT FLUSH"), None);
        assert!(
            !text.contains("# EOF"),
            "the 0.0.4 format has no # EOF: {text}"
        );
    }

    #[test]
    fn requests_round_trips_and_failures_are_written_out() {
        let scripts = ScriptCounters::default();
        let m = Metrics::new(&allowed(&["GET"]), &scripts);
        m.request(Route::of_path("/multi-exec"), 200);
        m.request(Route::of_path("/get/k"), 401);
        m.request(Route::of_path("/get/k"), 401);
        m.redis_round_trip(Duration::from_micros(300));
        m.redis_round_trip(Duration::from_secs(3));
        m.redis_error();
        m.auth_failure();
        let connections = m.connections();
        connections.open.set(3);
        connections.refused.inc();
        connections.evicted.inc_by(2);
        connections.unauthenticated_timeouts.inc_by(4);
        scripts.entries.set(5);
        scripts.evicted.inc_by(6);
        let m = m.with_bounds(4096, 1000);
        let text = m.encode().unwrap();
        for expected in [
            "edgelimit_gateway_http_requests_total{route=\"multi_exec\",status=\"200\"} 1",
            "edgelimit_gateway_http_requests_total{route=\"path\",status=\"401\"} 2",
            "# TYPE edgelimit_gateway_http_requests_total counter",
            "# TYPE edgelimit_gateway_redis_round_trip_seconds histogram",
            "# TYPE edgelimit_gateway_connections_open gauge",
            "edgelimit_gateway_redis_round_trip_seconds_bucket{le=\"0.00025\"} 0",
            "edgelimit_gateway_redis_round_trip_seconds_bucket{le=\"0.0005\"} 1",
            "edgelimit_gateway_redis_round_trip_seconds_bucket{le=\"1.0\"} 1",
            "edgelimit_gateway_redis_round_trip_seconds_bucket{le=\"+Inf\"} 2",
            "edgelimit_gateway_redis_round_trip_seconds_count 2",
            "edgelimit_gateway_redis_errors_total 1",
            "edgelimit_gateway_auth_failures_total 1",
            "edgelimit_gateway_connections_open 3",
            "edgelimit_gateway_connections_refused_total 1",
            "edgelimit_gateway_connections_evicted_total 2",
            "edgelimit_gateway_connections_unauthenticated_timeouts_total 4",
            "edgelimit_gateway_scripts 5",
            "edgelimit_gateway_scripts_evicted_total 6",
            "edgelimit_gateway_connections_max 4096",
            "edgelimit_gateway_scripts_max 1000",
        ] {
            assert!(text.lines().any(|l| l == expected), "{expected}\n{text}");
        }
    }

    #[test]
    fn an_openmetrics_page_reads_as_the_text_format() {
        let openmetrics = "# HELP x_requests Requests.\n# TYPE x_requests counter\n\
                           x_requests_total{a=\"b\"} 2\n\
                           # HELP x_wait Wait.\n# TYPE x_wait histogram\n# UNIT x_wait seconds\n\
                           x_wait_count 1\n# HELP x_open Open.\n# TYPE x_open gauge\nx_open 3\n# EOF\n";
        assert_eq!(
            openmetrics_to_text_format(openmetrics),
            "# HELP x_requests_total Requests.\n# TYPE x_requests_total counter\n\
             x_requests_total{a=\"b\"} 2\n\
             # HELP x_wait Wait.\n# TYPE x_wait histogram\nx_wait_count 1\n\
             # HELP x_open Open.\n# TYPE x_open gauge\nx_open 3\n"
        );
    }
}
