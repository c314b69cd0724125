//! A throwaway Redis Cluster: `redis-server` nodes with cluster mode on, joined by
//! `redis-cli --cluster create`, all on free loopback ports, killed on drop.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::net::Ports;
use crate::redis::{RedisServer, START_TIMEOUT};
use crate::resp::Reply;
use crate::wait;

/// A Redis Cluster of `n` primaries (no replicas), each a [`RedisServer`] with
/// `--cluster-enabled yes`, joined with `redis-cli --cluster create`. Killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts `n` (≥ 3, as `redis-cli --cluster create` demands) nodes, assigns all slots and
    /// waits until every node reports `cluster_state:ok`.
    pub fn start(n: usize) -> RedisCluster {
        RedisCluster::start_with_replicas(n, 0)
    }

    /// Starts `primaries` (≥ 3) primaries with `replicas` replicas each (so a test can fail one
    /// over), and waits until every node reports `cluster_state:ok`.
    pub fn start_with_replicas(primaries: usize, replicas: usize) -> RedisCluster {
        assert!(primaries >= 3, "a Redis Cluster needs at least 3 primaries");
        let n = primaries * (1 + replicas);
        let cluster_args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "5000",
        ]
        .map(String::from)
        .to_vec();
        let nodes: Vec<RedisServer> = (0..n)
            .map(|_| {
                // The cluster bus listens on port + 10000: both must be free.
                RedisServer::start_on(Ports::WithClusterBus, cluster_args.clone())
                    .unwrap_or_else(|e| panic!("cluster node did not start: {e}"))
            })
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli ({e}); install redis-tools"));
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok();
        cluster
    }

    fn wait_ok(&self) {
        let ok = wait::until(START_TIMEOUT, Duration::from_millis(50), || {
            self.nodes.iter().all(|n| {
                matches!(n.command(&["CLUSTER", "INFO"]),
                    Ok(Reply::Bulk(info)) if String::from_utf8_lossy(&info).contains("cluster_state:ok"))
            })
        });
        assert!(ok, "cluster did not reach cluster_state:ok");
    }

    /// One URL per node, `redis://127.0.0.1:<port>/`: the seed list for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The nodes, for per-node commands (`SCAN`, `SCRIPT FLUSH`, …).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }
}
