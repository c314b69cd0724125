//! `EDGELIMIT_CONFIG.global`: regions, each with its own store, and the home holding the pools of
//! the global limits (docs/design.md §9). Parsed and checked here; each error names its field.

use serde::Deserialize;

use edgelimit::global::{GlobalLimitError, RegionalLimits, MILLION};

use crate::config::{Config, ConfigError};
use crate::rules::Scope;

/// Where a store's URL and token are: the names of two secrets (or vars).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreVars {
    /// The var holding the REST URL.
    pub url_var: String,
    /// The var holding the token.
    pub token_var: String,
}

/// One region: its store, and the requests it decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    /// Its name (`eu`), in logs and `sim`'s reports.
    pub name: String,
    /// Its store.
    pub store: StoreVars,
    /// The continents (`request.cf.continent`: `EU`, `NA`, …) whose requests it decides.
    pub continents: Vec<String>,
    /// The colos (`request.cf.colo`: `SYD`, …) whose requests it decides, whatever their
    /// continent.
    pub colos: Vec<String>,
    /// Its weight in the static shares (1 unless configured).
    pub weight: u64,
}

/// The global section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    /// The home's store: the global limits' pools.
    pub home: StoreVars,
    /// The regions; a request whose place maps to none is decided in the first.
    pub regions: Vec<Region>,
    /// The share of every global limit the regions hold for good, in parts per million (half
    /// unless configured).
    pub static_share: u64,
    /// How long a bucket's lease lasts (ms).
    pub lease_ms: u64,
    /// A region every request is decided in, whatever its place: for tests, where
    /// `request.cf` is fixed.
    pub region: Option<String>,
}

/// The default share of a global limit held by the regions: half.
pub const DEFAULT_STATIC_SHARE: u64 = MILLION / 2;
/// The default life of a bucket's lease.
pub const DEFAULT_LEASE_MS: u64 = 3_000;

