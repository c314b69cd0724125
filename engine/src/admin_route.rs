//! The admin route (`admin_path`): live control of the Worker's store through the Worker itself,
//! for a store only the Worker can reach (Durable Objects) — what `edgelimit-admin --worker URL`
//! drives. A POST of one [`WireCall`] with `Authorization: Bearer <EDGELIMIT_ADMIN_TOKEN>`, answered
//! with its [`WireAnswer`](crate::wire::WireAnswer). Off unless configured.
//!
//! A host serves it in this order, reading nothing it need not: the token
//! ([`RouteGuard::admit`](crate::route_guard::RouteGuard::admit): compared in constant time,
//! never logged, failures limited per client address), then the method and the declared length
//! ([`check_admin_request`]), then the body, read up to [`MAX_ADMIN_BODY`] bytes and no further
//! ([`too_large`] beyond), then the call ([`Edge::admin`]).

use edgelimit::{Control, Store};

use crate::pipeline::Edge;
use crate::route_answer::RouteAnswer;
use crate::route_guard::Admitted;
use crate::wire::serve::serve;
use crate::wire::{WireBytes, WireCall, WireLimit};

/// The largest admin request body read, in bytes: a call is one limit and identifier, a list
/// entry (at most 1 KiB) or a tier, so a few KiB at most; beyond this the request is answered
/// 413 without reading the rest.
pub const MAX_ADMIN_BODY: usize = 64 * 1024;

/// 413: the body is larger than [`MAX_ADMIN_BODY`] (said before it is read, or once reading
/// passes the bound).
pub fn too_large() -> RouteAnswer {
    RouteAnswer::error(
        413,
        &format!("an admin call is at most {MAX_ADMIN_BODY} bytes"),
    )
}

/// Whether an admitted request's body is to be read: a POST (else 405) whose declared
/// `Content-Length`, if any, is within [`MAX_ADMIN_BODY`] (else 413). A body without a declared
/// length is read up to the bound all the same.
pub fn check_admin_request(method: &str, content_length: Option<&str>) -> Result<(), RouteAnswer> {
    if method != "POST" {
        return Err(RouteAnswer::error(405, "POST one call as JSON"));
    }
    let declared = content_length.and_then(|l| l.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > MAX_ADMIN_BODY as u64) {
        return Err(too_large());
    }
    Ok(())
}

impl<S: Store> Edge<S> {
    /// Answers one admitted admin call to `store` (the store this path decides with, as
    /// `Control`): `body`, a POST's whole body (the host has checked the token, the method and
    /// the size). A call that changes what an identifier is decided with (a reset, an
    /// assignment) also makes this isolate forget what it remembers of the identifier; other
    /// isolates learn it within `denial_cache_ms`, as from any writer.
    pub async fn admin<C: Control + ?Sized>(
        &self,
        store: &C,
        _admitted: &Admitted,
        body: &[u8],
    ) -> RouteAnswer {
        // As text, as every other JSON the Worker reads (one deserializer in its wasm, not two).
        let Ok(body) = std::str::from_utf8(body) else {
            return RouteAnswer::error(400, "not a call: the body is not UTF-8");
        };
        let call: WireCall = match serde_json::from_str(body) {
            Ok(call) => call,
            Err(e) => {
                return RouteAnswer::error(400, &format!("not a call: {e}"));
            }
        };
        let answered = serve(store, &call, None).await;
        if let Some((limit, identifier)) = changes_decisions(&call) {
            if let (Ok(limit), Ok(identifier)) = (limit.limit(), identifier.identifier()) {
                self.limiter().forget(&limit, &identifier);
            }
        }
        RouteAnswer::json(200, serde_json::to_string(&answered).unwrap_or_default())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RouteToken;
    use crate::route_guard::RouteGuard;
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
    fn the_method_and_the_declared_length_are_checked_before_the_body() {
        assert_eq!(check_admin_request("GET", None).unwrap_err().status, 405);
        assert_eq!(
            check_admin_request("PUT", Some("2")).unwrap_err().status,
            405
        );
        let over = (MAX_ADMIN_BODY + 1).to_string();
        assert_eq!(
            check_admin_request("POST", Some(&over)).unwrap_err().status,
            413
        );
        let at = MAX_ADMIN_BODY.to_string();
        for fine in [None, Some(at.as_str()), Some("0"), Some("not a length")] {
            assert_eq!(check_admin_request("POST", fine), Ok(()), "{fine:?}");
        }
    }

    #[test]
    fn the_route_answers_calls() {
        let config = Config::from_json(
            r#"{"rules":[{"name":"r","limits":[{"name":"l","policy":"fixed 1/1m","identifier":"ip"}]}]}"#,
        )
        .unwrap();
        let limit = config.rules[0].limits[0].limit.clone();
        let edge = Edge::new(config, MemoryStore::new());
        let store = edge.limiter().store();
        let secret = "t".repeat(32);
        let token = RouteToken::new("T", &secret).unwrap();
        let admitted = RouteGuard::new()
            .admit(&token, None, Some(&format!("Bearer {secret}")), 0)
            .unwrap();
        let post = |body: &str| ready(edge.admin(store, &admitted, body.as_bytes()));
        assert_eq!(post("not json").status, 400);
        // A check, then a reset: the quota is whole again.
        let check = serde_json::to_string(&check_call(
            &[Check::single(limit.clone(), "1.2.3.4", 1)],
            TimeSource::At(0),
        ))
        .unwrap();
        for allowed in [true, false] {
            let answered: WireAnswer = serde_json::from_str(&post(&check).body).unwrap();
            assert!(
                matches!(answered, WireAnswer::Verdicts { ref verdicts } if verdicts[0].allowed == allowed)
            );
        }
        let reset = serde_json::to_string(&WireCall::Reset {
            limit: WireLimit::of(&limit),
            identifier: WireBytes::of(b"1.2.3.4"),
        })
        .unwrap();
        let answered: WireAnswer = serde_json::from_str(&post(&reset).body).unwrap();
        assert_eq!(answered, WireAnswer::Existed { existed: true });
        let answered: WireAnswer = serde_json::from_str(&post(&check).body).unwrap();
        assert!(matches!(answered, WireAnswer::Verdicts { ref verdicts } if verdicts[0].allowed));
    }
}
