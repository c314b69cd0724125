//! Decisions → HTTP: the `RateLimit-Policy` and `RateLimit` fields of
//! draft-ietf-httpapi-ratelimit-headers (structured-field lists of named policies), the
//! `X-RateLimit-*` trio most clients still read, `Retry-After`, and an RFC 9457
//! `application/problem+json` body for denials. Pure: the caller passes "now".
//!
//! How each policy is described (the draft has no burst parameter, so a bucket is reported as
//! the quota it really grants):
//!
//! | policy | `q` | `w` (seconds, rounded up, ≥ 1) |
//! |---|---|---|
//! | fixed / sliding-log / sliding-counter `L/W` | `L` | `W` |
//! | token-bucket / gcra `L/W burst B` | `B` | `B·W/L`, the time to refill `B` |
//! | concurrency `N timeout D` | `N`, with `qu="concurrent-requests"` | none (not a window) |
//!
//! A limit counting another unit than requests (LLM tokens, bytes) says so with the draft's `qu`
//! parameter (`qu="content-bytes"`, `qu="tokens"`), from [`LimitReport::unit`].
//!
//! `r` is the decision's remaining quota. `t` is, for an admitted request, the seconds until the
//! quota is whole again; for a denied one, the seconds until this request would be admitted — so
//! `Retry-After` (the longest such wait among the denials) is never earlier than any `t`.

use std::fmt;

use serde::Serialize;

use crate::decision::{Decision, RETRY_NEVER};
use crate::policy::{Algorithm, Policy};

/// Whether `name` is a valid header field name: a non-empty RFC 9110 `token`.
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// The media type of [`Problem`] bodies.
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// One limit's outcome, as the HTTP layer reports it.
#[derive(Debug, Clone, Copy)]
pub struct LimitReport<'a> {
    /// The limit's name: the policy name in the `RateLimit` fields.
    pub name: &'a str,
    /// Its policy.
    pub policy: &'a Policy,
    /// Its decision for this request.
    pub decision: &'a Decision,
    /// The unit its quota counts when not requests (`tokens`, `content-bytes`), reported as
    /// `qu`; `None` (or `requests`) for requests. A concurrency limit is always
    /// `concurrent-requests`.
    pub unit: Option<&'a str>,
}

impl LimitReport<'_> {
    /// The quota unit `qu`, when not the draft's default (`requests`, which goes unsaid).
    pub fn quota_unit(&self) -> Option<&str> {
        if self.policy.algorithm() == Algorithm::Concurrency {
            Some("concurrent-requests")
        } else {
            self.unit.filter(|unit| *unit != "requests")
        }
    }

    /// The quota `q` the policy grants per [`LimitReport::window_seconds`].
    pub fn quota(&self) -> u64 {
        self.policy.capacity()
    }

    /// The window `w` in whole seconds (rounded up, at least 1).
    pub fn window_seconds(&self) -> u64 {
        let p = self.policy;
        // capacity·W/L ≤ 2^50·(366 days) / 1 fits u128 easily; the policy bounds keep it sane.
        // Most products fit u64, whose division is a few instructions rather than a call.
        let ms = match p.capacity().checked_mul(p.window_ms()) {
            Some(product) => u128::from(product.div_ceil(p.limit())),
            None => (u128::from(p.capacity()) * u128::from(p.window_ms()))
                .div_ceil(u128::from(p.limit())),
        };
        u64::try_from(ms.div_ceil(1000)).unwrap_or(u64::MAX).max(1)
    }

    /// `t`: seconds until the quota is whole again (admitted), or until this request would be
    /// admitted (denied). `None` for a denial no wait can lift.
    pub fn reset_seconds(&self, now_ms: u64) -> Option<u64> {
        let d = self.decision;
        if d.allowed {
            Some(seconds_ceil(d.reset_at_ms.saturating_sub(now_ms)))
        } else if d.retry_after_ms == RETRY_NEVER {
            None
        } else {
            Some(seconds_ceil(d.retry_after_ms).max(1))
        }
    }
}

fn status_phrase(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        403 => "Forbidden",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    }
}

fn seconds_ceil(ms: u64) -> u64 {
    ms.div_ceil(1000)
}

/// A structured-field string: `"` and `\\` escaped; other characters outside printable ASCII are
/// replaced, since sf-strings cannot carry them (limit names are validated to avoid this).
#[cfg(test)]
fn sf_string(text: &str) -> String {
    let mut out = String::new();
    FieldText::new(&mut out).sf_string(text);
    out
}