/// The section as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGlobal {
    home: RawStoreVars,
    regions: Vec<RawRegion>,
    static_share: Option<String>,
    lease_ms: Option<u64>,
    region: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStoreVars {
    url_var: String,
    token_var: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegion {
    name: String,
    url_var: String,
    token_var: String,
    #[serde(default)]
    continents: Vec<String>,
    #[serde(default)]
    colos: Vec<String>,
    weight: Option<u64>,
}

impl RawGlobal {
    pub(crate) fn validate(self) -> Result<Global, ConfigError> {
        let at = |field: &str| format!("global.{field}");
        let vars = |field: String, raw: RawStoreVars| -> Result<StoreVars, ConfigError> {
            for (name, value) in [("url_var", &raw.url_var), ("token_var", &raw.token_var)] {
                if value.trim().is_empty() {
                    return Err(ConfigError::at(format!("{field}.{name}"), "is empty"));
                }
            }
            Ok(StoreVars {
                url_var: raw.url_var,
                token_var: raw.token_var,
            })
        };
        let home = vars(at("home"), self.home)?;
        if self.regions.is_empty() {
            return Err(ConfigError::at(at("regions"), "lists no region"));
        }
        let mut regions: Vec<Region> = Vec::with_capacity(self.regions.len());
        for (i, raw) in self.regions.into_iter().enumerate() {
            let field = format!("global.regions[{i}]");
            if !is_region_name(&raw.name) {
                return Err(ConfigError::at(
                    format!("{field}.name"),
                    format!("`{}` must be 1–32 of a-z 0-9 - _", raw.name),
                ));
            }
            if regions.iter().any(|r| r.name == raw.name) {
                return Err(ConfigError::at(
                    format!("{field}.name"),
                    format!("region `{}` is listed twice", raw.name),
                ));
            }
            let weight = raw.weight.unwrap_or(1);
            if weight == 0 || weight > 1_000 {
                return Err(ConfigError::at(
                    format!("{field}.weight"),
                    format!("{weight} is outside 1..=1000"),
                ));
            }
            let upper = |list: Vec<String>| -> Vec<String> {
                list.into_iter()
                    .map(|c| c.trim().to_ascii_uppercase())
                    .collect()
            };
            regions.push(Region {
                store: vars(
                    field.clone(),
                    RawStoreVars {
                        url_var: raw.url_var,
                        token_var: raw.token_var,
                    },
                )?,
                name: raw.name,
                continents: upper(raw.continents),
                colos: upper(raw.colos),
                weight,
            });
        }
        let static_share = match self.static_share.as_deref() {
            None => DEFAULT_STATIC_SHARE,
            Some(text) => parse_share(text).ok_or_else(|| {
                ConfigError::at(
                    at("static_share"),
                    format!("`{text}` is not a share from `0%` to `100%`"),
                )
            })?,
        };
        let lease_ms = self.lease_ms.unwrap_or(DEFAULT_LEASE_MS);
        if !(10..=600_000).contains(&lease_ms) {
            return Err(ConfigError::at(
                at("lease_ms"),
                format!("{lease_ms} is outside 10..=600000"),
            ));
        }
        if let Some(region) = &self.region {
            if !regions.iter().any(|r| &r.name == region) {
                return Err(ConfigError::at(
                    at("region"),
                    format!("`{region}` is not one of the regions"),
                ));
            }
        }
        Ok(Global {
            home,
            regions,
            static_share,
            lease_ms,
            region: self.region,
        })
    }
}

impl Global {
    /// The index of the region deciding a request from `continent` through `colo`: the region
    /// naming the colo, else the one naming the continent, else the first (a forced `region`
    /// wins over all).
    pub fn region_of(&self, continent: Option<&str>, colo: Option<&str>) -> usize {
        if let Some(forced) = &self.region {
            return self
                .regions
                .iter()
                .position(|r| &r.name == forced)
                .unwrap_or(0);
        }
        let named = |place: Option<&str>, pick: fn(&Region) -> &[String]| {
            let place = place?.trim().to_ascii_uppercase();
            self.regions.iter().position(|r| pick(r).contains(&place))
        };
        named(colo, |r| &r.colos)
            .or_else(|| named(continent, |r| &r.continents))
            .unwrap_or(0)
    }

    /// The regions' weights, in order.
    pub fn weights(&self) -> Vec<u64> {
        self.regions.iter().map(|r| r.weight).collect()
    }
}

/// `50%`, `12.5%` or `0.5` as parts per million.
fn parse_share(text: &str) -> Option<u64> {
    let text = text.trim();
    let (number, scale) = match text.strip_suffix('%') {
        Some(percent) => (percent.trim(), 10_000.0),
        None => (text, MILLION as f64),
    };
    let value: f64 = number.parse().ok()?;
    let ppm = (value * scale).round();
    (value.is_finite() && (0.0..=MILLION as f64).contains(&ppm)).then_some(ppm as u64)
}

fn is_region_name(name: &str) -> bool {
    (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl Config {
    /// The global limits of every rule (each named once) as region `region` (an index into
    /// `global.regions`) holds them: empty without a `global` section.
    pub fn regional_limits(&self, region: usize) -> Result<RegionalLimits, GlobalLimitError> {
        let Some(global) = &self.global else {
            return Ok(RegionalLimits::default());
        };
        let mut limits: Vec<&edgelimit::Limit> = Vec::new();
        for limit in self.rules.iter().flat_map(|r| &r.limits) {
            if limit.scope == Scope::Global && !limits.iter().any(|l| l.name == limit.limit.name) {
                limits.push(&limit.limit);
            }
        }
        RegionalLimits::new(limits, &global.weights(), global.static_share, region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn global(value: serde_json::Value) -> Result<Global, ConfigError> {
        let raw: RawGlobal =
            serde_json::from_value(value).map_err(|e| ConfigError::at("global", e.to_string()))?;
        raw.validate()
    }

    fn three() -> serde_json::Value {
        json!({
            "home": {"url_var": "UPSTASH_HOME_URL", "token_var": "UPSTASH_HOME_TOKEN"},
            "regions": [
                {"name": "eu", "url_var": "EU_URL", "token_var": "EU_TOKEN", "continents": ["EU", "af"]},
                {"name": "us", "url_var": "US_URL", "token_var": "US_TOKEN", "continents": ["NA", "SA"]},
                {"name": "ap", "url_var": "AP_URL", "token_var": "AP_TOKEN", "continents": ["AS", "OC"], "colos": ["syd"]}
            ]
        })
    }

    #[test]
    fn a_request_is_decided_in_its_colos_region_else_its_continents_else_the_first() {
        let g = global(three()).unwrap();
        assert_eq!(
            (g.static_share, g.lease_ms),
            (DEFAULT_STATIC_SHARE, DEFAULT_LEASE_MS)
        );
        assert_eq!(g.region_of(Some("NA"), Some("DFW")), 1);
        assert_eq!(g.region_of(Some("AF"), None), 0);
        assert_eq!(g.region_of(Some("EU"), Some("SYD")), 2, "the colo wins");
        assert_eq!(g.region_of(Some("AN"), None), 0, "unmapped: the first");
        assert_eq!(g.region_of(None, None), 0);
        let mut forced = three();
        forced["region"] = json!("ap");
        assert_eq!(global(forced).unwrap().region_of(Some("NA"), None), 2);
    }

    #[test]
    fn shares_parse_as_percentages_or_fractions() {
        for (text, ppm) in [
            ("50%", 500_000),
            ("12.5%", 125_000),
            ("0.25", 250_000),
            ("100%", MILLION),
            ("0%", 0),
        ] {
            assert_eq!(parse_share(text), Some(ppm), "{text}");
        }
        for bad in ["150%", "-1%", "half", "NaN", "1.5"] {
            assert_eq!(parse_share(bad), None, "{bad}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let cases = [
            ("regions", json!([])),
            ("static_share", json!("200%")),
            ("lease_ms", json!(0)),
            ("region", json!("mars")),
        ];
        for (key, value) in cases {
            let mut v = three();
            v[key] = value;
            let e = global(v).unwrap_err();
            assert_eq!(e.field, format!("global.{key}"), "{e}");
        }
        let mut twice = three();
        twice["regions"][1]["name"] = json!("eu");
        assert_eq!(global(twice).unwrap_err().field, "global.regions[1].name");
        let mut weightless = three();
        weightless["regions"][2]["weight"] = json!(0);
        assert_eq!(
            global(weightless).unwrap_err().field,
            "global.regions[2].weight"
        );
    }
}
