//! What a test asserts about a lock: who holds it, in which mode, with which token, and who
//! waits, read through the inspection facade.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::client::Client;
use crate::error::Error;
use crate::guard::Guard;
use crate::inspect::LockInfo;
use crate::mode::LockMode;

/// Between two looks of [`wait_for_waiters`]: no event tells a test that a task of its
/// own started to wait, short of one in every acquisition.
const LOOK_EVERY: Duration = Duration::from_millis(1);

/// A lock as a test sees it: [`Client::inspect`]'s reading of the servers, and the tasks of
/// this client that wait for it. From [`lock_state`].
///
/// ```no_run
/// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
/// use distlock::{testing::lock_state, LockMode};
///
/// let guard = locks.write("doc:7").acquire().await?;
/// let state = lock_state(&locks, "doc:7").await?;
/// assert_eq!(state.mode(), Some(LockMode::Write));
/// assert!(state.is_held_by(&guard));
/// assert_eq!(state.waiters(), 0);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockState {
    info: LockInfo,
    waiters: usize,
}

impl LockState {
    /// Whether anyone holds the lock.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.info.is_held()
    }

    /// The mode it is held in (`None`: free).
    #[must_use]
    pub fn mode(&self) -> Option<LockMode> {
        self.info.mode
    }

    /// Whether `guard`'s hold is one of the lock's holds now: its exclusive holder, one of its
    /// readers, or a semaphore permit's holder. False once the lease ended, whatever the guard still believes.
    #[must_use]
    pub fn is_held_by(&self, guard: &Guard) -> bool {
        // A setnx value carries a description of its holder after a tab (see `identity`);
        // inspection reports the token before it.
        let owner = guard.owner();
        let owner = owner.split_once('\t').map_or(owner, |(token, _)| token);
        self.info.holder.as_ref().is_some_and(|h| h.owner == owner)
            || self.info.readers.iter().any(|r| r.owner == owner)
            || self
                .info
                .permit_holders
                .iter()
                .any(|p| p.holder.owner == owner)
    }

    /// How many owners hold it: 1 for an exclusive hold, the readers of a read lock, the
    /// holders of a semaphore's permits; 0 when it is free.
    #[must_use]
    pub fn holders(&self) -> usize {
        if !self.is_held() {
            0
        } else if !self.info.readers.is_empty() {
            self.info.readers.len()
        } else if !self.info.permit_holders.is_empty() {
            self.info.permit_holders.len()
        } else {
            1
        }
    }

    /// The holder's fencing token, when it took the lock with fencing.
    #[must_use]
    pub fn fencing_token(&self) -> Option<crate::FencingToken> {
        self.is_held().then_some(self.info.fencing_token).flatten()
    }

    /// Tasks of the client read through that wait for the lock now (subscribed to its
    /// release). Waiters in other processes are not counted, except writers waiting for a
    /// read/write lock: see [`waiting_writers`](Self::waiting_writers).
    #[must_use]
    pub fn waiters(&self) -> usize {
        self.waiters
    }

    /// Writers of any process waiting for a read/write lock (they keep new readers out).
    #[must_use]
    pub fn waiting_writers(&self) -> usize {
        self.info.waiting_writers.len()
    }

    /// Everything [`Client::inspect`] read: remaining lease, holder's host, pid and call
    /// site, re-entry count, readers, the last forced unlock.
    #[must_use]
    pub fn info(&self) -> &LockInfo {
        &self.info
    }
}

/// Reads the lock `name` on `client`'s servers (one [`Client::inspect`]) and counts
/// `client`'s tasks that wait for it.
pub async fn lock_state(client: &Client, name: impl AsRef<[u8]>) -> Result<LockState, Error> {
    let name = name.as_ref();
    let info = client.inspect(name).await?;
    Ok(LockState {
        info,
        waiters: waiting(client, name)?,
    })
}

/// Waits until at least `n` tasks of `client` wait for the lock `name` (a test's "the
/// second caller is now queued"), looking every millisecond; false if that did not happen
/// `within`.
///
/// ```no_run
/// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
/// use std::time::Duration;
///
/// let guard = locks.lock("job:1").acquire().await?;
/// let second = locks.clone();
/// let waiter = tokio::spawn(async move { second.lock("job:1").acquire().await });
/// assert!(distlock::testing::wait_for_waiters(&locks, "job:1", 1, Duration::from_secs(5)).await?);
/// guard.release().await?;
/// let next = waiter.await.expect("no panic")?; // the waiter gets it
/// # drop(next); Ok(()) }
/// ```
pub async fn wait_for_waiters(
    client: &Client,
    name: impl AsRef<[u8]>,
    n: usize,
    within: Duration,
) -> Result<bool, Error> {
    let deadline = Instant::now() + within;
    loop {
        if waiting(client, name.as_ref())? >= n {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

fn waiting(client: &Client, name: &[u8]) -> Result<usize, Error> {
    let key = client.inner().key(name)?;
    let channels = client.inner().notifier.channels().lock();
    Ok(channels
        .get(key.lock())
        .map_or(0, |ch| ch.waiters.load(Ordering::Acquire)))
}
