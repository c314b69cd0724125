//! [`RateLimit`]: the service a [`crate::RateLimitLayer`] wraps around another. A request no
//! rule matches (or one exempt) goes straight to the inner service; any other goes down the
//! request path first, and is forwarded with the `RateLimit` headers or answered by the layer;
//! the configuration's `metrics_path`, if set, is answered with the counters.
//! The work a request leaves for after its response (its settlement, read from the inner
//! service's response, and the store's upkeep) runs in a tokio task of its own: the response
//! goes out without waiting for it.
//!
//! The store's failures are logged with `tracing` (target `edgelimit`), at most one line per
//! failure class per minute with the count of those it stands for (the limiter's
//! [`edgelimit::metrics::FailureLog`]): `error` when the store refused the limiter, `warn` when
//! it could not answer.
//!
//! A request admitted after a wait (a limit's `exceed = "delay …"`) waits in a tokio timer
//! before the inner service is called: a pending future holding its request (and its
//! connection), no thread and no CPU. A request a `soft` limit exceeded reaches the inner
//! service with `EdgeLimit-Exceeded` naming the limits.
//!
//! A limited request runs inside an `edgelimit.layer` span (`crate::trace`), around the request
//! path's own `edgelimit.decide` span and the inner service's.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use edgelimit::http::HeaderFields;
use edgelimit::Store;
use edgelimit_engine::read_ahead::ReadAhead;
use edgelimit_engine::route_answer::RouteAnswer;
use edgelimit_engine::{Action, AfterResponse, RequestView, ResponseView, Route};
use http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use http::{request, response, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use smallvec::SmallVec;
use tower_service::Service;

use crate::body::ResponseBody;
use crate::custom::Customs;
use crate::request::HttpRequest;
use crate::shared::Shared;
use crate::trace;

/// A service limited by a [`crate::RateLimitLayer`].
pub struct RateLimit<Svc, S> {
    inner: Svc,
    shared: Arc<Shared<S>>,
}

impl<Svc, S> RateLimit<Svc, S> {
    pub(crate) fn new(inner: Svc, shared: Arc<Shared<S>>) -> RateLimit<Svc, S> {
        RateLimit { inner, shared }
    }
}

impl<Svc: Clone, S> Clone for RateLimit<Svc, S> {
    fn clone(&self) -> RateLimit<Svc, S> {
        RateLimit {
            inner: self.inner.clone(),
            shared: self.shared.clone(),
        }
    }
}

impl<Svc: fmt::Debug, S> fmt::Debug for RateLimit<Svc, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

type Answer<B, E> = Result<Response<ResponseBody<B>>, E>;

impl<Svc, S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<Svc, S>
where
    Svc: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Error: Send + 'static,
    S: Store + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = Svc::Error;
    type Future = ResponseFuture<Svc::Future, ResBody, Svc::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Svc::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let shared = &self.shared;
        if let Some(page) = metrics_page(shared, &parts) {
            return ResponseFuture::ready(page);
        }
        // What no rule matches is not limited at all: no store call, no headers (as the
        // Worker). The engine reads the request and matches its rules here, once: the request
        // path takes them as found.
        let Some(matched) = ReadAhead::read(
            shared.edge.config(),
            &HttpRequest::new(&parts, &shared.reading),
            |path| shared.exempt.exempts(path),
        ) else {
            return ResponseFuture::passthrough(self.inner.call(Request::from_parts(parts, body)));
        };
        // The inner service that was made ready goes with this request; a clone waits for the
        // next `poll_ready`.
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        // Only a span some subscriber takes wraps the future: an untraced request's is what
        // it would be without spans.
        if let Some(span) = trace::layer_span(&parts) {
            return traced(span, shared.clone(), inner, parts, body, matched);
        }
        // The box is allocated before the future is made, so that the future is written
        // straight into it rather than made on the stack and copied over, whole.
        let boxed = Box::new_uninit();
        let future = Box::write(boxed, limited(shared.clone(), inner, parts, body, matched));
        ResponseFuture::limited(Box::into_pin(future))
    }
}

