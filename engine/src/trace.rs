//! The request path's spans (feature `tracing`; docs/observability.md, "Spans"): one
//! `edgelimit.decide` span per request [`crate::Edge::handle`] takes, with a child
//! `edgelimit.store` span for the limiter's call (denial cache, the store's round trip, fail
//! modes), and one `debug` event per decided limit. Their target is `edgelimit`, their level
//! `info` (the events `debug`). They are made only for a subscriber that takes them, and never
//! entered (each lasts from its making to its end), so an untraced request pays a level check
//! and its future is not wrapped (docs/performance.md, "Spans"). Without the feature every
//! function here is empty and inlined away: the Worker's wasm build, whose CPU per request is
//! billed, carries none of it.
//!
//! A span says who asked only through the request's own id ([`crate::own_id`]), which no client
//! chooses. The deciding limit's identifier is written as a keyed hash unless the host asks
//! otherwise ([`TraceIdentifiers`]): stable within the process, so one client's requests can be
//! found together, and useless for finding out who the client is (an IPv4 address hashed without
//! a key is found again by hashing all four billion).

/// Every attribute of the `edgelimit.decide` span, in the order docs/observability.md lists
/// them. An attribute not recorded for a request (no binding limit, no store call) is absent.
pub const DECIDE_ATTRIBUTES: [&str; 14] = [
    "edgelimit.request_id",
    "edgelimit.rules",
    "edgelimit.limits",
    "edgelimit.decision",
    "edgelimit.status",
    "edgelimit.limit",
    "edgelimit.reason",
    "edgelimit.remaining",
    "edgelimit.identifier",
    "edgelimit.list",
    "edgelimit.shadow_denied",
    "edgelimit.soft_exceeded",
    "edgelimit.delay_ms",
    "edgelimit.store_ms",
];

/// How a span writes the identifier of the limit an answer is about (`edgelimit.identifier`,
/// and each limit's `debug` event).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TraceIdentifiers {
    /// `hash:` and 16 hex digits of a keyed hash (SipHash, a random 128-bit key of this
    /// path's; the default): equal for one identifier within the process, unrelated across
    /// processes.
    #[default]
    Hashed,
    /// As the store keys it (escaped; a long one as `#` and its SHA-256, as API keys are):
    /// only where traces are kept as privately as the store's keys.
    Clear,
    /// Not written.
    Omitted,
}

#[cfg(feature = "tracing")]
pub(crate) use on::*;

#[cfg(not(feature = "tracing"))]
pub(crate) use off::*;

