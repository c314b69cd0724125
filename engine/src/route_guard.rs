//! The door of a host's guarded routes — the admin route and the metrics page (unless public):
//! the bearer token, compared in constant time, checked before anything else of the request is
//! read (its body above all), and failed attempts limited per client address, so a token cannot
//! be guessed at the rate requests arrive.
//!
//! The limit on failures is the library's own: [`FAILED_ATTEMPTS_POLICY`] per client address
//! (an IPv6 client by its /64, as `ip` identifiers are grouped by default), decided by a
//! [`MemoryStore`] in the host's process (an isolate, at the edge) holding at most
//! [`GUARDED_ADDRESSES`] addresses — past that it forgets the one whose limit would lapse
//! soonest (the store's eviction rule). Only failures are charged: an operator with the right
//! token is never slowed. An address over the limit is answered 429, with `Retry-After`,
//! before its token is even compared — a right guess then earns nothing.

use std::sync::{Arc, LazyLock};

use edgelimit::net::AddressGrouping;
use edgelimit::{Check, Limit, MemoryStore, Policy};
use sha2::{Digest, Sha256};

use crate::config::RouteToken;
use crate::route_answer::RouteAnswer;

/// Failed attempts one client address may make, as a policy: ten at once, then one a minute.
pub const FAILED_ATTEMPTS_POLICY: &str = "gcra 10/10m burst 10";

/// The most client addresses the guard remembers failures of.
pub const GUARDED_ADDRESSES: usize = 10_000;

/// The key of requests whose client address is unknown or unreadable: they share one limit.
const UNKNOWN_CLIENT: &str = "unknown";

static FAILED_ATTEMPTS: LazyLock<Arc<Limit>> = LazyLock::new(|| {
    let policy: Policy = FAILED_ATTEMPTS_POLICY
        .parse()
        .expect("FAILED_ATTEMPTS_POLICY is a policy");
    Arc::new(Limit::new("route-guard-failures", policy))
});

/// Proof that a request presented its route's token (from [`RouteGuard::admit`]): what
/// [`crate::Edge::admin`] asks for, so no host can serve the admin route without the guard.
#[derive(Debug)]
pub struct Admitted(());

/// The guard of a host's guarded routes: one per host process (an isolate at the edge), shared
/// by its routes, remembering failed attempts per client address.
#[derive(Debug)]
pub struct RouteGuard {
    failures: MemoryStore,
    grouping: AddressGrouping,
}

impl Default for RouteGuard {
    fn default() -> RouteGuard {
        RouteGuard::new()
    }
}

impl RouteGuard {
    /// A guard that has seen no failure.
    pub fn new() -> RouteGuard {
        RouteGuard {
            failures: MemoryStore::with_capacity(GUARDED_ADDRESSES),
            grouping: AddressGrouping::default(),
        }
    }

    /// Whether a request from `client` (its address as text, if known) carrying
    /// `authorization` (its header) may use the route whose secret is `token`, at `now_ms`.
    /// Refused: 429 while the address is over [`FAILED_ATTEMPTS_POLICY`] (the token is not
    /// compared), else 401 for a missing or wrong token (one failure charged).
    pub fn admit(
        &self,
        token: &RouteToken,
        client: Option<&str>,
        authorization: Option<&str>,
        now_ms: u64,
    ) -> Result<Admitted, RouteAnswer> {
        let client = self.key(client);
        let standing = self
            .failures
            .direct()
            .peek(&FAILED_ATTEMPTS, client.as_bytes(), now_ms);
        let standing = &standing.decisions[0];
        if standing.remaining == 0 {
            // A GCRA denial leaves the state as it was: this step costs nothing, and says how
            // long until one more attempt is let through. (At the instant of a look that found
            // nothing left it is always a denial.)
            let over = charge(&self.failures, &client, now_ms);
            if !over.allowed {
                return Err(RouteAnswer::too_many_failures(over.retry_after_ms));
            }
        }
        if authorized(token.secret(), authorization) {
            return Ok(Admitted(()));
        }
        charge(&self.failures, &client, now_ms);
        Err(RouteAnswer::unauthorized(token.var()))
    }

