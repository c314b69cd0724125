//! The spans a subscriber sees, recorded by a layer of the test's own: names, parents,
//! attributes and events, for requests whose answers the test knows.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use edgelimit::MemoryStore;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::{TraceIdentifiers, DECIDE_ATTRIBUTES};
use crate::identify::OwnedRequest;
use crate::pipeline::Edge;
use crate::Config;

/// One closed span as the layer saw it.
#[derive(Debug, Clone, Default)]
struct Closed {
    name: &'static str,
    parent: Option<&'static str>,
    declared: Vec<&'static str>,
    fields: BTreeMap<String, String>,
    events: Vec<BTreeMap<String, String>>,
}

impl Closed {
    fn get(&self, field: &str) -> Option<&str> {
        self.fields.get(field).map(String::as_str)
    }
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

/// Keeps every span that closes.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Closed>>>);

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a new span");
        let mut closed = Closed {
            name: attrs.metadata().name(),
            parent: span.parent().map(|p| p.name()),
            declared: attrs.metadata().fields().iter().map(|f| f.name()).collect(),
            ..Closed::default()
        };
        attrs.record(&mut Fields(&mut closed.fields));
        span.extensions_mut().insert(closed);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let span = ctx.span(id).expect("a recorded span");
        let mut extensions = span.extensions_mut();
        if let Some(closed) = extensions.get_mut::<Closed>() {
            values.record(&mut Fields(&mut closed.fields));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.event_span(event) else {
            return;
        };
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let mut extensions = span.extensions_mut();
        if let Some(closed) = extensions.get_mut::<Closed>() {
            closed.events.push(fields);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let span = ctx.span(&id).expect("a closing span");
        let closed = span.extensions_mut().remove::<Closed>();
        if let Some(closed) = closed {
            self.0.lock().unwrap().push(closed);
        }
    }
}

fn config() -> Config {
    Config::from_value(json!({
        "rules": [
            { "name": "api", "path_prefix": "/api/", "limits": [
                { "name": "per-ip", "policy": "fixed 2/1h", "identifier": "ip" },
                { "name": "per-key", "policy": "fixed 100/1h",
                  "identifier": "api-key:header:x-api-key", "missing": "deny" }
            ]},
            { "name": "watch", "shadow": true, "limits": [
                { "name": "shadow-ip", "policy": "fixed 1/1h", "identifier": "ip" }
            ]}
        ]
    }))
    .unwrap()
}

fn request(ip: &str) -> OwnedRequest {
    OwnedRequest::get("h", "/api/items")
        .with_header("cf-connecting-ip", ip)
        .with_header("x-api-key", "k-secret-1")
}

/// Polls a future that must be ready at once (the memory store never waits).
fn ready<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
    {
        std::task::Poll::Ready(out) => out,
        std::task::Poll::Pending => panic!("the memory store did not answer at once"),
    }
}

thread_local! {
    /// The recorder of the test running on this thread, and the most verbose level it takes.
    static CURRENT: std::cell::RefCell<Option<(Recorder, tracing::Level)>> =
        const { std::cell::RefCell::new(None) };
}

/// The process's one subscriber in this test binary: it hands what happens on a thread to that
/// thread's test's recorder, and takes nothing on a thread with none. One dispatcher for every
/// thread, rather than one per test (`with_default`): callsites' interest and the maximum level
/// are the process's, and a test's scoped dispatcher dropped while another test's thread
/// registers a callsite could leave that callsite off for the rest of the run.
struct ThisThread;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for ThisThread {
    fn register_callsite(
        &self,
        _: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        CURRENT.with(|current| {
            current
                .borrow()
                .as_ref()
                .is_some_and(|(_, level)| metadata.level() <= level)
        })
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(recorder) = this_thread() {
            recorder.on_new_span(attrs, id, ctx);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(recorder) = this_thread() {
            recorder.on_record(id, values, ctx);
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if let Some(recorder) = this_thread() {
            recorder.on_event(event, ctx);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(recorder) = this_thread() {
            recorder.on_close(id, ctx);
        }
    }
}

fn this_thread() -> Option<Recorder> {
    CURRENT.with(|current| {
        current
            .borrow()
            .as_ref()
            .map(|(recorder, _)| recorder.clone())
    })
}

/// The spans closed while `requests` went down `edge`'s path, with the statuses answered, at
/// `level` and above.
fn traced(
    edge: &Edge<MemoryStore>,
    requests: &[OwnedRequest],
    level: tracing::Level,
) -> (Vec<Closed>, Vec<u16>) {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        tracing::subscriber::set_global_default(tracing_subscriber::registry().with(ThisThread))
            .expect("no other subscriber in this test binary");
    });
    let recorder = Recorder::default();
    CURRENT.with(|current| *current.borrow_mut() = Some((recorder.clone(), level)));
    let statuses = requests
        .iter()
        .map(|r| ready(edge.handle(r, 0)).outcome().status)
        .collect();
    CURRENT.with(|current| *current.borrow_mut() = None);
    let closed = recorder.0.lock().unwrap().clone();
    (closed, statuses)
}

fn named<'a>(spans: &'a [Closed], name: &str) -> Vec<&'a Closed> {
    spans.iter().filter(|s| s.name == name).collect()
}

