//! After a run, what a Redis node holds: every key in the namespace, every key with a TTL.

use edgelimit::store::key::state_key;
use edgelimit::{Algorithm, Identifier};

/// The prefix every key of `namespace` starts with, whatever the limit and identifier.
fn prefix(namespace: &str) -> String {
    let probe = state_key(namespace, "", Algorithm::Gcra, &Identifier::from(""));
    let prefix = probe[..probe.len() - "::}:gcra".len() + 1].to_string();
    assert!(
        prefix.starts_with("{el:") && prefix.ends_with(':'),
        "{prefix}"
    );
    prefix
}

/// SCANs the node at `port` and fails unless every key belongs to one of `namespaces` and
/// carries a TTL. Returns how many keys it saw.
pub fn assert_hygiene(port: u16, namespaces: &[&str]) -> usize {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).expect("url");
    let mut conn = client.get_connection().expect("connect");
    let prefixes: Vec<String> = namespaces.iter().map(|ns| prefix(ns)).collect();
    let mut cursor: u64 = 0;
    let mut seen = 0;
    // Bounded: a SCAN visits every key once per full iteration; 1M rounds is far beyond any test.
    for _ in 0..1_000_000 {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)
            .expect("SCAN");
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("PTTL").arg(key);
            }
            let ttls: Vec<i64> = pipe.query(&mut conn).expect("PTTL");
            for (key, ttl) in keys.iter().zip(ttls) {
                let name = String::from_utf8_lossy(key);
                assert!(
                    prefixes.iter().any(|p| name.starts_with(p.as_str())),
                    "key outside the namespaces {namespaces:?}: {name}"
                );
                // -2: expired between SCAN and PTTL (fine); -1: no TTL (a leak).
                assert!(ttl != -1, "key without a TTL: {name}");
            }
            seen += keys.len();
        }
        cursor = next;
        if cursor == 0 {
            return seen;
        }
    }
    panic!("SCAN did not finish");
}
