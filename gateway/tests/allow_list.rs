//! The default allow-list is exactly what edgelimit needs: every command the library's scripts
//! call is on it, and edgelimit's REST store — checks of every algorithm, assignments, dynamic
//! lists, peek, reset, `SCRIPT LOAD` of its scripts — runs through a gateway left at the default
//! against a real redis-server, while what the list leaves out is refused.

mod common;

use std::collections::BTreeSet;

use common::TOKEN;
use edgelimit::control::assignment::ASSIGN_SCRIPT;
use edgelimit::control::list::ListEntry;
use edgelimit::control::AssignmentKind;
use edgelimit::script::Script;
use edgelimit::store::Store;
use edgelimit::{
    Algorithm, Assignment, Check, Control, Identifier, Limit, Policy, RestStore, TimeSource,
};
use edgelimit_gateway::config::DEFAULT_COMMANDS;
use edgelimit_testkit::http::raw_post;
use serde_json::{json, Value};

const T0: u64 = 1_700_000_000_000;

/// The upper-case names of the commands `source` calls (`redis.call('GET', …)`,
/// `redis.pcall("ZADD", …)`).
fn called(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for call in ["redis.call(", "redis.pcall("] {
        for rest in source.split(call).skip(1) {
            let rest = rest.trim_start();
            let quote = rest.chars().next().expect("an argument");
            assert!(quote == '\'' || quote == '"', "a literal name: {rest:.40}");
            let name = rest[1..].split(quote).next().expect("a closing quote");
            names.insert(name.to_ascii_uppercase());
        }
    }
    names
}

#[test]
fn every_command_the_library_sends_or_its_scripts_call_is_allowed_by_default() {
    let mut needed: BTreeSet<String> = ["EVAL", "EVALSHA", "GET", "SCRIPT LOAD"]
        .map(String::from)
        .into();
    for script in Script::all() {
        needed.extend(called(script.source()));
    }
    needed.extend(called(ASSIGN_SCRIPT));
    // The scan finds what it should: a name from the prelude, one from the lists, one from reset.
    for sample in ["TIME", "ZMSCORE", "DEL"] {
        assert!(needed.contains(sample), "{sample} in {needed:?}");
    }
    let allowed: BTreeSet<String> = DEFAULT_COMMANDS.iter().map(|c| c.to_string()).collect();
    assert_eq!(
        needed, allowed,
        "the default list is exactly what the library needs"
    );
}

fn limit(name: &str, spec: &str) -> Limit {
    Limit::new(name, spec.parse::<Policy>().expect("a policy"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limiter_runs_whole_through_the_default_list() {
    let s = common::start_with_defaults(|_| {}).await;
    let store = RestStore::new(&s.url(""), TOKEN)
        .expect("a store")
        .with_namespace("allow-list");
    let id = Identifier::from("client");
    for algorithm in Algorithm::EVERY {
        let spec = match algorithm {
            Algorithm::FixedWindow => "fixed 3/1s",
            Algorithm::SlidingLog => "sliding-log 3/1s",
            Algorithm::SlidingCounter => "sliding-counter 3/1s",
            Algorithm::TokenBucket => "token-bucket 3/1s",
            Algorithm::Gcra => "gcra 3/1s",
            Algorithm::Concurrency => "concurrency 3 timeout 1s",
        };
        let l = limit(algorithm.as_str(), spec);
        let verdict = store
            .check(&[Check::single(&l, "client", 2)], TimeSource::At(T0))
            .await
            .expect("a check runs")
            .remove(0);
        assert!(verdict.allowed, "{algorithm}");
        let peeked = store.peek(&l, &id, TimeSource::At(T0)).await.unwrap();
        assert_eq!(peeked.decisions[0].remaining, 1, "{algorithm}");
        assert!(store.reset(&l, &id).await.unwrap(), "{algorithm}: reset");
    }
    // Assignments: written by the assignment script, read by GET, cleared.
    let l = limit("assigned", "fixed 3/1s");
    let tier = Assignment::Tier("gold".into());
    store.assign(&l, &id, Some(&tier), None).await.unwrap();
    let assigned = store.assignments(&l, &id).await.unwrap();
    assert_eq!(assigned, vec![(tier, None)]);
    store
        .clear_assignment(&l, &id, AssignmentKind::Tier)
        .await
        .unwrap();
    assert_eq!(store.assignments(&l, &id).await.unwrap(), vec![]);
    // Dynamic lists.
    let entry: ListEntry = "country cn".parse().unwrap();
    store
        .list_add("deny", &entry, Some(T0 + 500), T0)
        .await
        .unwrap();
    assert_eq!(store.list_entries("deny", T0).await.unwrap().len(), 1);
    assert!(store.list_remove("deny", &entry).await.unwrap());
    // Its scripts loaded ahead of traffic.
    for script in Script::all() {
        let body = serde_json::to_vec(&json!(["SCRIPT", "LOAD", script.source()])).unwrap();
        let (status, answer) = raw_post(s.addr(), "/", TOKEN, &body).await.unwrap();
        assert_eq!(status, 200, "{answer}");
        let answer: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(
            answer["result"],
            script.sha1(),
            "SCRIPT LOAD answers its SHA"
        );
    }
}

#[tokio::test]
async fn what_the_default_list_leaves_out_is_refused() {
    let s = common::start_with_defaults(|_| {}).await;
    for refused in [
        json!(["SCAN", "0"]),
        json!(["KEYS", "*"]),
        json!(["FLUSHDB"]),
        json!(["FLUSHALL"]),
        json!(["INCR", "n"]),
        json!(["PING"]),
        json!(["SCRIPT", "FLUSH"]),
        json!([
            "SCRIPT",
            "EXISTS",
            "0000000000000000000000000000000000000000"
        ]),
    ] {
        let body = serde_json::to_vec(&refused).unwrap();
        let (status, answer) = raw_post(s.addr(), "/", TOKEN, &body).await.unwrap();
        assert_eq!(status, 400, "{refused}: {answer}");
        assert!(
            answer.contains("is not allowed by this gateway"),
            "{refused}: {answer}"
        );
    }
}