#[test]
fn a_denied_request_s_span_names_its_rule_limit_and_decision_and_hashes_who_asked() {
    let edge = Edge::new(config(), MemoryStore::new());
    let requests = [
        request("203.0.113.7"),
        request("203.0.113.7"),
        request("203.0.113.7"),
        request("198.51.100.1"),
    ];
    let (spans, statuses) = traced(&edge, &requests, tracing::Level::INFO);
    assert_eq!(statuses, [200, 200, 429, 200]);
    let decided = named(&spans, "edgelimit.decide");
    assert_eq!(decided.len(), 4, "one span per request: {spans:#?}");
    assert_eq!(decided[0].declared, DECIDE_ATTRIBUTES);

    let denied = decided[2];
    assert_eq!(denied.get("edgelimit.decision"), Some("denied"));
    assert_eq!(denied.get("edgelimit.status"), Some("429"));
    assert_eq!(denied.get("edgelimit.rules"), Some("api,watch"));
    assert_eq!(
        denied.get("edgelimit.limits"),
        Some("per-ip,per-key,shadow-ip")
    );
    assert_eq!(denied.get("edgelimit.limit"), Some("per-ip"));
    assert_eq!(denied.get("edgelimit.reason"), Some("over_limit"));
    assert_eq!(denied.get("edgelimit.remaining"), Some("0"));
    assert!(denied.get("edgelimit.store_ms").is_some(), "{denied:?}");
    // The shadow limit (1 an hour) denied from the second request on.
    assert_eq!(decided[1].get("edgelimit.decision"), Some("shadow_denied"));
    assert_eq!(decided[1].get("edgelimit.shadow_denied"), Some("shadow-ip"));
    assert_eq!(decided[0].get("edgelimit.decision"), Some("allowed"));

    // The client is a hash, the same for one address and another for another; neither the
    // address nor the key appears anywhere in a span.
    let hashes: Vec<&str> = decided
        .iter()
        .map(|s| s.get("edgelimit.identifier").expect("an identifier"))
        .collect();
    assert!(
        hashes
            .iter()
            .all(|h| h.starts_with("hash:") && h.len() == 21),
        "{hashes:?}"
    );
    assert_eq!(hashes[0], hashes[2]);
    assert_ne!(hashes[0], hashes[3]);
    let everything = format!("{spans:?}");
    assert!(!everything.contains("203.0.113.7") && !everything.contains("k-secret-1"));

    // Each request's own id: distinct, of this path.
    let ids: std::collections::BTreeSet<&str> = decided
        .iter()
        .map(|s| s.get("edgelimit.request_id").expect("a request id"))
        .collect();
    assert_eq!(ids.len(), 4, "{ids:?}");

    // The store's call is a child of each request's span; the limits' events are debug, off.
    let stores = named(&spans, "edgelimit.store");
    assert_eq!(stores.len(), 4);
    assert!(stores
        .iter()
        .all(|s| s.parent == Some("edgelimit.decide") && s.get("edgelimit.checks") == Some("2")));
    assert!(decided.iter().all(|s| s.events.is_empty()));
}

#[test]
fn at_debug_each_decided_limit_is_an_event_of_its_request_s_span() {
    let edge = Edge::new(config(), MemoryStore::new());
    let (spans, _) = traced(&edge, &[request("203.0.113.7")], tracing::Level::DEBUG);
    let decided = named(&spans, "edgelimit.decide");
    let events = &decided[0].events;
    let limits: Vec<(&str, &str, &str)> = events
        .iter()
        .map(|e| {
            (
                e["edgelimit.limit"].as_str(),
                e["edgelimit.reason"].as_str(),
                e["edgelimit.shadow"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        limits,
        [
            ("per-ip", "admitted", "false"),
            ("per-key", "admitted", "false"),
            ("shadow-ip", "admitted", "true"),
        ]
    );
    assert!(events
        .iter()
        .all(|e| e["edgelimit.identifier"].starts_with("hash:")));
}

#[test]
fn identifiers_are_written_in_clear_or_not_at_all_only_when_asked() {
    let clear =
        Edge::new(config(), MemoryStore::new()).with_trace_identifiers(TraceIdentifiers::Clear);
    let (spans, _) = traced(&clear, &[request("203.0.113.7")], tracing::Level::INFO);
    assert_eq!(
        named(&spans, "edgelimit.decide")[0].get("edgelimit.identifier"),
        Some("203.0.113.7")
    );
    let omitted =
        Edge::new(config(), MemoryStore::new()).with_trace_identifiers(TraceIdentifiers::Omitted);
    let (spans, _) = traced(&omitted, &[request("203.0.113.7")], tracing::Level::INFO);
    assert_eq!(
        named(&spans, "edgelimit.decide")[0].get("edgelimit.identifier"),
        None
    );
}

#[test]
fn a_refused_request_has_no_store_span_and_names_the_missing_limit() {
    let edge = Edge::new(config(), MemoryStore::new());
    let no_key = OwnedRequest::get("h", "/api/items").with_header("cf-connecting-ip", "192.0.2.1");
    let (spans, statuses) = traced(&edge, &[no_key], tracing::Level::INFO);
    assert_eq!(statuses, [400]);
    let decided = named(&spans, "edgelimit.decide");
    assert_eq!(decided[0].get("edgelimit.decision"), Some("refused"));
    assert_eq!(decided[0].get("edgelimit.limit"), Some("per-key"));
    assert_eq!(decided[0].get("edgelimit.store_ms"), None);
    assert!(named(&spans, "edgelimit.store").is_empty(), "{spans:#?}");
}
