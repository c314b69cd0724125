//! Reading limiter script replies (`edgelimit::script`): `CheckPlan::verdict` on arbitrary replies
//! — whatever Redis, a proxy, or an attacker between them sends back — for plans of one to four
//! limits on one node or a Cluster. A malformed reply is a `StoreError`, never a panic; an
//! accepted one is a verdict that agrees with itself (one decision per limit, allowed only if
//! every limit allowed, allowed exactly when the reason says admitted).
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use edgelimit::script::{is_noscript, CheckPlan, Reply, Topology};
use edgelimit::{Check, Limit, Policy, Reason, StoreError, TimeSource};
use libfuzzer_sys::fuzz_target;

/// A reply as a transport may deliver it.
#[derive(Debug, Arbitrary)]
enum AnyReply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Array(Vec<AnyReply>),
    Error(String),
}

impl AnyReply {
    fn into_reply(self) -> Reply {
        match self {
            AnyReply::Nil => Reply::Nil,
            AnyReply::Int(v) => Reply::Int(v),
            AnyReply::Bulk(b) => Reply::Bulk(b),
            AnyReply::Array(items) => {
                Reply::Array(items.into_iter().map(AnyReply::into_reply).collect())
            }
            AnyReply::Error(m) => Reply::Error(m),
        }
    }
}

/// Either any reply, or one shaped like a script's (an array of small integers, some as text),
/// so the fuzzer reaches the field checks without first guessing the length.
#[derive(Debug, Arbitrary)]
enum Shaped {
    Any(AnyReply),
    Ints(Vec<(u8, bool)>),
}

#[derive(Debug, Arbitrary)]
struct Input {
    limits: u8,
    cluster: bool,
    server_time: bool,
    replies: Vec<Shaped>,
}

const SPECS: [&str; 5] = [
    "fixed 10/1s",
    "sliding-log 5/1m",
    "sliding-counter 100/1h",
    "token-bucket 1/1s burst 10",
    "gcra 10/1s burst 20",
];

fuzz_target!(|data: &[u8]| {
    let Ok(input) = Input::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    let items = usize::from(input.limits % 4) + 1;
    let mut check = Check::new();
    for (i, spec) in SPECS.iter().cycle().take(items).enumerate() {
        let limit = Limit::new(
            format!("l{i}"),
            spec.parse::<Policy>().expect("a valid spec"),
        );
        check = check.with(&limit, format!("client-{i}"), 1);
    }
    let topology = if input.cluster {
        Topology::Cluster
    } else {
        Topology::SingleNode
    };
    let time = if input.server_time {
        TimeSource::Server
    } else {
        TimeSource::At(1_700_000_000_000)
    };
    let plan = CheckPlan::new(&check, "fuzz", time, topology).expect("a valid plan");
    let replies: Vec<Reply> = input
        .replies
        .into_iter()
        .map(|shaped| match shaped {
            Shaped::Any(any) => any.into_reply(),
            // Small values, so flags and reason codes are often valid.
            Shaped::Ints(values) => Reply::Array(
                values
                    .into_iter()
                    .map(|(v, text)| {
                        let v = i64::from(v % 4) - 1;
                        if text {
                            Reply::Bulk(v.to_string().into_bytes())
                        } else {
                            Reply::Int(v)
                        }
                    })
                    .collect(),
            ),
        })
        .collect();
    for reply in &replies {
        if let Reply::Error(message) = reply {
            is_noscript(message);
        }
    }
    match plan.verdict(&replies) {
        Ok(verdict) => {
            assert_eq!(verdict.decisions.len(), items);
            assert_eq!(verdict.atomic, plan.is_atomic());
            assert_eq!(
                verdict.allowed,
                verdict.decisions.iter().all(|d| d.allowed),
                "a verdict that disagrees with its decisions: {verdict:?}"
            );
            for d in &verdict.decisions {
                assert_eq!(
                    d.allowed,
                    d.reason == Reason::Admitted,
                    "a decision that disagrees with its reason: {d:?}"
                );
            }
        }
        Err(StoreError::Protocol(_) | StoreError::Script(_)) => {}
        Err(e) => panic!("a reply is not a {e:?}"),
    }
});
