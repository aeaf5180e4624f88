//! A small seedable random number generator (SplitMix64). Its whole state is one `u64`, so
//! checkpoints store it exactly, and every PE that starts from the same seed draws the same
//! numbers (the data order and the initial weights must not depend on the pipeline split).

/// SplitMix64 (Steele, Lea, Flood 2014): fast, passes BigCrush, trivially serialisable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator whose stream is fixed by `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The generator's state (restore with [`Rng::new`]).
    pub fn state(&self) -> u64 {
        self.state
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// Uniform in `0..n` (n > 0), without modulo bias (Lemire's multiply-and-reject).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "Rng::below(0)");
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box-Muller; one value per call so the state stays a single word).
    pub fn normal(&mut self) -> f64 {
        // 1 - u lies in (0, 1], so the log is finite.
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

/// SplitMix64's output function (a bijective 64-bit mixer).
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seed derived from a global seed and a name (FNV-1a of the name, mixed with the seed): each
/// parameter tensor gets its own stream, independent of which stage holds it.
pub fn seed_for(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for b in name.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    mix64(seed ^ mix64(h))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_state_restores_it() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = Rng::new(a.state());
        assert_eq!(a.next_u64(), c.next_u64());
        assert_ne!(Rng::new(1).next_u64(), Rng::new(2).next_u64());
    }

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut r = Rng::new(7);
        let mut seen = [0usize; 10];
        for _ in 0..10_000 {
            seen[r.below(10) as usize] += 1;
        }
        // Each bucket expects 1000; 800 is > 6 standard deviations away.
        assert!(seen.iter().all(|&s| s > 800), "{seen:?}");
    }

    #[test]
    fn normal_has_unit_moments() {
        let mut r = Rng::new(3);
        let n = 100_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
    }

    #[test]
    fn seeds_differ_by_name_and_by_global_seed() {
        assert_ne!(seed_for(1, "wte"), seed_for(1, "wpe"));
        assert_ne!(seed_for(1, "wte"), seed_for(2, "wte"));
        assert_eq!(seed_for(5, "h.3.qkv.w"), seed_for(5, "h.3.qkv.w"));
    }
}
