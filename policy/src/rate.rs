//! Per-session rate limits: calls started in the last minute, and calls in progress.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
pub struct RateState {
    started: VecDeque<Instant>,
    in_flight: u32,
}

impl RateState {
    /// Records the start of a call, or says which limit it would break.
    pub fn start(&mut self, now: Instant, per_minute: u32, concurrent: u32) -> Result<(), String> {
        while let Some(t) = self.started.front() {
            if now.duration_since(*t) >= Duration::from_secs(60) {
                self.started.pop_front();
            } else {
                break;
            }
        }
        if self.in_flight >= concurrent {
            return Err(format!(
                "rate limit: this session already has {} calls in progress (limits.concurrent_requests = {concurrent})",
                self.in_flight
            ));
        }
        if self.started.len() as u32 >= per_minute {
            return Err(format!(
                "rate limit: this session made {} calls in the last minute (limits.requests_per_minute = {per_minute})",
                self.started.len()
            ));
        }
        self.started.push_back(now);
        self.in_flight += 1;
        Ok(())
    }

    pub fn finish(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_is_named() {
        let t0 = Instant::now();
        let mut r = RateState::default();
        r.start(t0, 2, 10).unwrap();
        r.start(t0, 2, 10).unwrap();
        let e = r.start(t0, 2, 10).unwrap_err();
        assert!(e.contains("limits.requests_per_minute = 2"), "{e}");
        // A minute later the window has moved on.
        r.start(t0 + Duration::from_secs(61), 2, 10).unwrap();

        let mut r = RateState::default();
        r.start(t0, 100, 1).unwrap();
        let e = r.start(t0, 100, 1).unwrap_err();
        assert!(e.contains("limits.concurrent_requests = 1"), "{e}");
        r.finish();
        r.start(t0, 100, 1).unwrap();
    }
}
