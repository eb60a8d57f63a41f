//! Waiting for a busy lock. Every mode waits here and nowhere else.
//!
//! A waiter subscribes to the lock's release channel (see [`crate::notify`]) and sleeps until
//! a release is published, re-trying within about one round trip of it. The sleep is capped
//! by the holder's remaining lease, which the acquire script returns: the lock is free by then
//! at the latest, so a lost message costs at most that, never a stall. If subscribing fails
//! (the connection is down), the waiter falls back to jittered exponential backoff.

use std::time::Duration;

use rand::Rng;

use crate::notify::{Notifier, Subscription};

/// First pause of the fallback backoff, used while no subscription is possible.
const FIRST_PAUSE: Duration = Duration::from_millis(2);
/// Longest pause of the fallback backoff.
const MAX_PAUSE: Duration = Duration::from_millis(64);
/// Sleep cap when the holder's remaining lease is unknown.
const UNKNOWN_HOLDER: Duration = Duration::from_millis(250);

/// The state of one caller's wait for one lock.
pub(crate) struct Waiter<'a> {
    notifier: &'a Notifier,
    channel: Vec<u8>,
    subscription: Option<Subscription>,
    backoffs: u32,
}

impl<'a> Waiter<'a> {
    pub(crate) fn new(notifier: &'a Notifier, channel: Vec<u8>) -> Self {
        Waiter {
            notifier,
            channel,
            subscription: None,
            backoffs: 0,
        }
    }

    /// If tasks of this process already wait for the lock, joins the queue behind them before
    /// the first attempt: otherwise a task that just released would win again at once (its
    /// attempt needs no wake-up) and starve the others.
    pub(crate) async fn queue_behind_local_waiters(&mut self, left: Duration) {
        if self.notifier.channels().has_waiters(&self.channel) {
            if let Ok(sub) = self.notifier.subscribe(&self.channel).await {
                sub.released(UNKNOWN_HOLDER.min(left)).await;
                self.subscription = Some(sub);
            }
        }
    }

    /// Waits before the next attempt, never past `left` (the caller's remaining wait).
    /// `failed` says the last attempt failed to reach Redis (so no release will be heard).
    pub(crate) async fn pause(
        &mut self,
        holder_ttl: Option<Duration>,
        failed: bool,
        left: Duration,
    ) {
        if !failed {
            match &self.subscription {
                Some(sub) => {
                    // +1 ms: PTTL rounds down, and the key must be gone when we retry.
                    let cap = holder_ttl.map_or(UNKNOWN_HOLDER, |t| t + Duration::from_millis(1));
                    sub.released(cap.min(left)).await;
                    return;
                }
                None => {
                    if let Ok(sub) = self.notifier.subscribe(&self.channel).await {
                        // Subscribed now; a release between the last attempt and the
                        // subscription was not heard, so try again at once.
                        self.subscription = Some(sub);
                        return;
                    }
                }
            }
        }
        let step = FIRST_PAUSE
            .saturating_mul(1 << self.backoffs.min(5))
            .min(MAX_PAUSE);
        self.backoffs += 1;
        let mut pause = rand::rng().random_range(step / 2..=step);
        if let Some(ttl) = holder_ttl {
            pause = pause.min(ttl + Duration::from_millis(1));
        }
        tokio::time::sleep(pause.min(left)).await;
    }
}
