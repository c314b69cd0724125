//! The REST store's answer decoding (`edgelimit::store::decode_pipeline`): an HTTP status and any
//! body text, as an Upstash-protocol server (or anyone between us and it) may answer a
//! `/pipeline`, then the replies read by the check plan that sent it. Every answer is replies
//! (one per command) or a `StoreError`; never a panic. The first byte chooses the status and
//! the plan.
#![no_main]

use edgelimit::script::{CheckPlan, Topology};
use edgelimit::store::upstash::decode_pipeline;
use edgelimit::{Check, Limit, Policy, StoreError, TimeSource};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else {
        return;
    };
    let status = match mode >> 4 {
        0..=9 => 200,
        10 => 401,
        11 => 403,
        12 => 500,
        13 => 503,
        14 => 404,
        _ => 299,
    };
    // Three plans: one limit (its script), two on one node (the multi script), two on a Cluster.
    let a = Limit::new("a", "gcra 10/1s burst 20".parse::<Policy>().expect("valid"));
    let b = Limit::new(
        "b",
        "sliding-counter 100/1h".parse::<Policy>().expect("valid"),
    );
    let (check, topology) = match mode % 3 {
        0 => (Check::single(&a, "x", 1), Topology::SingleNode),
        1 => (
            Check::new().with(&a, "x", 1).with(&b, "y", 1),
            Topology::SingleNode,
        ),
        _ => (
            Check::new().with(&a, "x", 1).with(&b, "y", 1),
            Topology::Cluster,
        ),
    };
    let plan = CheckPlan::new(&check, "fuzz", TimeSource::At(1), topology).expect("valid");
    let commands = plan.invocations().len();
    // As reqwest's `Response::text` reads a body: UTF-8, invalid bytes replaced.
    let text = String::from_utf8_lossy(body);
    match decode_pipeline(status, &text, commands) {
        Ok(replies) => {
            assert_eq!(status, 200);
            assert_eq!(replies.len(), commands);
            match plan.verdict(&replies) {
                Ok(verdict) => assert_eq!(verdict.decisions.len(), check.items().len()),
                Err(StoreError::Protocol(_) | StoreError::Script(_)) => {}
                Err(e) => panic!("a reply is not a {e:?}"),
            }
        }
        Err(StoreError::Auth(_)) => assert!(status == 401 || status == 403),
        Err(StoreError::Unreachable(_)) => assert!(status >= 500),
        Err(StoreError::Protocol(_)) => {}
        Err(e) => panic!("an answer is not a {e:?}"),
    }
});
