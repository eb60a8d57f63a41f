//! One attempt for many: the waiters of one process that wait for one lock wake together
//! when the holder's lease (as they last saw it) runs out; the first takes the [`Probe`] and
//! attempts, and the others wait for its outcome instead of all striking Redis at once (see
//! [`crate::wait`]). Kept with the lock's channel (`notify::Channel`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Whether a waiter of this process is attempting for the others.
#[derive(Default)]
pub(crate) struct Probing {
    out: AtomicBool,
    /// Signalled when the probe is over.
    over: Notify,
}

impl Probing {
    /// Claims the probe; `None` while another waiter has it (wait with [`over`](Self::over)).
    pub(crate) fn claim(self: &Arc<Self>) -> Option<Probe> {
        (!self.out.swap(true, Ordering::AcqRel)).then(|| Probe {
            probing: self.clone(),
        })
    }

    /// Resolves once no probe is out.
    pub(crate) async fn over(&self) {
        let over = self.over.notified();
        tokio::pin!(over);
        over.as_mut().enable();
        if self.out.load(Ordering::Acquire) {
            over.await;
        }
    }
}

/// The attempt one waiter makes for the others; over when dropped.
pub(crate) struct Probe {
    probing: Arc<Probing>,
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.probing.out.store(false, Ordering::Release);
        self.probing.over.notify_waiters();
    }
}