/// Response header fields written into one buffer: every value one after another in a single
/// string, each field its name and where its value ends. Every response through a layer
/// carries these fields, so their cost is per request: one buffer is one allocation, and a host
/// can turn it into header values that share it (`bytes::Bytes::slice`) rather than copying
/// each one.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HeaderFields {
    text: String,
    /// Each field's name and the end of its value in `text` (it starts where the last ended).
    /// On the heap, not inline: a response is moved several times on its way out, and a small
    /// one is moved in registers.
    fields: Vec<(&'static str, usize)>,
}

impl HeaderFields {
    /// No field.
    pub fn new() -> HeaderFields {
        HeaderFields::default()
    }

    /// Adds field `name` with `value` (names are the caller's own, valid; values are text a
    /// header can carry).
    pub fn push(&mut self, name: &'static str, value: &str) {
        self.text.push_str(value);
        self.end(name);
    }

    /// Ends field `name` with what was written into the buffer since the last field.
    fn end(&mut self, name: &'static str) {
        self.fields.push((name, self.text.len()));
    }

    /// How many fields there are.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// A field's value, by case-insensitive name (the first, if several have it).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Each field's name and value, in order.
    pub fn iter(&self) -> HeaderFieldsIter<'_> {
        HeaderFieldsIter {
            text: &self.text,
            fields: self.fields.iter(),
            start: 0,
        }
    }

    /// Each field's name and where its value lies in [`HeaderFields::text`], in order.
    pub fn spans(&self) -> impl Iterator<Item = (&'static str, std::ops::Range<usize>)> + '_ {
        let mut start = 0;
        self.fields.iter().map(move |&(name, end)| {
            let span = start..end;
            start = end;
            (name, span)
        })
    }

    /// Every value, one after another: what [`HeaderFields::spans`] index.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The buffer itself (see [`HeaderFields::text`]).
    pub fn into_text(self) -> String {
        self.text
    }
}

impl fmt::Debug for HeaderFields {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'h> IntoIterator for &'h HeaderFields {
    type Item = (&'static str, &'h str);
    type IntoIter = HeaderFieldsIter<'h>;

    fn into_iter(self) -> HeaderFieldsIter<'h> {
        self.iter()
    }
}

/// The fields of a [`HeaderFields`], name and value, in order.
#[derive(Debug, Clone)]
pub struct HeaderFieldsIter<'h> {
    text: &'h str,
    fields: std::slice::Iter<'h, (&'static str, usize)>,
    start: usize,
}

impl<'h> Iterator for HeaderFieldsIter<'h> {
    type Item = (&'static str, &'h str);

    fn next(&mut self) -> Option<(&'static str, &'h str)> {
        let &(name, end) = self.fields.next()?;
        let value = &self.text[self.start..end];
        self.start = end;
        Some((name, value))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.fields.size_hint()
    }
}

impl ExactSizeIterator for HeaderFieldsIter<'_> {}

/// Writes a header field's value into the one buffer of [`HeaderFields`], without `core::fmt`
/// (which costs several times the writing itself).
struct FieldText<'a> {
    out: &'a mut String,
}

impl<'a> FieldText<'a> {
    /// The room reserved for each of the list fields (`RateLimit-Policy`, `RateLimit`) up
    /// front: a few limits' fields fit, more grow the buffer.
    const SHORT: usize = 128;

