//! A Redis store set up as the configuration says (the `resp` feature): its key namespace and
//! its time budget, after which each limit follows its `fail` mode. The URL is read and the store
//! built by the library's [`StoreSpec`], as in every host.

use edgelimit::store::{StoreSpec, StoreSpecError};
use edgelimit::Control;
use edgelimit_engine::Config;

/// Connects to Redis at `url` (`redis://host:port/`, `redis+cluster://host:port,…`) with
/// `config`'s `namespace` and `timeout_ms`: the store several service instances share, each
/// deciding against one quota. An error says whether the URL was wrong or Redis did not answer,
/// with any password in it redacted.
pub async fn redis_store(url: &str, config: &Config) -> Result<Box<dyn Control>, StoreSpecError> {
    StoreSpec::parse(url)?
        .connect(&config.namespace, config.timeout)
        .await
}
