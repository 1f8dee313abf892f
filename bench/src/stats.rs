//! Percentiles and formatting shared by the benchmarks.

use std::time::Duration;

/// Sorted samples.
pub struct Samples(Vec<Duration>);

impl Samples {
    pub fn new(mut v: Vec<Duration>) -> Samples {
        v.sort();
        Samples(v)
    }

    pub fn pct(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.0.len() - 1) as f64 * p).round() as usize;
        self.0[i]
    }

    pub fn p50(&self) -> Duration {
        self.pct(0.50)
    }

    pub fn p99(&self) -> Duration {
        self.pct(0.99)
    }
}

pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