/// [`RateLimit::call`]'s future for a request some subscriber traces: [`limited`] inside
/// `span` ([`trace::within`]). Out of line, so the untraced path stays as it is.
#[cold]
#[inline(never)]
fn traced<Svc, S, ReqBody, ResBody>(
    span: tracing::Span,
    shared: Arc<Shared<S>>,
    inner: Svc,
    parts: request::Parts,
    body: ReqBody,
    matched: ReadAhead,
) -> ResponseFuture<Svc::Future, ResBody, Svc::Error>
where
    Svc: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    Svc::Future: Send + 'static,
    Svc::Error: Send + 'static,
    S: Store + 'static,
    ReqBody: Send + 'static,
    ResBody: Send + 'static,
{
    let boxed = Box::new_uninit();
    let future = Box::write(
        boxed,
        trace::within(span, limited(shared, inner, parts, body, matched)),
    );
    ResponseFuture::limited(Box::into_pin(future))
}

/// The configuration's `metrics_path` page, when `request` asks for it: the layer's counters
/// as Prometheus text, as the Worker answers it — to the bearer token unless the page is public
/// (401 without it, 429 after too many failures from the client's address).
fn metrics_page<S: Store, B>(
    shared: &Shared<S>,
    request: &request::Parts,
) -> Option<Response<ResponseBody<B>>> {
    if shared
        .edge
        .route(request.method.as_str(), request.uri.path())
        != Route::Metrics
    {
        return None;
    }
    let client = shared.metrics_token.as_ref().and_then(|_| {
        HttpRequest::new(request, &shared.reading)
            .client_ip()
            .map(|ip| ip.into_owned())
    });
    let authorization = request
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    Some(route_answer(shared.edge.metrics_page(
        &shared.guard,
        shared.metrics_token.as_ref(),
        client.as_deref(),
        authorization,
        shared.clock.now_ms(),
    )))
}

/// One of the limiter's own answers (the metrics page, its refusals) as a response, written as
/// the engine made it.
fn route_answer<B>(answer: RouteAnswer) -> Response<ResponseBody<B>> {
    let fields: SmallVec<[(&str, String); 3]> = answer.header_fields().collect();
    let mut response = Response::new(ResponseBody::answer(answer.body));
    *response.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    for (name, value) in fields {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    response
}

/// One limited request: the request path, then the inner service or the layer's answer; the
/// work left for after the response is handed to a task of its own.
async fn limited<Svc, S, ReqBody, ResBody>(
    owned: Arc<Shared<S>>,
    mut inner: Svc,
    mut parts: request::Parts,
    body: ReqBody,
    matched: ReadAhead,
) -> Answer<ResBody, Svc::Error>
where
    Svc: Service<Request<ReqBody>, Response = Response<ResBody>>,
    S: Store + 'static,
{
    let shared = &*owned;
    let request = HttpRequest::new(&parts, &shared.reading).with_read_ahead(matched);
    // The isolate's clock is read by its memory of the dynamic lists' denials alone: without
    // those lists the time is never looked at, and the clock is not read for it.
    let now_ms = if shared.edge.config().dynamic_lists {
        shared.clock.now_ms()
    } else {
        0
    };
    let handled = shared.edge.handle(&request, now_ms).await;
    log_store_failures(shared);
    trace::decided(shared, &handled);
    let answer = handled.response(&request);
    drop(request);
    let (status, body_text, content_type) = match answer.action {
        Action::Forward => {
            if shared.edge.tells_origin() {
                // The field is the layer's own: never one a client sent.
                parts.headers.remove(EXCEEDED);
                if let Some(value) = handled
                    .exceeded_header()
                    .and_then(|v| HeaderValue::from_str(&v).ok())
                {
                    parts.headers.insert(EXCEEDED, value);
                }
            }
            let delay_ms = handled.delay_ms();
            if delay_ms > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(delay_ms)).await;
            }
            return match inner.call(Request::from_parts(parts, body)).await {
                Ok(response) => {
                    let (mut head, body) = response.into_parts();
                    add_fields(&mut head.headers, answer.headers);
                    let inner_response = InnerResponse {
                        head: &head,
                        customs: &shared.reading.customs,
                    };
                    after_response(&owned, handled.after_response(Some(&inner_response)));
                    Ok(Response::from_parts(head, ResponseBody::inner(body)))
                }
                Err(e) => {
                    // No response states a cost: the estimates stand, leases are released.
                    after_response(&owned, handled.after_response(None));
                    Err(e)
                }
            };
        }
        Action::Respond {
            status,
            body,
            content_type,
        } => (status, body, content_type),
    };
    // A refused request took nothing, but an admitting shadow check holds its leases.
    after_response(&owned, handled.after_response(None));
    let mut response = Response::new(ResponseBody::answer(body_text));
    *response.status_mut() =
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let headers = response.headers_mut();
    // The map is empty: sized once, for the content type, the fields and the `content-length`
    // the server adds, rather than allocated for the first and grown for the others.
    headers.reserve(answer.headers.len() + 2);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    add_fields(headers, answer.headers);
    Ok(response)
}

