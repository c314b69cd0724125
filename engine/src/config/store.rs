//! The store the configuration's store section names (`shards`, the REST variables, a global
//! section's regions), as the library's [`StoreSpec`]: each host builds it with the
//! configuration's `namespace` and `timeout_ms`, its secrets read through the host's own lookup
//! (a Worker's secrets, the process environment).

use edgelimit::store::{RestEndpoint, StoreSpec, StoreSpecError};

use crate::config::global::StoreVars;
use crate::config::Config;

impl Config {
    /// The Redis the configuration names: its `shards` when it lists them, else the REST store
    /// of `UPSTASH_REDIS_REST_URL`/`_TOKEN` (`None` when that URL is not set). `store` is the
    /// host's to weigh: only the Worker has Durable Objects.
    pub fn store_spec(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<StoreSpec>, StoreSpecError> {
        if self.shards.is_empty() {
            return StoreSpec::from_rest_vars(lookup);
        }
        StoreSpec::shards(
            self.shards
                .iter()
                .map(|s| (s.name.as_str(), s.url_var.as_str(), s.token_var.as_str())),
            lookup,
        )
        .map(Some)
    }

    /// With a `global` section, the home's REST endpoint and each region's (in
    /// `global.regions` order), their URLs and tokens read through `lookup`; `None` without.
    pub fn global_endpoints(
        &self,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<(RestEndpoint, Vec<RestEndpoint>)>, StoreSpecError> {
        let Some(global) = &self.global else {
            return Ok(None);
        };
        let endpoint = |name: &str, vars: &StoreVars, owner: &str| {
            RestEndpoint::from_vars(name, &vars.url_var, &vars.token_var, owner, &lookup)
        };
        let home = endpoint("home", &global.home, "global.home")?;
        let regions = global
            .regions
            .iter()
            .enumerate()
            .map(|(i, r)| {
                endpoint(
                    &r.name,
                    &r.store,
                    &format!("global.regions[{i}] \"{}\"", r.name),
                )
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Some((home, regions)))
    }
}
