//! Waiting for a busy lock. Every mode waits here and nowhere else.
//!
//! For now a waiter polls with jittered exponential backoff, capped by the holder's remaining
//! lease (the lock is free by then at the latest). Jitter keeps many waiters from striking
//! Redis in step; the cap on the backoff keeps hand-off latency bounded.

use std::time::Duration;

use rand::Rng;

/// First pause after a busy answer.
const FIRST_PAUSE: Duration = Duration::from_millis(2);
/// Longest pause between attempts.
const MAX_PAUSE: Duration = Duration::from_millis(64);

/// The state of one caller's wait for one lock.
pub(crate) struct Waiter {
    busy_answers: u32,
}

impl Waiter {
    pub(crate) fn new() -> Self {
        Waiter { busy_answers: 0 }
    }

    /// Waits before the next attempt, never past `left` (the caller's remaining wait).
    pub(crate) async fn pause(&mut self, holder_ttl: Option<Duration>, left: Duration) {
        let step = FIRST_PAUSE
            .saturating_mul(1 << self.busy_answers.min(5))
            .min(MAX_PAUSE);
        self.busy_answers += 1;
        let mut pause = rand::rng().random_range(step / 2..=step);
        if let Some(ttl) = holder_ttl {
            pause = pause.min(ttl + Duration::from_millis(1));
        }
        tokio::time::sleep(pause.min(left)).await;
    }
}