/// The inner service's response as the work after it reads it: a `custom:` cost from its
/// closure, any other field from the response's header fields.
struct InnerResponse<'a> {
    head: &'a response::Parts,
    customs: &'a Customs,
}

impl ResponseView for InnerResponse<'_> {
    fn status(&self) -> u16 {
        self.head.status.as_u16()
    }

    fn header(&self, name: &str) -> Option<Cow<'_, str>> {
        match name.strip_prefix("custom:") {
            Some(custom) => self
                .customs
                .cost(custom, self.head)
                .map(|cost| Cow::Owned(cost.to_string())),
            None => self
                .head
                .headers
                .get(name)?
                .to_str()
                .ok()
                .map(Cow::Borrowed),
        }
    }
}

/// Runs the work a request left for after its response in a task of its own, when there is
/// any: the response never waits for it. A commit that fails leaves the estimate charged and
/// the leases to their timeout (the safe side), and the limiter counts the store's failure.
#[inline]
fn after_response<S: Store + 'static>(shared: &Arc<Shared<S>>, work: AfterResponse) {
    if !work.is_empty() {
        spawn_after_response(shared.clone(), work);
    }
}

/// [`after_response`]'s task. Out of line: a request with nothing to do after its response
/// (most) carries none of the spawn's code in its own.
#[inline(never)]
fn spawn_after_response<S: Store + 'static>(shared: Arc<Shared<S>>, work: AfterResponse) {
    tokio::spawn(async move {
        let now_ms = shared.clock.now_ms();
        let _ = shared.edge.run_after_response(work, now_ms).await;
        log_store_failures(&shared);
    });
}

/// Writes the store failures' log lines now due: none while the store answers (one flag read).
fn log_store_failures<S: Store>(shared: &Shared<S>) {
    for line in shared.edge.limiter().store_failure_lines() {
        if line.misconfiguration {
            tracing::error!(
                target: "edgelimit",
                class = line.class.as_str(),
                failures = line.failures,
                suppressed = line.suppressed,
                first_ms = line.first_ms,
                last_ms = line.last_ms,
                error = %line.error,
                "{}",
                line.consequence()
            );
        } else {
            tracing::warn!(
                target: "edgelimit",
                class = line.class.as_str(),
                failures = line.failures,
                suppressed = line.suppressed,
                first_ms = line.first_ms,
                last_ms = line.last_ms,
                error = %line.error,
                "{}",
                line.consequence()
            );
        }
    }
}

