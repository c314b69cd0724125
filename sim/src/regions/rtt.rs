//! `--rtt`: how far each region's store is from the home's, as one-way latencies. A global
//! limit's region waits that long for a lease from the home (docs/design.md §9), so its refills
//! land late; the replay carries the latencies for the engine that models it.

use std::str::FromStr;

use edgelimit_engine::config::global::Global;

use super::known_regions;

/// One-way latency from a region to the home when `--rtt` does not say: a continent away.
pub const DEFAULT_HOME_ONE_WAY_MS: u64 = 50;
/// One-way latency from a request to its own region's store when `--rtt` does not say.
pub const DEFAULT_LOCAL_ONE_WAY_MS: u64 = 1;
/// The longest one-way latency `--rtt` takes: a minute (anything longer is a unit mistake).
pub const MAX_ONE_WAY_MS: u64 = 60_000;

/// The keys of `--rtt` that are not region names.
const HOME: &str = "home";
const LOCAL: &str = "local";

/// `--rtt` as written: `home=MS` (every region to the home), `local=MS` (a request to its own
/// region's store), `<region>=MS` (that region to the home, over `home=`), comma-separated; a
/// latency is milliseconds (`40`) or a duration (`40ms`, `1s`). Checked against a configuration
/// by [`RttSpec::resolve`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RttSpec {
    home: Option<u64>,
    local: Option<u64>,
    regions: Vec<(String, u64)>,
}

impl FromStr for RttSpec {
    type Err = String;

    fn from_str(text: &str) -> Result<RttSpec, String> {
        let mut spec = RttSpec::default();
        let mut keys: Vec<&str> = Vec::new();
        for part in text.split(',').map(str::trim) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(format!(
                    "`{part}` is not key=latency: write home=50, local=1 or <region>=40"
                ));
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(format!(
                    "`{part}` names nothing: write home=50 or <region>=40"
                ));
            }
            if keys.contains(&key) {
                return Err(format!("`{part}`: `{key}` is given twice"));
            }
            keys.push(key);
            let ms = parse_latency(value.trim()).map_err(|e| format!("`{part}`: {e}"))?;
            match key {
                HOME => spec.home = Some(ms),
                LOCAL => spec.local = Some(ms),
                region => spec.regions.push((region.to_string(), ms)),
            }
        }
        Ok(spec)
    }
}

/// `40` (ms) or a duration (`40ms`, `1s`), at most [`MAX_ONE_WAY_MS`].
fn parse_latency(text: &str) -> Result<u64, String> {
    let ms = if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<u64>()
            .map_err(|_| format!("`{text}` is too large"))?
    } else {
        edgelimit::policy::parse_window(text)?
    };
    if ms > MAX_ONE_WAY_MS {
        return Err(format!(
            "{ms} ms is more than a minute ({MAX_ONE_WAY_MS} ms), the longest one-way latency"
        ));
    }
    Ok(ms)
}

impl RttSpec {
    /// The latencies for `global`'s regions, defaults where the spec says nothing. An error
    /// names a region the configuration does not have (and lists those it has), or a region
    /// whose name is one of the keys `home` and `local`, which `--rtt` could not tell apart.
    pub fn resolve(&self, global: &Global) -> Result<Rtt, String> {
        if let Some(clash) = global
            .regions
            .iter()
            .find(|r| r.name == HOME || r.name == LOCAL)
        {
            return Err(format!(
                "--rtt: the configuration has a region named `{}`, which --rtt reads as its \
                 `{}=` key; rename the region to give it a latency of its own",
                clash.name, clash.name
            ));
        }
        let home = self.home.unwrap_or(DEFAULT_HOME_ONE_WAY_MS);
        let mut home_one_way_ms = vec![home; global.regions.len()];
        for (name, ms) in &self.regions {
            let Some(at) = global.regions.iter().position(|r| r.name == *name) else {
                return Err(format!(
                    "--rtt: `{name}={ms}`: `{name}` is not a region of the configuration (its \
                     regions: {}; or home= for all of them, local= within one)",
                    known_regions(global)
                ));
            };
            home_one_way_ms[at] = *ms;
        }
        Ok(Rtt {
            home_one_way_ms,
            local_one_way_ms: self.local.unwrap_or(DEFAULT_LOCAL_ONE_WAY_MS),
        })
    }
}

