//! `--spare` and `--by`: how many clients (or requests) a suggestion may deny, exactly — a share
//! read as a decimal fraction, never through floating point, so `0.1%` of 1,000 clients is
//! exactly one.

use std::fmt;
use std::str::FromStr;

/// What a suggestion spares: a share of clients or of requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    /// At most the share of clients ever denied once.
    Clients,
    /// At most the share of requests denied.
    Requests,
}

impl fmt::Display for By {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            By::Clients => "clients",
            By::Requests => "requests",
        })
    }
}

/// A share in `[0, 1)`, as the exact fraction `numerator / denominator` its decimal text means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    numerator: u128,
    denominator: u128,
    /// Written as a percentage (`0.1%`) rather than a fraction (`0.001`).
    percent: bool,
}

impl Share {
    /// The most of `total` this share allows: `floor(total × share)`.
    pub fn of(&self, total: u64) -> u64 {
        (u128::from(total) * self.numerator / self.denominator) as u64
    }

    /// The share as a float, for reports.
    pub fn fraction(&self) -> f64 {
        self.numerator as f64 / self.denominator as f64
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scale = if self.percent { 100 } else { 1 };
        let value = self.numerator * scale;
        let whole = value / self.denominator;
        let mut rest = value % self.denominator;
        write!(f, "{whole}")?;
        if rest != 0 {
            f.write_str(".")?;
            while rest != 0 {
                rest *= 10;
                write!(f, "{}", rest / self.denominator)?;
                rest %= self.denominator;
            }
        }
        if self.percent {
            f.write_str("%")?;
        }
        Ok(())
    }
}

impl FromStr for Share {
    type Err = String;

    fn from_str(text: &str) -> Result<Share, String> {
        let bad = || format!("--spare `{text}`: give a share such as 0.1% or 0.001, below 100%");
        let trimmed = text.trim();
        let (digits, percent) = match trimmed.strip_suffix('%') {
            Some(d) => (d.trim(), true),
            None => (trimmed, false),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if (whole.is_empty() && fraction.is_empty())
            || !whole
                .bytes()
                .chain(fraction.bytes())
                .all(|b| b.is_ascii_digit())
            || fraction.len() > 18
            || whole.len() > 3
        {
            return Err(bad());
        }
        let mut numerator: u128 = 0;
        for b in whole.bytes().chain(fraction.bytes()) {
            numerator = numerator * 10 + u128::from(b - b'0');
        }
        let mut denominator = 10u128.pow(fraction.len() as u32);
        if percent {
            denominator *= 100;
        }
        if numerator >= denominator {
            return Err(bad());
        }
        Ok(Share {
            numerator,
            denominator,
            percent,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_exact_fractions() {
        let s: Share = "0.1%".parse().unwrap();
        assert_eq!(s.of(1000), 1);
        assert_eq!(s.of(999), 0);
        assert_eq!(s.to_string(), "0.1%");
        let f: Share = "0.25".parse().unwrap();
        assert_eq!(f.of(10), 2);
        assert_eq!(f.to_string(), "0.25");
        assert_eq!("0".parse::<Share>().unwrap().of(u64::MAX), 0);
    }

    #[test]
    fn shares_outside_zero_to_one_are_refused() {
        for bad in ["", "%", "1", "100%", "-1%", "abc", "0.1.2", "1e-3"] {
            assert!(bad.parse::<Share>().is_err(), "{bad}");
        }
    }
}
