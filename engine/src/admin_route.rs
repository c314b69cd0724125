//! The admin route (`admin_path`): live control of the Worker's store through the Worker itself,
//! for a store only the Worker can reach (Durable Objects) — what `edgelimit-admin --worker URL`
//! drives. A POST of one [`WireCall`] with `Authorization: Bearer <EDGELIMIT_ADMIN_TOKEN>`, answered
//! with its [`WireAnswer`](crate::wire::WireAnswer). Off unless configured; the token is compared
//! in constant time and never logged.

use edgelimit::{Control, Store};
use sha2::{Digest, Sha256};

use crate::pipeline::Edge;
use crate::wire::serve::serve;
use crate::wire::{WireBytes, WireCall, WireLimit};

/// What the admin route answers: a status and a JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminAnswer {
    /// The HTTP status: 200 (the answer, which may say the call failed), 400 (not a call), 401
    /// (no or a wrong token), 405 (not a POST).
    pub status: u16,
    /// The body.
    pub body: String,
}

/// Whether `authorization` (the request's header) presents `token` as a bearer token. Both
/// sides are hashed first, so the comparison takes the same time whatever the lengths and
/// wherever they first differ.
pub fn authorized(token: &str, authorization: Option<&str>) -> bool {
    let Some(presented) = authorization.and_then(|a| a.trim().strip_prefix("Bearer ")) else {
        return false;
    };
    let (a, b) = (Sha256::digest(presented.trim()), Sha256::digest(token));
    !token.is_empty()
        && a.iter()
            .zip(b.iter())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

impl<S: Store> Edge<S> {
    /// Answers one admin request to `store` (the store this path decides with, as `Control`):
    /// `method`, the `Authorization` header, the body. `token` is the configured secret. A call
    /// that changes what an identifier is decided with (a reset, an assignment) also makes this
    /// isolate forget what it remembers of the identifier; other isolates learn it within
    /// `denial_cache_ms`, as from any writer.
    pub async fn admin<C: Control + ?Sized>(
        &self,
        store: &C,
        token: &str,
        method: &str,
        authorization: Option<&str>,
        body: &str,
    ) -> AdminAnswer {
        if !authorized(token, authorization) {
            return answer(
                401,
                r#"{"error":"a bearer token equal to EDGELIMIT_ADMIN_TOKEN is required"}"#,
            );
        }
        if method != "POST" {
            return answer(405, r#"{"error":"POST one call as JSON"}"#);
        }
        let call: WireCall = match serde_json::from_str(body) {
            Ok(call) => call,
            Err(e) => {
                let error = serde_json::json!({ "error": format!("not a call: {e}") });
                return answer(400, &error.to_string());
            }
        };
        let answered = serve(store, &call, None).await;
        if let Some((limit, identifier)) = changes_decisions(&call) {
            if let (Ok(limit), Ok(identifier)) = (limit.limit(), identifier.identifier()) {
                self.limiter().forget(&limit, &identifier);
            }
        }
        AdminAnswer {
            status: 200,
            body: serde_json::to_string(&answered).unwrap_or_default(),
        }
    }
}

/// The (limit, identifier) whose decisions `call` changes, if it changes any.
fn changes_decisions(call: &WireCall) -> Option<(&WireLimit, &WireBytes)> {
    match call {
        WireCall::Reset { limit, identifier }
        | WireCall::Assign {
            limit, identifier, ..
        }
        | WireCall::ClearAssignment {
            limit, identifier, ..
        } => Some((limit, identifier)),
        _ => None,
    }
}

fn answer(status: u16, body: &str) -> AdminAnswer {
    AdminAnswer {
        status,
        body: body.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{check_call, WireAnswer};
    use crate::Config;
    use edgelimit::{Check, MemoryStore, TimeSource};

    fn ready<F: std::future::Future>(future: F) -> F::Output {
        match std::pin::pin!(future)
            .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
        {
            std::task::Poll::Ready(out) => out,
            std::task::Poll::Pending => panic!("the memory store answers at once"),
        }
    }

    #[test]
    fn only_the_exact_bearer_token_is_authorized() {
        assert!(authorized("s3cret", Some("Bearer s3cret")));
        for wrong in [
            None,
            Some("s3cret"),
            Some("Bearer s3cre"),
            Some("Bearer s3cret!"),
            Some("Basic s3cret"),
        ] {
            assert!(!authorized("s3cret", wrong), "{wrong:?}");
        }
        assert!(
            !authorized("", Some("Bearer ")),
            "an empty secret opens nothing"
        );
    }

    #[test]
    fn the_route_answers_calls_and_refuses_the_rest() {
        let config = Config::from_json(
            r#"{"rules":[{"name":"r","limits":[{"name":"l","policy":"fixed 1/1m","identifier":"ip"}]}]}"#,
        )
        .unwrap();
        let limit = config.rules[0].limits[0].limit.clone();
        let edge = Edge::new(config, MemoryStore::new());
        let store = edge.limiter().store();
        let post =
            |auth: Option<&str>, body: &str| ready(edge.admin(store, "tok", "POST", auth, body));
        assert_eq!(post(None, "{}").status, 401);
        assert_eq!(post(Some("Bearer nope"), "{}").status, 401);
        assert_eq!(
            ready(edge.admin(store, "tok", "GET", Some("Bearer tok"), "")).status,
            405
        );
        assert_eq!(post(Some("Bearer tok"), "not json").status, 400);
        // A check, then a reset: the quota is whole again.
        let check = serde_json::to_string(&check_call(
            &[Check::single(limit.clone(), "1.2.3.4", 1)],
            TimeSource::At(0),
        ))
        .unwrap();
        for allowed in [true, false] {
            let answered: WireAnswer =
                serde_json::from_str(&post(Some("Bearer tok"), &check).body).unwrap();
            assert!(
                matches!(answered, WireAnswer::Verdicts { ref verdicts } if verdicts[0].allowed == allowed)
            );
        }
        let reset = serde_json::to_string(&WireCall::Reset {
            limit: WireLimit::of(&limit),
            identifier: WireBytes::of(b"1.2.3.4"),
        })
        .unwrap();
        let answered: WireAnswer =
            serde_json::from_str(&post(Some("Bearer tok"), &reset).body).unwrap();
        assert_eq!(answered, WireAnswer::Existed { existed: true });
        let answered: WireAnswer =
            serde_json::from_str(&post(Some("Bearer tok"), &check).body).unwrap();
        assert!(matches!(answered, WireAnswer::Verdicts { ref verdicts } if verdicts[0].allowed));
    }
}