/// One-way latencies of a global replay, by region index (`global.regions`' order): each
/// region's to the home, and a request's to its own region's store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Rtt {
    home_one_way_ms: Vec<u64>,
    local_one_way_ms: u64,
}

impl Rtt {
    /// The defaults for `global`: [`DEFAULT_HOME_ONE_WAY_MS`] from every region to the home,
    /// [`DEFAULT_LOCAL_ONE_WAY_MS`] within a region.
    pub fn defaults(global: &Global) -> Rtt {
        Rtt {
            home_one_way_ms: vec![DEFAULT_HOME_ONE_WAY_MS; global.regions.len()],
            local_one_way_ms: DEFAULT_LOCAL_ONE_WAY_MS,
        }
    }

    /// One way from `region` (an index in `global.regions`) to the home, in ms; the last
    /// region's for an index past the end.
    pub fn home_one_way_ms(&self, region: usize) -> u64 {
        self.home_one_way_ms
            .get(region)
            .or(self.home_one_way_ms.last())
            .copied()
            .unwrap_or(DEFAULT_HOME_ONE_WAY_MS)
    }

    /// There and back from `region` to the home, in ms: a request waiting for a lease waits
    /// this long.
    pub fn home_round_trip_ms(&self, region: usize) -> u64 {
        2 * self.home_one_way_ms(region)
    }

    /// One way from a request to its own region's store, in ms.
    pub fn local_one_way_ms(&self) -> u64 {
        self.local_one_way_ms
    }

    /// Every region's one-way latency to the home, in region order.
    pub fn home_one_way_by_region(&self) -> &[u64] {
        &self.home_one_way_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regions::testing::three_regions;

    fn rtt(text: &str) -> Result<Rtt, String> {
        text.parse::<RttSpec>()?.resolve(&three_regions())
    }

    #[test]
    fn home_sets_every_region_and_a_region_its_own() {
        let all = rtt("home=40").unwrap();
        assert_eq!(all.home_one_way_by_region(), [40, 40, 40]);
        assert_eq!(all.local_one_way_ms(), DEFAULT_LOCAL_ONE_WAY_MS);
        let each = rtt("eu=20,us=40ms,ap=120,local=2").unwrap();
        assert_eq!(each.home_one_way_by_region(), [20, 40, 120]);
        assert_eq!(
            (each.home_round_trip_ms(2), each.local_one_way_ms()),
            (240, 2)
        );
        let mixed = rtt("ap=1s,home=30").unwrap();
        assert_eq!(mixed.home_one_way_by_region(), [30, 30, 1000]);
        assert_eq!(rtt("eu=0").unwrap().home_one_way_ms(0), 0);
        assert_eq!(
            Rtt::defaults(&three_regions()),
            "local=1"
                .parse::<RttSpec>()
                .unwrap()
                .resolve(&three_regions())
                .unwrap()
        );
        assert_eq!(Rtt::defaults(&three_regions()).home_one_way_ms(1), 50);
    }

    #[test]
    fn bad_parts_are_named() {
        for (text, says) in [
            ("home", "`home` is not key=latency"),
            ("=40", "`=40` names nothing"),
            ("home=40,home=50", "`home` is given twice"),
            ("eu=fast", "`eu=fast`: unknown window unit"),
            ("eu=2m", "more than a minute"),
            ("eu=-5", "`eu=-5`"),
            (
                "mars=40",
                "`mars` is not a region of the configuration (its regions: eu, us, ap",
            ),
        ] {
            let e = rtt(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        let mut home = three_regions();
        home.regions[1].name = "home".into();
        let e = "home=40"
            .parse::<RttSpec>()
            .unwrap()
            .resolve(&home)
            .unwrap_err();
        assert!(e.contains("region named `home`"), "{e}");
    }
}
