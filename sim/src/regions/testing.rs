//! The regions the tests share.

use edgelimit_engine::config::global::{Global, Region, StoreVars};

fn vars(name: &str) -> StoreVars {
    StoreVars {
        url_var: format!("{name}_URL"),
        token_var: format!("{name}_TOKEN"),
    }
}

/// `eu` (Europe, Africa), `us` (the Americas) and `ap` (Asia, Oceania, and the colo SYD).
pub(crate) fn three_regions() -> Global {
    let region = |name: &str, continents: &[&str], colos: &[&str]| Region {
        name: name.to_string(),
        store: vars(&name.to_ascii_uppercase()),
        continents: continents.iter().map(|c| c.to_string()).collect(),
        colos: colos.iter().map(|c| c.to_string()).collect(),
        weight: 1,
    };
    Global {
        home: vars("HOME"),
        regions: vec![
            region("eu", &["EU", "AF"], &[]),
            region("us", &["NA", "SA"], &[]),
            region("ap", &["AS", "OC"], &["SYD"]),
        ],
        static_share: edgelimit_engine::config::global::DEFAULT_STATIC_SHARE,
        lease_ms: edgelimit_engine::config::global::DEFAULT_LEASE_MS,
        region: None,
    }
}
