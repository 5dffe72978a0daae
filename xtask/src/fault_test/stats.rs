//! The Wilson score interval: how sure a rate measured over a few dozen runs is.
//!
//! A row of the campaign is a binomial experiment (each run caught or not). The plain
//! `k / n` says nothing about how far the true rate may be from it; the Wilson interval
//! does, and unlike the normal approximation it stays inside [0, 1] and is honest at
//! `k = 0` and `k = n`, the two ends the campaign lives at.

/// z for a two-sided 95% interval.
pub const Z95: f64 = 1.959964;

/// A measured rate with its 95% Wilson score interval, each in [0, 1].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// `k / n` (0 when `n` is 0).
    pub value: f64,
    /// Lower end of the interval.
    pub low: f64,
    /// Upper end of the interval.
    pub high: f64,
}

impl Rate {
    /// The rate of `k` events in `n` trials with its 95% interval. With no trial nothing
    /// is known: the interval is [0, 1].
    pub fn wilson(k: usize, n: usize) -> Rate {
        if n == 0 {
            return Rate {
                value: 0.0,
                low: 0.0,
                high: 1.0,
            };
        }
        let (k, n) = (k.min(n) as f64, n as f64);
        let p = k / n;
        let z2 = Z95 * Z95;
        let denominator = 1.0 + z2 / n;
        let center = (p + z2 / (2.0 * n)) / denominator;
        let half = Z95 / denominator * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
        Rate {
            value: p,
            low: (center - half).max(0.0),
            high: (center + half).min(1.0),
        }
    }
}

impl std::fmt::Display for Rate {
    /// `97.0% [91.5, 99.0]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.1}% [{:.1}, {:.1}]",
            self.value * 100.0,
            self.low * 100.0,
            self.high * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 5e-5
    }

    // Reference values from the closed form evaluated separately in Python (the 0/10 and
    // 10/10 ends are the textbook [0, 0.2775] and [0.7225, 1]).
    #[test]
    fn matches_reference_values() {
        let cases = [
            (0, 10, 0.0, 0.0, 0.277533),
            (10, 10, 1.0, 0.722467, 1.0),
            (95, 100, 0.95, 0.888250, 0.978456),
            (97, 100, 0.97, 0.915481, 0.989745),
            (1, 2, 0.5, 0.094531, 0.905469),
            (30, 30, 1.0, 0.886487, 1.0),
        ];
        for (k, n, value, low, high) in cases {
            let r = Rate::wilson(k, n);
            assert!(
                close(r.value, value) && close(r.low, low) && close(r.high, high),
                "{k}/{n}: got {r:?}, want [{low}, {high}]"
            );
        }
    }

    #[test]
    fn no_trial_knows_nothing() {
        assert_eq!(
            Rate::wilson(0, 0),
            Rate {
                value: 0.0,
                low: 0.0,
                high: 1.0
            }
        );
    }

    #[test]
    fn displays_percentages() {
        assert_eq!(Rate::wilson(97, 100).to_string(), "97.0% [91.5, 99.0]");
    }
}