    fn new(out: &'a mut String) -> FieldText<'a> {
        FieldText { out }
    }

    fn str(&mut self, text: &str) {
        self.out.push_str(text);
    }

    fn number(&mut self, n: u64) {
        self.str(itoa::Buffer::new().format(n));
    }

    /// `text` as a structured-field string: `"` and `\\` escaped; other characters outside
    /// printable ASCII are replaced, since sf-strings cannot carry them (limit names are
    /// validated to avoid this, so the whole name is usually copied as it is).
    fn sf_string(&mut self, text: &str) {
        self.out.push('"');
        if text
            .bytes()
            .all(|b| matches!(b, b' '..=b'~') && b != b'"' && b != b'\\')
        {
            self.str(text);
        } else {
            for c in text.chars() {
                match c {
                    '"' | '\\' => {
                        self.out.push('\\');
                        self.out.push(c);
                    }
                    ' '..='~' => self.out.push(c),
                    _ => self.out.push('?'),
                }
            }
        }
        self.out.push('"');
    }
}

/// Which sets of rate-limit header fields an answer carries. `Retry-After` goes with every
/// denial that a wait lifts, whatever the sets: RFC 9110 gives it that meaning on a 429 or 503.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldSets {
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers).
    pub ratelimit: bool,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining` and `X-RateLimit-Reset`, the fields most
    /// clients written before the draft read.
    pub x_ratelimit: bool,
}

impl FieldSets {
    /// Both sets: what an answer carries unless configured otherwise.
    pub const ALL: FieldSets = FieldSets {
        ratelimit: true,
        x_ratelimit: true,
    };
    /// Neither set (`Retry-After` alone, on denials).
    pub const NONE: FieldSets = FieldSets {
        ratelimit: false,
        x_ratelimit: false,
    };

    /// `self` with the set named `name` (`ratelimit` or `x-ratelimit`, any case); an error
    /// naming the sets there are when `name` is none of them.
    pub fn with_set(self, name: &str) -> Result<FieldSets, String> {
        let mut sets = self;
        if name.eq_ignore_ascii_case("ratelimit") {
            sets.ratelimit = true;
        } else if name.eq_ignore_ascii_case("x-ratelimit") {
            sets.x_ratelimit = true;
        } else {
            return Err(format!(
                "`{name}` is not a set of header fields: `ratelimit` (RateLimit-Policy and \
                 RateLimit) or `x-ratelimit` (X-RateLimit-Limit, -Remaining and -Reset)"
            ));
        }
        Ok(sets)
    }

    /// The sets `names` name (each as [`FieldSets::with_set`] reads it); else where the first
    /// name that is none is (its index) and why.
    pub fn named<S: AsRef<str>>(names: &[S]) -> Result<FieldSets, (usize, String)> {
        names
            .iter()
            .enumerate()
            .try_fold(FieldSets::NONE, |sets, (i, name)| {
                sets.with_set(name.as_ref()).map_err(|why| (i, why))
            })
    }
}

impl Default for FieldSets {
    fn default() -> FieldSets {
        FieldSets::ALL
    }
}

/// One request's decided limits as the HTTP layer answers them. The binding limit — the one the
/// `X-RateLimit-*` trio and the problem body describe — and `Retry-After` are found once, here.
#[derive(Debug, Clone, Copy)]
pub struct Answer<'r, 'a> {
    reports: &'r [LimitReport<'a>],
    binding: Option<&'r LimitReport<'a>>,
    retry_after: Option<u64>,
    sets: FieldSets,
}

impl<'r, 'a> Answer<'r, 'a> {
    /// The answer for `reports` (the limits decided for one request, in order).
    pub fn new(reports: &'r [LimitReport<'a>]) -> Answer<'r, 'a> {
        let mut longest_denial: Option<&'r LimitReport<'a>> = None;
        let mut tightest: Option<&'r LimitReport<'a>> = None;
        for r in reports {
            let d = r.decision;
            if !d.allowed {
                // Ties go to the later limit, the earlier one to the tightest quota.
                if longest_denial.is_none_or(|l| d.retry_after_ms >= l.decision.retry_after_ms) {
                    longest_denial = Some(r);
                }
            } else if tightest.is_none_or(|t| {
                (d.remaining, std::cmp::Reverse(d.reset_at_ms))
                    < (
                        t.decision.remaining,
                        std::cmp::Reverse(t.decision.reset_at_ms),
                    )
            }) {
                tightest = Some(r);
            }
        }
        let retry_after = longest_denial
            .map(|r| r.decision.retry_after_ms)
            .filter(|&ms| ms != RETRY_NEVER)
            .map(|ms| seconds_ceil(ms).max(1));
        Answer {
            reports,
            binding: longest_denial.or(tightest),
            retry_after,
            sets: FieldSets::ALL,
        }
    }

    /// This answer carrying only the header fields of `sets` ([`FieldSets::ALL`] unless set).
    pub fn with_fields(self, sets: FieldSets) -> Answer<'r, 'a> {
        Answer { sets, ..self }
    }

    /// The limit the answer is about: the denial with the longest wait, else the limit with the
    /// least remaining quota (the soonest reset breaking ties).
    pub fn binding(&self) -> Option<&'r LimitReport<'a>> {
        self.binding
    }

    /// Whether every limit admitted.
    pub fn allowed(&self) -> bool {
        self.binding.is_none_or(|b| b.decision.allowed)
    }

    /// `Retry-After` in whole seconds: the longest wait among the denials, rounded up. `None`
    /// when nothing is denied or a denial can never be lifted.
    pub fn retry_after_seconds(&self) -> Option<u64> {
        self.retry_after
    }

    /// The response header fields at `now_ms` (the time the decisions were made), in a stable
    /// order: `RateLimit-Policy`, `RateLimit`, `X-RateLimit-Limit`, `X-RateLimit-Remaining`,
    /// `X-RateLimit-Reset` (seconds, like `t`) — of those, the sets the answer carries
    /// ([`Answer::with_fields`]) — and `Retry-After` when denied. Empty when there is nothing to
    /// report.
    pub fn headers(&self, now_ms: u64) -> Vec<(&'static str, String)> {
        self.header_fields(now_ms)
            .iter()
            .map(|(name, value)| (name, value.to_string()))
            .collect()
    }

    /// [`Answer::headers`], written into one buffer.
    pub fn header_fields(&self, now_ms: u64) -> HeaderFields {
        let Some(binding) = self.binding else {
            return HeaderFields::new();
        };
        if !self.sets.ratelimit && !self.sets.x_ratelimit && self.retry_after.is_none() {
            // Nothing to write: no buffer to allocate.
            return HeaderFields::new();
        }
        // Both lists, the three numbers and `Retry-After`: one allocation for a few limits (and
        // room for the fields a host adds, `Cache-Control` and the shadow header). Allocated as
        // made, rather than reserved in empty buffers, which takes the growing path.
        let mut fields = HeaderFields {
            text: String::with_capacity(2 * FieldText::SHORT + 64),
            fields: Vec::with_capacity(8),
        };
        fn number(fields: &mut HeaderFields, name: &'static str, n: u64) {
            FieldText::new(&mut fields.text).number(n);
            fields.end(name);
        }
        if self.sets.ratelimit {
            let mut policies = FieldText::new(&mut fields.text);
            for (i, r) in self.reports.iter().enumerate() {
                if i > 0 {
                    policies.str(", ");
                }
                policies.sf_string(r.name);
                policies.str(";q=");
                policies.number(r.quota());
                if r.policy.algorithm() != Algorithm::Concurrency {
                    policies.str(";w=");
                    policies.number(r.window_seconds());
                }
                if let Some(unit) = r.quota_unit() {
                    policies.str(";qu=");
                    policies.sf_string(unit);
                }
            }
            fields.end("RateLimit-Policy");
            let mut states = FieldText::new(&mut fields.text);
            for (i, r) in self.reports.iter().enumerate() {
                if i > 0 {
                    states.str(", ");
                }
                states.sf_string(r.name);
                states.str(";r=");
                states.number(r.decision.remaining);
                if let Some(t) = r.reset_seconds(now_ms) {
                    states.str(";t=");
                    states.number(t);
                }
            }
            fields.end("RateLimit");
        }
        if self.sets.x_ratelimit {
            number(&mut fields, "X-RateLimit-Limit", binding.quota());
            number(
                &mut fields,
                "X-RateLimit-Remaining",
                binding.decision.remaining,
            );
            if let Some(t) = binding.reset_seconds(now_ms) {
                number(&mut fields, "X-RateLimit-Reset", t);
            }
        }
        if let Some(seconds) = self.retry_after {
            number(&mut fields, "Retry-After", seconds);
        }
        fields
    }

    /// The status when the request is denied: 429, or 503 when every denial is a limit failing
    /// closed (the client did nothing wrong). `None` when everything admitted. The status of
    /// [`Answer::problem`], without writing the body.
    pub fn status(&self) -> Option<u16> {
        self.binding.filter(|b| !b.decision.allowed)?;
        let failed_closed = self
            .reports
            .iter()
            .filter(|r| !r.decision.allowed)
            .all(|r| r.decision.reason.is_failed_closed());
        Some(if failed_closed { 503 } else { 429 })
    }

    /// The problem body when the request is denied, with [`Answer::status`]. `None` when
    /// everything admitted.
    pub fn problem(&self, instance: Option<&str>) -> Option<Problem> {
        let status = self.status()?;
        let binding = self.binding?;
        let denied = || self.reports.iter().filter(|r| !r.decision.allowed);
        let rate = binding.policy;
        let name = binding.name;
        let detail = match (status, self.retry_after) {
            (503, _) => format!(
                "The rate limiter's store cannot answer and policy \"{name}\" fails closed; retry later."
            ),
            (_, Some(s)) => format!("Rate limit \"{name}\" ({rate}) exceeded; retry in {s} s."),
            (_, None) => {
                format!("This request costs more than policy \"{name}\" ({rate}) can ever admit.")
            }
        };
        let mut problem = Problem::new(status, detail, instance);
        (problem.problem_type, problem.title) = if status == 503 {
            (
                TEMPORARY_REDUCED_CAPACITY,
                "Request cannot be satisfied due to temporary server capacity constraints",
            )
        } else {
            (
                QUOTA_EXCEEDED,
                "Request cannot be satisfied as assigned quota has been exceeded",
            )
        };
        problem.policy = Some(name.to_string());
        problem.violated_policies = denied().map(|r| r.name.to_string()).collect();
        problem.retry_after = self.retry_after;
        problem.reason = Some(binding.decision.reason.public_name());
        Some(problem)
    }
}

/// The problem type of a request denied by a limit: draft-ietf-httpapi-ratelimit-headers-11 §5.1,
/// registered in IANA's HTTP Problem Types.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// The problem type of a request denied because a limit's store is unreachable and the limit
/// fails closed: the draft's §5.2 — the client did nothing wrong, capacity is reduced for now.
pub const TEMPORARY_REDUCED_CAPACITY: &str =
    "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity";

/// An RFC 9457 `application/problem+json` body: every answer the limiter gives itself — a denial
/// ([`Answer::problem`]), a refusal by a deny list, a missing identifier, a misconfiguration, an
/// unreachable origin. A denial by a limit has the rate-limit draft's problem types
/// ([`QUOTA_EXCEEDED`], 429; [`TEMPORARY_REDUCED_CAPACITY`], 503 of a limit failing closed) with
/// their titles and their `violated-policies` member, so a client written to the draft reads it;
/// every other answer is `about:blank` (its `title` the status phrase). Our extension members say
/// which policy or list, and why — a client tells a deny list's 403 from any other 403 of the
/// origin by `reason: "denied"`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The problem type: [`QUOTA_EXCEEDED`], [`TEMPORARY_REDUCED_CAPACITY`] or `about:blank`.
    #[serde(rename = "type")]
    pub problem_type: &'static str,
    /// The problem type's title: the draft's for its types, else the HTTP status phrase.
    pub title: &'static str,
    /// The HTTP status code.
    pub status: u16,
    /// A sentence for humans naming the policy and the wait.
    pub detail: String,
    /// The request path, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// The policy the problem is about (for a denial, the one with the longest wait).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// Every policy that denied: the draft's `violated-policies` member.
    #[serde(rename = "violated-policies", skip_serializing_if = "Vec::is_empty")]
    pub violated_policies: Vec<String>,
    /// Seconds to wait, as in `Retry-After`; absent when no wait helps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
    /// Why, as a client is told it (`over_limit`, `cost_exceeds_capacity`, `failed_closed` — a
    /// [`Reason`](crate::Reason)'s [`Reason::public_name`](crate::Reason::public_name) — or `denied` for a deny list).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// The deny list that refused the request (`deny`, `deny:<rule>`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub list: Option<String>,
    /// The id under which the host logged what went wrong (an internal error's only detail).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_id: Option<String>,
}

impl Problem {
    fn new(status: u16, detail: String, instance: Option<&str>) -> Problem {
        Problem {
            problem_type: "about:blank",
            title: status_phrase(status),
            status,
            detail,
            instance: instance.map(str::to_string),
            policy: None,
            violated_policies: Vec::new(),
            retry_after: None,
            reason: None,
            list: None,
            error_id: None,
        }
    }

    /// 403: the request matched an entry of deny list `list`. No wait helps, so no
    /// `retry_after`; which entry matched is not said (it may be a secret, and it helps an
    /// attacker rotate).
    pub fn denied(list: &str, instance: &str) -> Problem {
        let mut problem = Problem::new(
            403,
            format!("This request is refused by deny list \"{list}\"."),
            Some(instance),
        );
        problem.reason = Some("denied");
        problem.list = Some(list.to_string());
        problem
    }

    /// 400: rule `rule` limits requests by `source` (described) with limit `limit`, and the
    /// request has none.
    pub fn missing_identifier(rule: &str, limit: &str, source: &str, instance: &str) -> Problem {
        let detail = format!(
            "Rule \"{rule}\" limits requests by {source} (limit \"{limit}\"), and this request has none."
        );
        let mut problem = Problem::new(400, detail, Some(instance));
        problem.policy = Some(limit.to_string());
        problem
    }

    /// 400: the request cannot be read unambiguously, the way its origin will read it (`why`
    /// completes "This request is refused: …"), so no limit could be applied to it with
    /// certainty.
    pub fn ambiguous(why: &str, instance: &str) -> Problem {
        let mut problem = Problem::new(
            400,
            format!("This request is refused: {why}."),
            Some(instance),
        );
        problem.reason = Some("ambiguous_request");
        problem
    }

    /// 500 or 503 (`status`): the limiter could not serve the request — a configuration it
    /// cannot run (it refuses rather than run unlimited), or an internal failure. The client is
    /// told nothing of why: the reason may hold a secret and no client can act on it. It gets
    /// `error_id`, under which the host logs the reason, for the operator to find.
    pub fn internal_error(status: u16, error_id: &str) -> Problem {
        let mut problem = Problem::new(
            status,
            format!(
                "The rate limiter in front of this service could not handle the request; its \
                 operator can look up error {error_id}."
            ),
            None,
        );
        problem.error_id = Some(error_id.to_string());
        problem
    }

    /// 502: the request was admitted but the origin could not be reached.
    pub fn origin_unreachable(instance: &str) -> Problem {
        Problem::new(
            502,
            "The origin could not be reached.".to_string(),
            Some(instance),
        )
    }

    /// The body as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::Reason;

    fn decision(allowed: bool, remaining: u64, reset_at_ms: u64, retry_after_ms: u64) -> Decision {
        Decision {
            allowed,
            limit: 0,
            remaining,
            reset_at_ms,
            retry_after_ms,
            reason: if allowed {
                Reason::Admitted
            } else {
                Reason::OverLimit
            },
        }
    }

    fn report<'a>(name: &'a str, policy: &'a Policy, decision: &'a Decision) -> LimitReport<'a> {
        LimitReport {
            name,
            policy,
            decision,
            unit: None,
        }
    }

    #[test]
    fn concurrency_and_token_quotas_say_their_unit() {
        let conc: Policy = "concurrency 2 timeout 30s".parse().unwrap();
        let tokens: Policy = "fixed 10000/1m".parse().unwrap();
        let d = decision(true, 1, 30_000, 0);
        let t = decision(true, 9_000, 60_000, 0);
        let reports = [
            report("inflight", &conc, &d),
            LimitReport {
                unit: Some("tokens"),
                ..report("llm", &tokens, &t)
            },
            // Requests are the draft's default unit: not said, however the unit came.
            LimitReport {
                unit: Some("requests"),
                ..report("logins", &tokens, &t)
            },
        ];
        let headers = Answer::new(&reports).headers(0);
        assert_eq!(
            headers[0],
            (
                "RateLimit-Policy",
                "\"inflight\";q=2;qu=\"concurrent-requests\", \"llm\";q=10000;w=60;qu=\"tokens\", \
                 \"logins\";q=10000;w=60"
                    .to_string()
            )
        );
        assert_eq!(
            headers[1],
            (
                "RateLimit",
                "\"inflight\";r=1;t=30, \"llm\";r=9000;t=60, \"logins\";r=9000;t=60".to_string()
            )
        );
    }

    #[test]
    fn buckets_report_the_quota_they_grant() {
        let gcra: Policy = "gcra 10/1s burst 25".parse().unwrap();
        let d = decision(true, 24, 2_600, 0);
        let r = report("api", &gcra, &d);
        assert_eq!((r.quota(), r.window_seconds()), (25, 3)); // 25 tokens refill in 2.5 s
        let fixed: Policy = "fixed 100/1m".parse().unwrap();
        let r = report("api", &fixed, &d);
        assert_eq!((r.quota(), r.window_seconds()), (100, 60));
        let short: Policy = "fixed 5/200ms".parse().unwrap();
        let r = report("api", &short, &d);
        assert_eq!(r.window_seconds(), 1);
    }

    #[test]
    fn an_answer_carries_the_field_sets_it_is_given_and_retry_after_always() {
        let p: Policy = "fixed 5/10s".parse().unwrap();
        let denied = decision(false, 0, 10_000, 4_000);
        let reports = [report("a", &p, &denied)];
        let names = |sets: FieldSets| -> Vec<&'static str> {
            let answer = Answer::new(&reports).with_fields(sets);
            answer
                .headers(0)
                .into_iter()
                .map(|(name, _)| name)
                .collect()
        };
        let everything = names(FieldSets::ALL);
        assert_eq!(
            everything,
            [
                "RateLimit-Policy",
                "RateLimit",
                "X-RateLimit-Limit",
                "X-RateLimit-Remaining",
                "X-RateLimit-Reset",
                "Retry-After"
            ]
        );
        assert_eq!(names(FieldSets::default()), everything);
        let draft = FieldSets::NONE.with_set("RateLimit").unwrap();
        assert_eq!(
            names(draft),
            ["RateLimit-Policy", "RateLimit", "Retry-After"]
        );
        let legacy = FieldSets::NONE.with_set("x-ratelimit").unwrap();
        assert_eq!(
            names(legacy),
            [
                "X-RateLimit-Limit",
                "X-RateLimit-Remaining",
                "X-RateLimit-Reset",
                "Retry-After"
            ]
        );
        assert_eq!(names(FieldSets::NONE), ["Retry-After"]);
        let e = FieldSets::NONE.with_set("ratelimit-headers").unwrap_err();
        assert!(e.contains("`ratelimit-headers`"), "{e}");
    }

    #[test]
    fn retry_after_is_never_earlier_than_any_t() {
        let p: Policy = "gcra 1/10s burst 3".parse().unwrap();
        let a = decision(false, 0, 30_000, 9_001);
        let b = decision(false, 0, 12_000, 2_000);
        let c = decision(true, 2, 4_500, 0);
        let reports = [
            report("a", &p, &a),
            report("b", &p, &b),
            report("c", &p, &c),
        ];
        let headers = Answer::new(&reports).headers(0);
        let get = |k: &str| {
            headers
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(get("Retry-After").as_deref(), Some("10"));
        assert_eq!(
            get("RateLimit").as_deref(),
            Some("\"a\";r=0;t=10, \"b\";r=0;t=2, \"c\";r=2;t=5")
        );
        assert_eq!(
            get("RateLimit-Policy").as_deref(),
            Some("\"a\";q=3;w=30, \"b\";q=3;w=30, \"c\";q=3;w=30")
        );
        assert_eq!(get("X-RateLimit-Remaining").as_deref(), Some("0"));
        assert_eq!(get("X-RateLimit-Reset").as_deref(), Some("10"));
    }

    #[test]
    fn admitted_requests_report_the_tightest_limit_and_no_retry_after() {
        let p: Policy = "fixed 10/1m".parse().unwrap();
        let loose = decision(true, 9, 60_000, 0);
        let tight = decision(true, 3, 60_000, 0);
        let reports = [report("loose", &p, &loose), report("tight", &p, &tight)];
        let headers = Answer::new(&reports).headers(1_500);
        assert!(headers.iter().all(|(n, _)| *n != "Retry-After"));
        assert!(headers.contains(&("X-RateLimit-Remaining", "3".to_string())));
        assert!(headers.contains(&("X-RateLimit-Reset", "59".to_string())));
        assert!(Answer::new(&reports).problem(None).is_none());
    }

    #[test]
    fn names_are_escaped_as_structured_field_strings() {
        assert_eq!(sf_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(sf_string("é"), "\"?\"");
    }

    #[test]
    fn fields_longer_than_the_stack_buffer_are_written_whole() {
        // Twelve limits: both lists outgrow the room `FieldText` reserves part-way.
        let p: Policy = "fixed 1000/1m".parse().unwrap();
        let d = decision(true, 999, 60_000, 0);
        let names: Vec<String> = (0..12).map(|i| format!("limit-{i}")).collect();
        let reports: Vec<_> = names.iter().map(|n| report(n, &p, &d)).collect();
        let headers = Answer::new(&reports).headers(0);
        let expected = |each: &str| -> String {
            let all: Vec<String> = names.iter().map(|n| format!("\"{n}\"{each}")).collect();
            all.join(", ")
        };
        assert!(headers[0].1.len() > FieldText::SHORT);
        assert_eq!(headers[0].1, expected(";q=1000;w=60"));
        assert_eq!(headers[1].1, expected(";r=999;t=60"));
        assert_eq!(headers[2].1, "1000");
    }

    #[test]
    fn problem_names_the_policy_and_is_503_when_failing_closed() {
        let p: Policy = "fixed 10/1m".parse().unwrap();
        let over = decision(false, 0, 60_000, 42_100);
        let reports = [report("per-ip", &p, &over)];
        let problem = Answer::new(&reports).problem(Some("/x")).unwrap();
        assert_eq!((problem.status, problem.retry_after), (429, Some(43)));
        assert!(problem.detail.contains("\"per-ip\""), "{}", problem.detail);
        let json: serde_json::Value = serde_json::from_str(&problem.to_json()).unwrap();
        assert_eq!(json["violated-policies"][0], "per-ip");
        assert_eq!(json["type"], QUOTA_EXCEEDED);
        assert_eq!(json["reason"], "over_limit");

        let mut closed = over;
        closed.reason = Reason::FailedClosed;
        let reports = [report("per-ip", &p, &closed)];
        let closed = Answer::new(&reports).problem(None).unwrap();
        assert_eq!(
            (closed.status, closed.problem_type),
            (503, TEMPORARY_REDUCED_CAPACITY)
        );
    }

    #[test]
    fn a_denial_no_wait_lifts_has_no_retry_after() {
        let p: Policy = "fixed 10/1m".parse().unwrap();
        let never = decision(false, 10, 0, RETRY_NEVER);
        let reports = [report("big", &p, &never)];
        let headers = Answer::new(&reports).headers(0);
        assert!(headers.iter().all(|(n, _)| *n != "Retry-After"));
        assert_eq!(
            Answer::new(&reports).problem(None).unwrap().retry_after,
            None
        );
    }

    #[test]
    fn every_answer_the_limiter_gives_itself_is_one_problem_shape() {
        let json =
            |p: Problem| -> serde_json::Value { serde_json::from_str(&p.to_json()).unwrap() };
        let missing = json(Problem::missing_identifier(
            "api",
            "per-key",
            "header `x-api-key`",
            "/v1/x",
        ));
        assert_eq!(missing["status"], 400);
        assert_eq!(missing["title"], "Bad Request");
        assert_eq!(missing["type"], "about:blank");
        assert_eq!(missing["policy"], "per-key");
        assert_eq!(missing["instance"], "/v1/x");
        assert!(missing["detail"].as_str().unwrap().contains("x-api-key"));
        assert!(missing.get("violated-policies").is_none());
        let broken = json(Problem::internal_error(500, "4f1c-77"));
        assert_eq!(
            (broken["status"].as_u64(), broken["title"].as_str()),
            (Some(500), Some("Internal Server Error"))
        );
        assert_eq!(broken["error_id"], "4f1c-77");
        assert!(broken["detail"].as_str().unwrap().contains("error 4f1c-77"));
        assert!(broken.get("instance").is_none());
        let unavailable = json(Problem::internal_error(503, "x"));
        assert_eq!(unavailable["title"], "Service Unavailable");
        let origin = json(Problem::origin_unreachable("/x"));
        assert_eq!(
            (origin["status"].as_u64(), origin["title"].as_str()),
            (Some(502), Some("Bad Gateway"))
        );
    }

    #[test]
    fn the_binding_limit_is_the_longest_denial_then_the_tightest_quota() {
        let p: Policy = "fixed 10/1m".parse().unwrap();
        let (a, b, c) = (
            decision(true, 2, 60_000, 0),
            decision(false, 0, 60_000, 5_000),
            decision(false, 0, 60_000, 5_000),
        );
        let reports = [
            report("a", &p, &a),
            report("b", &p, &b),
            report("c", &p, &c),
        ];
        let answer = Answer::new(&reports);
        assert!(!answer.allowed());
        assert_eq!(
            answer.binding().unwrap().name,
            "c",
            "equal waits: the later limit"
        );
        assert_eq!(answer.retry_after_seconds(), Some(5));
        let admitted = Answer::new(&reports[..1]);
        assert!(admitted.allowed());
        assert_eq!(admitted.binding().unwrap().name, "a");
        assert!(Answer::new(&[]).binding().is_none());
        assert!(Answer::new(&[]).headers(0).is_empty());
    }

    #[test]
    fn a_deny_list_answers_403_naming_the_list_but_not_the_entry() {
        let json: serde_json::Value =
            serde_json::from_str(&Problem::denied("deny:api", "/api/x").to_json()).unwrap();
        assert_eq!(json["status"], 403);
        assert_eq!(json["title"], "Forbidden");
        assert_eq!(json["type"], "about:blank");
        assert_eq!(json["reason"], "denied");
        assert_eq!(json["list"], "deny:api");
        assert_eq!(json["instance"], "/api/x");
        assert!(
            json.get("retry_after").is_none(),
            "no wait lifts a deny entry"
        );
        let other: serde_json::Value =
            serde_json::from_str(&Problem::internal_error(500, "x").to_json()).unwrap();
        assert!(other.get("list").is_none() && other["type"] == "about:blank");
    }
}
