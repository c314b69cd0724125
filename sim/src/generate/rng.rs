//! A small seeded generator (SplitMix64). Written out rather than taken from `rand` so a seed
//! means the same trace in every version of this tool — traces are committed and compared.

/// SplitMix64: fast, statistically fine for simulation, fully determined by its seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `(0, 1]` (never 0, so its logarithm is finite).
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }

    /// An exponential variate with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -self.unit().ln() * mean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_is_a_fixed_sequence() {
        let a: Vec<u64> = (0..3)
            .map({
                let mut r = Rng::new(7);
                move |_| r.next_u64()
            })
            .collect();
        let mut r = Rng::new(7);
        assert_eq!(a, vec![r.next_u64(), r.next_u64(), r.next_u64()]);
        let mut r = Rng::new(1);
        let mean: f64 = (0..100_000).map(|_| r.exp(10.0)).sum::<f64>() / 100_000.0;
        assert!((mean - 10.0).abs() < 0.2, "{mean}");
        assert!((0..1000).all(|_| r.below(5) < 5));
    }
}
