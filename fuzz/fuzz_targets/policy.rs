//! The policy spec parser (`Policy: FromStr`), its serde form (a spec string or a table) and
//! `Policy::new` on arbitrary parts. Every accepted policy must respect the documented bounds and
//! print as a spec that parses back to itself, through `Display` and through serde alike.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use edgelimit::{Algorithm, Policy};
use libfuzzer_sys::fuzz_target;

/// 366 days: the longest window (docs/decisions.md, "Policy bounds").
const MAX_WINDOW_MS: u64 = 366 * 24 * 3600 * 1000;

#[derive(Debug, Arbitrary)]
struct Parts {
    algorithm: u8,
    limit: u64,
    window_ms: u64,
    burst: Option<u64>,
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match text.parse::<Policy>() {
        Ok(policy) => check(&policy),
        Err(e) => assert_eq!(e.spec, text, "the error names the spec as written"),
    }
    if let Ok(policy) = serde_json::from_slice::<Policy>(data) {
        check(&policy);
    }
    if let Ok(parts) = Parts::arbitrary(&mut Unstructured::new(data)) {
        let algorithm = [
            Algorithm::FixedWindow,
            Algorithm::SlidingLog,
            Algorithm::SlidingCounter,
            Algorithm::TokenBucket,
            Algorithm::Gcra,
        ][usize::from(parts.algorithm) % 5];
        if let Ok(policy) = Policy::new(algorithm, parts.limit, parts.window_ms, parts.burst) {
            assert_eq!(policy.limit(), parts.limit);
            assert_eq!(policy.window_ms(), parts.window_ms);
            check(&policy);
        }
    }
});

fn check(policy: &Policy) {
    let (limit, window, burst) = (policy.limit(), policy.window_ms(), policy.burst());
    assert!(limit >= 1 && burst >= 1 && window >= 1, "{policy:?}");
    assert!(window <= MAX_WINDOW_MS, "{policy:?}");
    if policy.calendar().is_some() {
        // A calendar fixed window only counts: its limit alone is bounded.
        assert!(limit <= 1 << 50 && burst == limit, "{policy:?}");
    } else {
        for n in [limit, burst] {
            assert!(
                n.checked_mul(window).is_some_and(|p| p <= 1 << 50),
                "{policy:?}"
            );
        }
    }
    let spec = policy.to_string();
    assert_eq!(spec.parse::<Policy>().as_ref(), Ok(policy), "`{spec}`");
    let json = serde_json::to_string(policy).expect("a policy serializes");
    assert_eq!(
        serde_json::from_str::<Policy>(&json).ok().as_ref(),
        Some(policy),
        "{json}"
    );
}
