//! Two instances of one service, each its own process-like layer over its own connection to one
//! real Redis, serving HTTP on loopback: under concurrent load from both sides they admit
//! exactly the quota between them (what a limiter in each process's memory cannot do), and the
//! second limit of the rule is charged only for what both admitted (all or nothing).

mod common;

use edgelimit::{Control, Identifier, TimeSource};
use edgelimit_testkit::task::{join_all, runtime};
use edgelimit_testkit::RedisServer;
use edgelimit_tower::{redis_store, Builder, Config, ConfigBuilder, LimitBuilder, RuleBuilder};

/// The quota both instances share.
const QUOTA: u64 = 100;

/// `/api/` limited per API key to `QUOTA` in an hour (GCRA: a burst of `QUOTA`, one more an
/// hour later, so no window edge falls inside the test) and per client address (a sliding log
/// of 1000 an hour).
fn config() -> Config {
    ConfigBuilder::new()
        .timeout(std::time::Duration::from_secs(2))
        .rule(
            RuleBuilder::new("api")
                .path_prefix("/api/")
                .limit(
                    LimitBuilder::new("per-key", format!("gcra 1/1h burst {QUOTA}"))
                        .identifier("header:x-api-key"),
                )
                .limit(LimitBuilder::new("per-ip", "sliding-log 1000/1h")),
        )
        .build()
        .unwrap()
}

#[test]
fn two_instances_on_one_redis_admit_exactly_the_quota_between_them() {
    let redis = RedisServer::start();
    runtime().block_on(async {
        let mut layers = Vec::new();
        let mut addrs = Vec::new();
        for _ in 0..2 {
            let config = config();
            let store = redis_store(&redis.url(), &config).await.expect("Redis");
            let layer = Builder::new(config).build(store).unwrap();
            addrs.push(common::serve(layer.clone()).await);
            layers.push(layer);
        }
        // 16 clients, 8 per instance, 50 requests each: 800 requests for a quota of 100.
        let client = reqwest::Client::new();
        let statuses: Vec<Vec<u16>> = join_all((0..16).map(|c| {
            let client = client.clone();
            let addr = addrs[c % 2];
            async move {
                let mut statuses = Vec::new();
                for _ in 0..50 {
                    let response = client
                        .get(format!("http://{addr}/api/items"))
                        .header("x-api-key", "shared")
                        .send()
                        .await
                        .expect("an answer");
                    statuses.push(response.status().as_u16());
                }
                statuses
            }
        }))
        .await;
        let admitted_by = |instance: usize| {
            statuses
                .iter()
                .enumerate()
                .filter(|(c, _)| c % 2 == instance)
                .flat_map(|(_, s)| s)
                .filter(|&&s| s == 200)
                .count() as u64
        };
        let (first, second) = (admitted_by(0), admitted_by(1));
        let all: Vec<u16> = statuses.into_iter().flatten().collect();
        let denied = all.iter().filter(|&&s| s == 429).count() as u64;
        eprintln!(
            "admitted {} of {} (quota {QUOTA}): {first} by one instance, {second} by the other",
            first + second,
            all.len()
        );
        assert_eq!(
            first + second,
            QUOTA,
            "the instances share one quota exactly"
        );
        assert_eq!(first + second + denied, 800, "nothing but 200 and 429");
        assert!(
            first > 0 && second > 0,
            "both instances admitted from the one quota"
        );
        // The per-address limit was charged for the admitted requests only.
        let edge = layers[0].edge();
        let per_ip = &edge.config().rules[0].limits[1].limit;
        let standing = edge
            .limiter()
            .store()
            .peek(per_ip, &Identifier::from("127.0.0.1"), TimeSource::Server)
            .await
            .expect("a peek");
        assert_eq!(standing.decisions[0].remaining, 1000 - QUOTA);
    });
}
