//! What the library tells a service about its locks: `tracing` spans and events (always on,
//! free when no subscriber listens) and, with the `metrics` feature, measurements through the
//! `metrics` facade.
//!
//! Everything is labelled by the lock's **mode** and its **label**: the name template of an
//! attribute (`key = "order:<id>"`), or what [`LockRequest::label`](crate::LockRequest::label) set.
//! The rendered lock name can carry user data (an e-mail address, an order number), so it
//! appears in traces only where the caller opted in
//! ([`LockRequest::record_name`](crate::LockRequest::record_name), `record_name = true` on an
//! attribute), and never in metrics, whose label values must stay few.
//!
//! | metric (with `metrics`)             | kind      | labels                 |
//! |-------------------------------------|-----------|------------------------|
//! | `distlock_acquire_seconds`          | histogram | mode, label, outcome   |
//! | `distlock_hold_seconds`             | histogram | mode, label            |
//! | `distlock_locks_held`               | gauge     | mode, label            |
//! | `distlock_renewals_failed_total`    | counter   | mode, label            |
//! | `distlock_leases_lost_total`        | counter   | mode, label            |
//! | `distlock_releases_refused_total`   | counter   | mode, label            |
//! | `distlock_forced_unlocks_total`     | counter   | mode                   |
//!
//! `outcome` is `acquired`, `busy` (one attempt, refused), `timeout` (waited in vain) or
//! `error`. `label` is the label, `-` when none was set.

use std::borrow::Cow;
use std::time::Duration;

use tracing::Span;

use crate::token::FencingToken;

/// The label of a lock without one.
pub(crate) const NO_LABEL: &str = "-";

/// Who is taking a lock, for traces and metrics. One per acquisition, shared by its guard,
/// its lease and its watchdog entry.
#[derive(Debug, PartialEq)]
pub(crate) struct Labels {
    pub(crate) mode: &'static str,
    /// The name template or the caller's label; never the rendered name unless the caller
    /// made it the label.
    pub(crate) label: Cow<'static, str>,
    /// The rendered name, only when the caller opted in.
    pub(crate) name: Option<Box<str>>,
    /// The locked fn's path (attributes only).
    pub(crate) site: Option<&'static str>,
}

/// How an acquisition ended.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Acquired,
    Busy,
    Timeout,
    Error,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Busy => "busy",
            Outcome::Timeout => "timeout",
            Outcome::Error => "error",
        }
    }
}

