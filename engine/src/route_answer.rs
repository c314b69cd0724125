//! What the limiter answers on its own routes (the admin route, the metrics page, and their
//! door's refusals): a [`RouteAnswer`] with its status, header fields and body, all decided
//! here, so every host writes it out as it is and no host chooses a content type or a cache
//! rule of its own.

use crate::metrics_page::METRICS_CONTENT_TYPE;
use crate::ruling::NO_STORE;

/// The `Content-Type` of the admin route's answers and of every refusal at a guarded route.
pub const JSON_CONTENT_TYPE: &str = "application/json";

/// One answer of a limiter's own route: a host sets the status, every field of
/// [`RouteAnswer::header_fields`] and the body, and adds nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteAnswer {
    /// The HTTP status: 200 (the page, or an admin answer, which may say the call failed), 400
    /// (not a call), 401 (no or a wrong token), 405 (not a POST), 413 (a body over
    /// [`crate::admin_route::MAX_ADMIN_BODY`]), 429 (too many failed attempts from this
    /// address).
    pub status: u16,
    /// The body's media type: [`JSON_CONTENT_TYPE`] or [`METRICS_CONTENT_TYPE`].
    pub content_type: &'static str,
    /// The body.
    pub body: String,
    /// `Retry-After`, in seconds (a 429's).
    pub retry_after: Option<u64>,
}

impl RouteAnswer {
    /// A JSON answer.
    pub(crate) fn json(status: u16, body: String) -> RouteAnswer {
        RouteAnswer {
            status,
            content_type: JSON_CONTENT_TYPE,
            body,
            retry_after: None,
        }
    }

    /// `{"error": why}`.
    pub(crate) fn error(status: u16, why: &str) -> RouteAnswer {
        let why = serde_json::to_string(why).unwrap_or_default();
        RouteAnswer::json(status, format!(r#"{{"error":{why}}}"#))
    }

    /// 200: the metrics page, `text` in the Prometheus text format.
    pub(crate) fn metrics(text: String) -> RouteAnswer {
        RouteAnswer {
            status: 200,
            content_type: METRICS_CONTENT_TYPE,
            body: text,
            retry_after: None,
        }
    }

    /// 401: no token, or not the route's, whose secret is the variable `var`.
    pub fn unauthorized(var: &str) -> RouteAnswer {
        RouteAnswer::error(401, &format!("a bearer token equal to {var} is required"))
    }

    /// 429: this address failed too often; one more attempt is let through in `wait_ms`.
    pub fn too_many_failures(wait_ms: u64) -> RouteAnswer {
        let seconds = wait_ms.div_ceil(1000).max(1);
        let why = format!("too many failed attempts from this address: retry in {seconds} s");
        RouteAnswer {
            retry_after: Some(seconds),
            ..RouteAnswer::error(429, &why)
        }
    }

    /// Every header field of the answer, by lower-case name: its content type, `no-store`
    /// (what a route answers is this moment's, and a 401 or an admin answer is nobody's to
    /// keep), and a 429's `Retry-After`.
    pub fn header_fields(&self) -> impl Iterator<Item = (&'static str, String)> + '_ {
        [
            ("content-type", Some(self.content_type.to_string())),
            ("cache-control", Some(NO_STORE.to_string())),
            ("retry-after", self.retry_after.map(|s| s.to_string())),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(answer: &RouteAnswer) -> Vec<(&'static str, String)> {
        answer.header_fields().collect()
    }

    #[test]
    fn a_refusal_is_json_kept_by_nobody_and_a_429_says_when_to_retry() {
        let refused = RouteAnswer::unauthorized("EDGELIMIT_ADMIN_TOKEN");
        assert_eq!(refused.status, 401);
        assert_eq!(
            fields(&refused),
            [
                ("content-type", "application/json".to_string()),
                ("cache-control", "no-store".to_string()),
            ]
        );
        let body: serde_json::Value = serde_json::from_str(&refused.body).unwrap();
        assert!(body["error"]
            .as_str()
            .unwrap()
            .contains("EDGELIMIT_ADMIN_TOKEN"));

        let too_many = RouteAnswer::too_many_failures(59_001);
        assert_eq!((too_many.status, too_many.retry_after), (429, Some(60)));
        assert!(fields(&too_many).contains(&("retry-after", "60".to_string())));
        assert_eq!(RouteAnswer::too_many_failures(0).retry_after, Some(1));
    }

    #[test]
    fn the_metrics_page_is_prometheus_text() {
        let page = RouteAnswer::metrics("up 1\n".to_string());
        assert_eq!(page.status, 200);
        let (name, content_type) = &fields(&page)[0];
        assert_eq!(*name, "content-type");
        assert!(
            content_type.starts_with("text/plain; version=0.0.4"),
            "{content_type}"
        );
        assert_eq!(page.body, "up 1\n");
    }
}
