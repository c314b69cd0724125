//! The conformance body (tests/common/conformance.rs) over every store. A new store joins with
//! one `conformance_tests!` line.

mod common;

use common::conformance::conformance_tests;
use edgelimit::{MemoryStore, RespStore};
use edgelimit_testkit::{GatewayServer, RedisCluster, RedisServer};

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
    let server = GatewayServer::start("conformance-token").await;
    let store = server.rest_store().with_namespace("conformance");
    (server, store)
});