    /// The key a client's failures are counted under: its address, an IPv6 one by its /64.
    fn key(&self, client: Option<&str>) -> String {
        client
            .and_then(|text| self.grouping.identifier_of(text).ok())
            .map_or_else(|| UNKNOWN_CLIENT.to_string(), |id| id.to_string())
    }
}

/// One failure of `client` charged at `now_ms` (a denial charges nothing): the decision.
fn charge(failures: &MemoryStore, client: &str, now_ms: u64) -> edgelimit::Decision {
    let check = Check::single(FAILED_ATTEMPTS.clone(), client, 1);
    let mut verdicts = failures.direct().check(&[check], now_ms);
    verdicts.swap_remove(0).decisions.swap_remove(0)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> (RouteToken, String) {
        let secret = "k".repeat(40);
        (
            RouteToken::new("T", &secret).unwrap(),
            format!("Bearer {secret}"),
        )
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
    fn ten_failures_close_the_door_to_that_address_only() {
        let (token, right) = token();
        let guard = RouteGuard::new();
        let at =
            |client: &str, auth: &str, now: u64| guard.admit(&token, Some(client), Some(auth), now);
        for i in 0..10 {
            assert_eq!(
                at("198.51.100.7", "Bearer wrong", i).unwrap_err().status,
                401,
                "{i}"
            );
        }
        let refused = at("198.51.100.7", "Bearer wrong", 10).unwrap_err();
        assert_eq!((refused.status, refused.retry_after), (429, Some(60)));
        // The right token is not even compared now: a right guess earns nothing.
        assert_eq!(at("198.51.100.7", &right, 11).unwrap_err().status, 429);
        // Another address is not affected.
        assert!(at("198.51.100.8", &right, 12).is_ok());
        // A minute after the tenth failure, one more attempt; refusals in between did not
        // push it back.
        for now in (20..59_000).step_by(997) {
            assert_eq!(
                at("198.51.100.7", "Bearer wrong", now).unwrap_err().status,
                429
            );
        }
        assert!(at("198.51.100.7", &right, 60_010).is_ok());
        assert_eq!(
            at("198.51.100.7", "Bearer wrong", 60_011)
                .unwrap_err()
                .status,
            401
        );
        assert_eq!(
            at("198.51.100.7", "Bearer wrong", 60_012)
                .unwrap_err()
                .status,
            429
        );
    }

    #[test]
    fn the_right_token_is_never_charged() {
        let (token, right) = token();
        let guard = RouteGuard::new();
        for now in 0..1_000 {
            assert!(guard
                .admit(&token, Some("192.0.2.1"), Some(&right), now)
                .is_ok());
        }
        for i in 0..10 {
            let refused = guard.admit(&token, Some("192.0.2.1"), None, 1_000 + i);
            assert_eq!(refused.unwrap_err().status, 401, "{i}");
        }
    }

    #[test]
    fn an_ipv6_client_is_counted_by_its_64_and_an_unknown_one_with_every_unknown() {
        let (token, _) = token();
        let guard = RouteGuard::new();
        for i in 0..10 {
            let client = format!("2001:db8:1:2::{i:x}");
            assert_eq!(
                guard
                    .admit(&token, Some(&client), None, 0)
                    .unwrap_err()
                    .status,
                401
            );
        }
        let other_host = guard.admit(&token, Some("2001:db8:1:2:ffff::1"), None, 0);
        assert_eq!(other_host.unwrap_err().status, 429);
        assert_eq!(
            guard
                .admit(&token, Some("2001:db8:1:3::1"), None, 0)
                .unwrap_err()
                .status,
            401
        );
        for i in 0..10 {
            let client = if i % 2 == 0 {
                None
            } else {
                Some("not an address")
            };
            assert_eq!(
                guard.admit(&token, client, None, 0).unwrap_err().status,
                401
            );
        }
        assert_eq!(guard.admit(&token, None, None, 0).unwrap_err().status, 429);
    }

    #[test]
    fn the_guard_remembers_at_most_its_bound_of_addresses() {
        let (token, _) = token();
        let guard = RouteGuard::new();
        for i in 0..(GUARDED_ADDRESSES as u32 + 5_000) {
            let client = std::net::Ipv4Addr::from(0x0a00_0000 + i).to_string();
            let _ = guard.admit(&token, Some(&client), None, u64::from(i));
        }
        assert_eq!(guard.failures.len(), GUARDED_ADDRESSES);
    }
}