impl Labels {
    /// The labels of an acquisition that sets none (no label, no name recorded, no locked fn):
    /// one shared value per mode and thread, so the usual acquisition allocates none.
    pub(crate) fn unlabelled(mode: &'static str) -> std::sync::Arc<Labels> {
        thread_local! {
            static LAST: std::cell::RefCell<Option<std::sync::Arc<Labels>>> =
                const { std::cell::RefCell::new(None) };
        }
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            match &*last {
                Some(labels) if labels.mode == mode => labels.clone(),
                _ => {
                    let labels = std::sync::Arc::new(Labels {
                        mode,
                        label: Cow::Borrowed(NO_LABEL),
                        name: None,
                        site: None,
                    });
                    *last = Some(labels.clone());
                    labels
                }
            }
        })
    }

    /// The span of one acquisition. Its fields are filled in as the acquisition ends, so one
    /// span carries the whole story: what, where from, how long, how many tries, which token.
    pub(crate) fn acquire_span(&self) -> Span {
        tracing::info_span!(
            "distlock.acquire",
            mode = self.mode,
            label = %self.label,
            name = self.name.as_deref(),
            r#fn = self.site,
            outcome = tracing::field::Empty,
            waited_ms = tracing::field::Empty,
            attempts = tracing::field::Empty,
            fencing_token = tracing::field::Empty,
        )
    }

    /// Closes an acquisition: fills the span, logs the outcome at a level a service can keep
    /// on (busy and timeout are `info`: they say work was not done; success is `debug`).
    pub(crate) fn acquired(
        &self,
        span: &Span,
        outcome: Outcome,
        waited: Duration,
        attempts: u32,
        fence: Option<FencingToken>,
        error: Option<&crate::error::Error>,
    ) {
        span.record("outcome", outcome.as_str());
        span.record("waited_ms", waited.as_millis() as u64);
        span.record("attempts", attempts);
        let fence = fence.map(FencingToken::get);
        if let Some(fence) = fence {
            span.record("fencing_token", fence);
        }
        let _entered = span.enter();
        match outcome {
            Outcome::Acquired => tracing::debug!(fencing_token = fence, "lock acquired"),
            Outcome::Busy => tracing::info!("lock busy"),
            Outcome::Timeout => tracing::info!(
                waited_ms = waited.as_millis() as u64,
                "lock still busy after waiting"
            ),
            Outcome::Error => match error {
                Some(e) => tracing::warn!(error = %e, "lock not acquired"),
                None => tracing::warn!("lock not acquired"),
            },
        }
        #[cfg(feature = "metrics")]
        {
            metrics::histogram!(
                "distlock_acquire_seconds",
                "mode" => self.mode,
                "label" => self.label.clone(),
                "outcome" => outcome.as_str(),
            )
            .record(waited.as_secs_f64());
            if let Outcome::Acquired = outcome {
                metrics::gauge!("distlock_locks_held", "mode" => self.mode, "label" => self.label.clone())
                    .increment(1.0);
            }
        }
    }

    /// The hold, taken at `acquired_at`, ended on this side (released, dropped or given up).
    /// Only a measurement reads the clock: without one, every cycle would pay for it.
    pub(crate) fn unheld(&self, acquired_at: std::time::Instant) {
        #[cfg(feature = "metrics")]
        {
            metrics::gauge!("distlock_locks_held", "mode" => self.mode, "label" => self.label.clone())
                .decrement(1.0);
            metrics::histogram!("distlock_hold_seconds", "mode" => self.mode, "label" => self.label.clone())
                .record(acquired_at.elapsed().as_secs_f64());
        }
        #[cfg(not(feature = "metrics"))]
        let _ = acquired_at;
    }

    /// A release the server answered, of a hold taken at `acquired_at`. How long it was held
    /// (until now) is read from the clock only for an event that is recorded.
    pub(crate) fn released(&self, acquired_at: std::time::Instant, released: bool) {
        let held_ms = || acquired_at.elapsed().as_millis() as u64;
        if released {
            if tracing::enabled!(tracing::Level::DEBUG) {
                let held_ms = held_ms();
                tracing::debug!(mode = self.mode, label = %self.label, name = self.name.as_deref(), r#fn = self.site, held_ms, "lock released");
            }
        } else {
            let held_ms = held_ms();
            // The lock was no longer ours: whatever ran after the loss was unprotected.
            tracing::warn!(mode = self.mode, label = %self.label, name = self.name.as_deref(), r#fn = self.site, held_ms, "release refused: the lock was no longer held");
            #[cfg(feature = "metrics")]
            metrics::counter!("distlock_releases_refused_total", "mode" => self.mode, "label" => self.label.clone())
                .increment(1);
        }
    }

    /// A renewal got no usable answer; it is retried while the lease lasts.
    pub(crate) fn renewal_failed(&self) {
        tracing::warn!(mode = self.mode, label = %self.label, name = self.name.as_deref(), r#fn = self.site, "lease renewal failed; retrying while the lease lasts");
        #[cfg(feature = "metrics")]
        metrics::counter!("distlock_renewals_failed_total", "mode" => self.mode, "label" => self.label.clone())
            .increment(1);
    }

    /// The lease was lost: refused by the server, or it ran out before a renewal succeeded.
    pub(crate) fn lease_lost(&self) {
        tracing::warn!(mode = self.mode, label = %self.label, name = self.name.as_deref(), r#fn = self.site, "lease lost: the lock may be held by another owner now");
        #[cfg(feature = "metrics")]
        metrics::counter!("distlock_leases_lost_total", "mode" => self.mode, "label" => self.label.clone())
            .increment(1);
    }
}

/// An operator removed a lock by force.
pub(crate) fn forced_unlock(mode: Option<&'static str>, name: &str, reason: &str) {
    // The name is the operator's own input here, not a value from a request.
    tracing::warn!(mode, name, reason, "lock forcibly unlocked");
    #[cfg(feature = "metrics")]
    metrics::counter!("distlock_forced_unlocks_total", "mode" => mode.unwrap_or(NO_LABEL))
        .increment(1);
}
