//! The conformance body (tests/common/conformance.rs) over every store. A new store joins with
//! one `conformance_tests!` line.

mod common;

use common::conformance::conformance_tests;
use edgelimit::{MemoryStore, RespStore, RestStore};
use edgelimit_testkit::{RedisCluster, RedisServer};

conformance_tests!(memory, async { ((), MemoryStore::new()) });

conformance_tests!(resp, async {
    let server = RedisServer::start();
    let store = RespStore::connect(&server.url())
        .await
        .expect("connect")
        .with_namespace("conformance");
    (server, store)
});

conformance_tests!(resp_cluster, async {
    let cluster = RedisCluster::start(3);
    let store = RespStore::connect_cluster(&cluster.urls())
        .await
        .expect("connect to the cluster")
        .with_namespace("conformance");
    (cluster, store)
});

conformance_tests!(rest_via_gateway, async {
    let server = RedisServer::start();
    let gateway = edgelimit_gateway::Gateway::start(edgelimit_gateway::Config::new(
        "127.0.0.1:0".parse().unwrap(),
        server.url(),
        "conformance-token",
    ))
    .await
    .expect("gateway starts");
    let store = RestStore::new(
        &format!("http://{}", gateway.local_addr()),
        "conformance-token",
    )
    .expect("valid URL")
    .with_namespace("conformance");
    ((server, gateway), store)
});