#[cfg(feature = "tracing")]
mod on {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};

    use edgelimit::store::key::encode_identifier;
    use edgelimit::{Identifier, Reason};
    use tracing::field::Empty;
    use tracing::Span;

    use super::TraceIdentifiers;
    use crate::pipeline::Handled;
    use crate::plan::Refusal;
    use crate::request_decision::RequestDecision;

    /// How one path writes its spans: the identifiers' form, and the key of their hash.
    #[derive(Debug)]
    pub(crate) struct Tracing {
        identifiers: TraceIdentifiers,
        key: RandomState,
    }

    impl Tracing {
        /// Identifiers hashed with SipHash under a 128-bit key drawn from the operating
        /// system's randomness (the standard library's keyed hash, as its hash maps use it
        /// against chosen keys): a pseudonym no one without the key can compute, at ≈100
        /// instructions rather than a SHA-256's thousands.
        pub(crate) fn new() -> Tracing {
            Tracing {
                identifiers: TraceIdentifiers::default(),
                key: RandomState::new(),
            }
        }

        /// The same, writing identifiers as `identifiers` says.
        pub(crate) fn with_identifiers(self, identifiers: TraceIdentifiers) -> Tracing {
            Tracing {
                identifiers,
                ..self
            }
        }

        /// `identifier` as the spans write it; `None` when they write none.
        fn identifier(&self, identifier: &Identifier) -> Option<String> {
            match self.identifiers {
                TraceIdentifiers::Omitted => None,
                TraceIdentifiers::Clear => Some(encode_identifier(identifier)),
                TraceIdentifiers::Hashed => {
                    let mut hasher = self.key.build_hasher();
                    hasher.write(identifier.as_bytes());
                    Some(format!("hash:{:016x}", hasher.finish()))
                }
            }
        }

        /// Writes what the path decided for `handled` into its `span`; nothing when no
        /// subscriber listens (no span), so an untraced request pays one branch.
        #[inline]
        pub(crate) fn record(&self, span: &RequestSpan, handled: &Handled<'_>) {
            if let Some(spans) = span.as_deref() {
                self.record_into(&spans.decide, handled);
            }
        }

        /// [`Tracing::record`] of a request some subscriber traces.
        #[cold]
        #[inline(never)]
        fn record_into(&self, span: &Span, handled: &Handled<'_>) {
            let plan = handled.plan();
            let outcome = handled.outcome();
            let checked = handled.checked();
            if let Some(id) = plan.own_id {
                span.record(
                    "edgelimit.request_id",
                    String::from_utf8_lossy(id.identifier().as_bytes()).as_ref(),
                );
            }
            span.record(
                "edgelimit.rules",
                joined(plan.rules.iter().map(|r| r.name.as_str())).as_str(),
            );
            let decided = || {
                handled.decided().flat_map(|decided| {
                    decided
                        .check
                        .items()
                        .iter()
                        .zip(&decided.verdict.decisions)
                        .filter(|(_, d)| d.reason != Reason::Skipped)
                        .map(move |(item, d)| (item, d, decided.shadow))
                })
            };
            span.record(
                "edgelimit.limits",
                joined(decided().map(|(item, _, _)| &*item.limit.name)).as_str(),
            );
            span.record("edgelimit.decision", RequestDecision::of(outcome).as_str());
            span.record("edgelimit.status", i64::from(outcome.status));
            if let Some(binding) = &outcome.binding {
                span.record("edgelimit.limit", &*binding.name);
                span.record("edgelimit.reason", binding.reason.as_str());
                span.record("edgelimit.remaining", signed(binding.remaining));
                let identifier = plan.enforced().and_then(|check| {
                    check
                        .items()
                        .iter()
                        .find(|item| item.limit.name == binding.name)
                        .and_then(|item| self.identifier(&item.identifier))
                });
                if let Some(identifier) = identifier {
                    span.record("edgelimit.identifier", identifier.as_str());
                }
            } else if let Some(Refusal::Missing(absent)) = plan.refusal() {
                span.record("edgelimit.limit", &*absent.limit.limit.name);
            }
            if let Some(denial) = &outcome.denied {
                span.record("edgelimit.list", denial.list.as_str());
            }
            if !outcome.shadow_denied.is_empty() {
                span.record(
                    "edgelimit.shadow_denied",
                    joined(outcome.shadow_denied.iter().map(|n| &**n)).as_str(),
                );
            }
            if !outcome.soft_exceeded.is_empty() {
                span.record(
                    "edgelimit.soft_exceeded",
                    joined(outcome.soft_exceeded.iter().map(|n| &**n)).as_str(),
                );
            }
            if outcome.delay_ms > 0 {
                span.record("edgelimit.delay_ms", signed(outcome.delay_ms));
            }
            if let Some(ms) = checked.store_ms {
                span.record("edgelimit.store_ms", ms);
            }
            if tracing::enabled!(target: "edgelimit", tracing::Level::DEBUG) {
                for (item, decision, shadow) in decided() {
                    let identifier = self.identifier(&item.identifier);
                    tracing::event!(
                        target: "edgelimit",
                        parent: span,
                        tracing::Level::DEBUG,
                        { edgelimit.limit = &*item.limit.name,
                          edgelimit.identifier = identifier.as_deref(),
                          edgelimit.cost = item.cost,
                          edgelimit.allowed = decision.allowed,
                          edgelimit.remaining = signed(decision.remaining),
                          edgelimit.reason = decision.reason.as_str(),
                          edgelimit.shadow = shadow },
                        "limit decided"
                    );
                }
            }
        }
    }

    /// An integer attribute as `i64`: what OpenTelemetry's integers are, and what
    /// `tracing-opentelemetry` exports as an integer (an unsigned one it writes as text).
    fn signed(n: u64) -> i64 {
        i64::try_from(n).unwrap_or(i64::MAX)
    }

    /// `names` separated by commas (OpenTelemetry's arrays have no `tracing` field type).
    fn joined<'a>(names: impl Iterator<Item = &'a str>) -> String {
        let mut out = String::new();
        for (i, name) in names.enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(name);
        }
        out
    }

    /// A request's spans: its `edgelimit.decide` span, and its `edgelimit.store` span while
    /// the store call runs.
    #[derive(Debug)]
    pub(crate) struct Spans {
        decide: Span,
        store: Option<Span>,
    }

    /// A request's spans, boxed so that the request's future grows by a pointer only; `None`
    /// when no subscriber takes them.
    pub(crate) type RequestSpan = Option<Box<Spans>>;

    /// Whether a subscriber may take `info` spans at all: one atomic load, before any span's
    /// fields are built (`tracing`'s own first check, as its macros make it).
    #[inline]
    fn info_wanted() -> bool {
        tracing::level_filters::STATIC_MAX_LEVEL >= tracing::Level::INFO
            && tracing::level_filters::LevelFilter::current() >= tracing::Level::INFO
    }

    /// A new `edgelimit.decide` span, every attribute still to record; `None`, its fields
    /// never built, when no subscriber takes it.
    #[inline]
    pub(crate) fn decide_span() -> RequestSpan {
        if !info_wanted() {
            return None;
        }
        new_decide_span()
    }

    #[cold]
    #[inline(never)]
    fn new_decide_span() -> RequestSpan {
        let span = tracing::info_span!(
            target: "edgelimit",
            "edgelimit.decide",
            edgelimit.request_id = Empty,
            edgelimit.rules = Empty,
            edgelimit.limits = Empty,
            edgelimit.decision = Empty,
            edgelimit.status = Empty,
            edgelimit.limit = Empty,
            edgelimit.reason = Empty,
            edgelimit.remaining = Empty,
            edgelimit.identifier = Empty,
            edgelimit.list = Empty,
            edgelimit.shadow_denied = Empty,
            edgelimit.soft_exceeded = Empty,
            edgelimit.delay_ms = Empty,
            edgelimit.store_ms = Empty,
        );
        (!span.is_disabled()).then(|| {
            Box::new(Spans {
                decide: span,
                store: None,
            })
        })
    }

    /// Opens the `edgelimit.store` span for the limiter's call of `checks` checks, child of
    /// the request's `decide` span, until [`close_store`]. None when no check is sent (a
    /// request refused before the store) or the request has no span.
    #[inline]
    pub(crate) fn open_store(spans: &mut RequestSpan, checks: usize) {
        if let Some(spans) = spans.as_deref_mut() {
            if checks > 0 {
                spans.store = Some(tracing::info_span!(
                    target: "edgelimit",
                    parent: &spans.decide,
                    "edgelimit.store",
                    edgelimit.checks = signed(checks as u64)
                ));
            }
        }
    }

    /// Ends the `edgelimit.store` span now (its duration is the time it was open).
    #[inline]
    pub(crate) fn close_store(spans: &mut RequestSpan) {
        if let Some(spans) = spans.as_deref_mut() {
            spans.store = None;
        }
    }
}

#[cfg(not(feature = "tracing"))]
mod off {
    use super::TraceIdentifiers;
    use crate::pipeline::Handled;

    /// No spans: nothing to remember.
    #[derive(Debug)]
    pub(crate) struct Tracing;

    /// No span.
    #[derive(Debug)]
    pub(crate) struct RequestSpan;

    impl Tracing {
        #[inline(always)]
        pub(crate) fn new() -> Tracing {
            Tracing
        }

        #[inline(always)]
        pub(crate) fn with_identifiers(self, _: TraceIdentifiers) -> Tracing {
            self
        }

        #[inline(always)]
        pub(crate) fn record(&self, _: &RequestSpan, _: &Handled<'_>) {}
    }

    #[inline(always)]
    pub(crate) fn decide_span() -> RequestSpan {
        RequestSpan
    }

    #[inline(always)]
    pub(crate) fn open_store(_: &mut RequestSpan, _: usize) {}

    #[inline(always)]
    pub(crate) fn close_store(_: &mut RequestSpan) {}
}

#[cfg(all(test, feature = "tracing"))]
mod tests;
