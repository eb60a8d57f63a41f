//! The work one client does in the background, counted so that `Client::shutdown` can wait for
//! it: the releases of dropped guards and of abandoned attempts, quorum requests left to finish,
//! unsubscribes, record writes, and the acquisitions in flight (which may leave such work behind
//! as they end). Also the client's closed state, which every acquisition checks.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// One client's background work. Cheap to clone; the clones count together.
#[derive(Clone, Default)]
pub(crate) struct Tasks {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    closed: AtomicBool,
    /// Work counted and not yet done.
    running: AtomicUsize,
    /// Signalled when `running` reaches zero after the client closed.
    idle: Notify,
    /// Signalled once, when the client closes.
    closing: Notify,
}

/// One piece of counted work, until dropped.
pub(crate) struct Counted {
    inner: Arc<Inner>,
}

impl Drop for Counted {
    fn drop(&mut self) {
        // SeqCst on both sides (here and in `Tasks::idle`): either this sees the close, or the
        // closing side sees the count at zero.
        if self.inner.running.fetch_sub(1, Ordering::SeqCst) == 1
            && self.inner.closed.load(Ordering::SeqCst)
        {
            self.inner.idle.notify_waiters();
        }
    }
}

impl Tasks {
    /// Counts a piece of work until the returned value is dropped.
    pub(crate) fn count(&self) -> Counted {
        self.inner.running.fetch_add(1, Ordering::SeqCst);
        Counted {
            inner: self.inner.clone(),
        }
    }

    /// Runs `work` in a task of the current Tokio runtime, counted. Without a runtime nothing
    /// runs (false): the callers' work is bounded by a lease that ends by itself.
    pub(crate) fn spawn<F>(&self, work: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let counted = self.count();
        runtime.spawn(async move {
            work.await;
            drop(counted);
        });
        true
    }

    /// Closes the client; true the first time.
    pub(crate) fn close(&self) -> bool {
        let first = !self.inner.closed.swap(true, Ordering::SeqCst);
        if first {
            self.inner.closing.notify_waiters();
        }
        first
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::SeqCst)
    }

    /// Resolves once the client is closed.
    pub(crate) async fn closed(&self) {
        let closing = self.inner.closing.notified();
        tokio::pin!(closing);
        closing.as_mut().enable();
        if !self.is_closed() {
            closing.await;
        }
    }

    /// Resolves once the client is closed and no counted work is left.
    pub(crate) async fn idle(&self) {
        self.closed().await;
        loop {
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.inner.running.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// How much counted work is left.
    pub(crate) fn running(&self) -> usize {
        self.inner.running.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt as _;

    use super::*;

    #[tokio::test]
    async fn idle_waits_for_the_work_counted_before_and_after_the_close() {
        let tasks = Tasks::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        assert!(tasks.spawn(async move {
            let _ = rx.await;
        }));
        let in_flight = tasks.count();
        assert!(tasks.close());
        assert!(!tasks.close(), "closes once");
        let mut idle = Box::pin(tasks.idle());
        assert!(idle.as_mut().now_or_never().is_none());
        drop(in_flight);
        assert!(idle.as_mut().now_or_never().is_none(), "the task runs");
        tx.send(()).expect("the task waits");
        idle.await;
        assert_eq!(tasks.running(), 0);
    }

    #[tokio::test]
    async fn closed_resolves_for_waiters_before_and_after_the_close() {
        let tasks = Tasks::default();
        let mut before = Box::pin(tasks.closed());
        assert!(before.as_mut().now_or_never().is_none());
        tasks.close();
        before.await;
        tasks.closed().await;
    }
}
