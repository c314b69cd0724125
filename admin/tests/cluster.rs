//! The CLI against a Redis Cluster (`--cluster` and `redis+cluster://`): every shared behaviour
//! (common/suite.rs). Assignments live in their identifier's slot, lists in their own.

mod common;

use common::suite::Backend;
use common::{Admin, Stored, NAMESPACE};
use edgelimit::RespStore;
use edgelimit_testkit::RedisCluster;

fn with_backend(body: fn(&Backend<'_>)) {
    let cluster = RedisCluster::start(3);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = rt
        .block_on(RespStore::connect_cluster(&cluster.urls()))
        .unwrap()
        .with_namespace(NAMESPACE);
    // Both spellings of a Cluster store: all nodes in one URL, and one seed with --cluster.
    let hosts: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    let admin = Admin::new(&format!("redis+cluster://{}", hosts.join(",")));
    body(&Backend {
        admin,
        store: Box::new(store),
        rt: &rt,
        stored: Stored::Redis(cluster.nodes().iter().collect()),
    });
}

shared_suite!(with_backend);

#[test]
fn one_seed_with_cluster_finds_the_whole_cluster() {
    let cluster = RedisCluster::start(3);
    let seed = &cluster.urls()[0];
    let admin = Admin::new(seed);
    // Without --cluster the seed is a single node: a key in another slot is MOVED (a store
    // failure); with it, every identifier's slot is reached.
    let ids: Vec<String> = (0..20).map(|i| format!("198.51.100.{i}")).collect();
    for id in &ids {
        let set = admin.json(&["--cluster", "tier", "set", "per-ip", id, "pro"]);
        assert_eq!(set["changed"]["tier"], "pro");
    }
    for id in &ids {
        let get = admin.json(&["--cluster", "tier", "get", "per-ip", id]);
        assert_eq!(get["assignments"][0]["tier"], "pro", "{id}");
    }
    let nodes: Vec<_> = cluster.nodes().iter().collect();
    let keys = common::keys(&nodes);
    assert_eq!(keys.len(), ids.len(), "{keys:?}");
    assert!(
        cluster
            .nodes()
            .iter()
            .all(|n| !common::keys(&[n]).is_empty()),
        "20 identifiers land on every node"
    );
    let failures: Vec<i32> = ids
        .iter()
        .map(|id| admin.run(&["tier", "get", "per-ip", id]).code)
        .filter(|code| *code != 0)
        .collect();
    assert!(
        !failures.is_empty(),
        "without --cluster, other nodes' slots are MOVED"
    );
    assert!(failures.iter().all(|code| *code == 1), "{failures:?}");
}
