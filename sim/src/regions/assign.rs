//! `--assign-regions eu=0.5,us=0.3,ap=0.2`: a region for each request the trace places nowhere,
//! by a stable hash of its client, in the fractions given.

use std::str::FromStr;

use edgelimit_engine::config::global::Global;
use sha2::{Digest, Sha256};

use super::known_regions;

/// `--assign-regions` as written: region names and their fractions, in order. Checked against
/// a configuration by [`AssignSpec::resolve`].
#[derive(Debug, Clone, PartialEq)]
pub struct AssignSpec {
    parts: Vec<(String, f64)>,
}

impl FromStr for AssignSpec {
    type Err = String;

    /// `name=fraction` pairs, comma-separated; a fraction is a positive number (`0.5`) or
    /// percentage (`50%`). They need not sum to 1: each region gets its fraction of their sum.
    fn from_str(text: &str) -> Result<AssignSpec, String> {
        let mut parts: Vec<(String, f64)> = Vec::new();
        for part in text.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(format!(
                    "`{text}` has an empty part: write name=fraction pairs, e.g. eu=0.5,us=0.5"
                ));
            }
            let Some((name, value)) = part.split_once('=') else {
                return Err(format!("`{part}` has no fraction: write {part}=0.5"));
            };
            let name = name.trim();
            if name.is_empty() {
                return Err(format!("`{part}` names no region"));
            }
            let fraction = parse_fraction(value.trim())
                .ok_or_else(|| format!("`{part}`: `{}` is not a number", value.trim()))?;
            if !(fraction > 0.0 && fraction.is_finite()) {
                return Err(format!("`{part}`: a fraction must be positive"));
            }
            if parts.iter().any(|(n, _)| n == name) {
                return Err(format!("`{part}`: region `{name}` is given twice"));
            }
            parts.push((name.to_string(), fraction));
        }
        Ok(AssignSpec { parts })
    }
}

/// `0.5` or `50%`.
fn parse_fraction(text: &str) -> Option<f64> {
    match text.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().ok().map(|p| p / 100.0),
        None => text.parse().ok(),
    }
}

impl AssignSpec {
    /// The assignment over `global`'s regions; an error names the part whose region the
    /// configuration does not have, and lists the ones it has.
    pub fn resolve(&self, global: &Global) -> Result<Assignment, String> {
        let total: f64 = self.parts.iter().map(|(_, f)| f).sum();
        let mut cuts = Vec::with_capacity(self.parts.len());
        let mut sum = 0.0;
        for (name, fraction) in &self.parts {
            let Some(region) = global.regions.iter().position(|r| r.name == *name) else {
                return Err(format!(
                    "--assign-regions: `{name}={fraction}`: `{name}` is not a region of the \
                     configuration (its regions: {})",
                    known_regions(global)
                ));
            };
            sum += fraction;
            // A hash below `cut` falls here (the float-to-int cast saturates at the top).
            let cut = (sum / total * TWO_POW_64) as u64;
            cuts.push((cut, region as u32));
        }
        if let Some(last) = cuts.last_mut() {
            last.0 = u64::MAX;
        }
        Ok(Assignment { cuts })
    }
}

const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// Regions by a stable hash of a client: the first 8 bytes of its SHA-256, as a big-endian
/// number, against the fractions' cumulative cuts — the same client lands in the same region
/// in every run and version, and clients spread in the fractions given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    /// The upper end (exclusive, but `u64::MAX` for the last) of each region's hash range.
    cuts: Vec<(u64, u32)>,
}

impl Assignment {
    /// The region (index in `global.regions`) of the client `key`.
    pub fn region_of(&self, key: &[u8]) -> u32 {
        let digest = Sha256::digest(key);
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        let hash = u64::from_be_bytes(first);
        self.cuts
            .iter()
            .find(|(cut, _)| hash < *cut)
            .or(self.cuts.last())
            .map_or(0, |(_, region)| *region)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regions::testing::three_regions;

    #[test]
    fn bad_parts_are_named() {
        for (text, says) in [
            ("eu", "`eu` has no fraction"),
            ("eu=0.5,", "has an empty part"),
            ("=0.5", "names no region"),
            ("eu=half", "`half` is not a number"),
            ("eu=0", "must be positive"),
            ("eu=-0.5", "must be positive"),
            ("eu=inf", "must be positive"),
            ("eu=0.5,eu=0.5", "`eu` is given twice"),
        ] {
            let e = text.parse::<AssignSpec>().unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        let e = "eu=0.5,mars=0.5"
            .parse::<AssignSpec>()
            .unwrap()
            .resolve(&three_regions())
            .unwrap_err();
        assert!(
            e.contains("`mars=0.5`") && e.contains("its regions: eu, us, ap"),
            "{e}"
        );
    }

    #[test]
    fn the_same_client_lands_in_the_same_region_in_the_fractions_given() {
        let spec: AssignSpec = "eu=0.5,us=30%,ap=0.2".parse().unwrap();
        let assign = spec.resolve(&three_regions()).unwrap();
        let mut counts = [0u32; 3];
        for i in 0..100_000u32 {
            let key = format!("198.51.{}.{}", i / 256, i % 256);
            let region = assign.region_of(key.as_bytes());
            assert_eq!(region, assign.region_of(key.as_bytes()));
            counts[region as usize] += 1;
        }
        for (count, expected) in counts.iter().zip([50_000.0, 30_000.0, 20_000.0]) {
            assert!((f64::from(*count) - expected).abs() < 1_000.0, "{counts:?}");
        }
        // Fractions need not sum to 1: 1 and 3 are a quarter and three quarters.
        let spec: AssignSpec = "us=1,ap=3".parse().unwrap();
        let assign = spec.resolve(&three_regions()).unwrap();
        let ap = (0..10_000u32)
            .filter(|i| assign.region_of(&i.to_be_bytes()) == 2)
            .count();
        assert!((7_300..7_700).contains(&ap), "{ap}");
    }

    #[test]
    fn the_hash_is_the_first_eight_bytes_of_sha256() {
        // Digests from coreutils' sha256sum, not from this code; the cuts are at 0x80… (half)
        // and 0xc0… (three quarters).
        // printf 198.51.100.1 | sha256sum → 7f60d869…: just below half, `eu`.
        // printf 192.0.2.2 | sha256sum → 9a6b2936…: `us`.
        // printf 203.0.113.7 | sha256sum → fec52565…: `ap`.
        let spec: AssignSpec = "eu=0.5,us=0.25,ap=0.25".parse().unwrap();
        let assign = spec.resolve(&three_regions()).unwrap();
        assert_eq!(assign.region_of(b"198.51.100.1"), 0);
        assert_eq!(assign.region_of(b"192.0.2.2"), 1);
        assert_eq!(assign.region_of(b"203.0.113.7"), 2);
    }
}
