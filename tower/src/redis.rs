//! A Redis store set up as the configuration says (the `resp` feature): its key namespace and
//! its time budget, after which each limit follows its `fail` mode.

use edgelimit::{RespStore, StoreError};
use edgelimit_engine::Config;

/// Connects to Redis at `url` (`redis://host:port/`) with `config`'s `namespace` and
/// `timeout_ms`: the store several service instances share, each deciding against one quota.
pub async fn redis_store(url: &str, config: &Config) -> Result<RespStore, StoreError> {
    Ok(RespStore::connect_with_timeout(url, config.timeout)
        .await?
        .with_namespace(config.namespace.clone()))
}
