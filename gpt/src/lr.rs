//! Learning rate: linear warm-up, then cosine decay to a floor.

/// Warm-up over `warmup` steps to `max_lr`, cosine decay to `min_lr` at step `total`, then flat.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LrSchedule {
    pub max_lr: f32,
    pub min_lr: f32,
    pub warmup: usize,
    pub total: usize,
}

impl LrSchedule {
    /// The rate of 0-based step `step`.
    pub fn at(&self, step: usize) -> f32 {
        if step < self.warmup {
            // (step + 1) so that the first step already moves the weights.
            return self.max_lr * (step + 1) as f32 / self.warmup as f32;
        }
        if step >= self.total || self.total <= self.warmup {
            return self.min_lr;
        }
        let ratio = (step - self.warmup) as f64 / (self.total - self.warmup) as f64;
        let coeff = 0.5 * (1.0 + (std::f64::consts::PI * ratio).cos());
        (self.min_lr as f64 + coeff * (self.max_lr - self.min_lr) as f64) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: LrSchedule = LrSchedule {
        max_lr: 1e-3,
        min_lr: 1e-4,
        warmup: 10,
        total: 110,
    };

    fn close(a: f32, b: f32) -> bool {
        (a - b).abs() <= 1e-9
    }

    #[test]
    fn warm_up_is_linear_and_reaches_the_peak() {
        assert!(close(S.at(0), 1e-4));
        assert!(close(S.at(4), 5e-4));
        assert!(close(S.at(9), 1e-3));
    }

    #[test]
    fn cosine_decays_from_peak_to_floor() {
        assert!(close(S.at(10), 1e-3));
        // Halfway through the decay: the mean of peak and floor.
        assert!(close(S.at(60), 5.5e-4));
        // A quarter of the way: floor + (1 + cos(pi/4)) / 2 * (peak - floor).
        let q = 1e-4 + (1.0 + (std::f32::consts::FRAC_PI_4).cos()) / 2.0 * 9e-4;
        assert!(close(S.at(35), q), "{} vs {q}", S.at(35));
        assert!(close(S.at(110), 1e-4));
        assert!(close(S.at(1000), 1e-4));
        for s in 10..110 {
            assert!(S.at(s + 1) <= S.at(s));
        }
    }

    #[test]
    fn no_warm_up_starts_at_the_peak() {
        let s = LrSchedule { warmup: 0, ..S };
        assert!(close(s.at(0), 1e-3));
    }
}