/// Adds the request path's header fields to a response, replacing any of the same name.
fn add_fields(headers: &mut HeaderMap, fields: HeaderFields) {
    // Room for all of them at once, and for the `content-length` the server adds after: the
    // map grows (and rehashes) once, while it holds only the inner service's few fields.
    headers.reserve(fields.len() + 1);
    let spans: SmallVec<[(&'static str, Range<usize>); 8]> = fields.spans().collect();
    // Every value is a slice of the one buffer: no value is copied or allocated on its own.
    let text = Bytes::from(fields.into_text());
    for (name, span) in &spans {
        // The fields' names and values are the library's own, always valid.
        if let (Some(name), Ok(value)) = (
            field_name(name),
            HeaderValue::from_maybe_shared(text.slice(span.clone())),
        ) {
            headers.insert(name, value);
        }
    }
}

/// The request path's field names, known ahead: a static name is neither parsed nor allocated
/// per request, as one from `HeaderName::from_bytes` is (lower-cased into a new buffer).
const EXCEEDED: HeaderName = HeaderName::from_static("edgelimit-exceeded");
const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
const X_RATELIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
const X_RATELIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
const X_RATELIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// `name` as a header name: one of the path's own without parsing, any other parsed.
fn field_name(name: &str) -> Option<HeaderName> {
    Some(match name {
        "RateLimit-Policy" => RATELIMIT_POLICY,
        "RateLimit" => RATELIMIT,
        "X-RateLimit-Limit" => X_RATELIMIT_LIMIT,
        "X-RateLimit-Remaining" => X_RATELIMIT_REMAINING,
        "X-RateLimit-Reset" => X_RATELIMIT_RESET,
        "Retry-After" => RETRY_AFTER,
        "Cache-Control" => CACHE_CONTROL,
        _ => return HeaderName::from_bytes(name.as_bytes()).ok(),
    })
}

type Limited<B, E> = Pin<Box<dyn Future<Output = Answer<B, E>> + Send>>;

/// The response future of [`RateLimit`].
///
/// Every kind is held behind a pointer: the future is moved several times on its way to the
/// server (wrapped by each layer above), and a pointer moves in a register where an inner
/// service's future held inline (hundreds of bytes) would be copied each time.
pub struct ResponseFuture<F, B, E> {
    kind: Kind<F, B, E>,
}

enum Kind<F, B, E> {
    Passthrough {
        future: Pin<Box<F>>,
    },
    Limited {
        future: Limited<B, E>,
    },
    Ready {
        response: Option<Box<Response<ResponseBody<B>>>>,
    },
}

impl<F, B, E> ResponseFuture<F, B, E> {
    fn passthrough(future: F) -> ResponseFuture<F, B, E> {
        ResponseFuture {
            kind: Kind::Passthrough {
                future: Box::pin(future),
            },
        }
    }

    fn limited(future: Limited<B, E>) -> ResponseFuture<F, B, E> {
        ResponseFuture {
            kind: Kind::Limited { future },
        }
    }

    fn ready(response: Response<ResponseBody<B>>) -> ResponseFuture<F, B, E> {
        ResponseFuture {
            kind: Kind::Ready {
                response: Some(Box::new(response)),
            },
        }
    }
}

impl<F, B, E> fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.kind {
            Kind::Passthrough { .. } => "ResponseFuture::Passthrough",
            Kind::Limited { .. } => "ResponseFuture::Limited",
            Kind::Ready { .. } => "ResponseFuture::Ready",
        })
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Answer<B, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Answer<B, E>> {
        // Nothing is pinned in place: every kind holds its future behind a pointer.
        match &mut self.get_mut().kind {
            Kind::Passthrough { future } => future
                .as_mut()
                .poll(cx)
                .map(|result| result.map(|response| response.map(ResponseBody::inner))),
            Kind::Limited { future } => future.as_mut().poll(cx),
            Kind::Ready { response } => {
                Poll::Ready(Ok(*response.take().expect("a ready future polled once")))
            }
        }
    }
}
