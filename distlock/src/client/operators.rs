//! The operators' calls on a client: who holds a lock, listing locks, and removing one by
//! force (the work itself in `inspect`).

use super::Client;
use crate::error::Error;
use crate::inspect::{self, LockInfo};

impl Client {
    /// Reads who holds a lock, in any mode, in one atomic step: the holder (host, pid, call
    /// site, when), remaining lease, re-entry count, readers, waiting writers, a semaphore's
    /// permits and their holders, fencing token and the last forced unlock. Changes nothing.
    ///
    /// On a quorum client every node is read at once, each within the
    /// [node timeout](crate::ClientBuilder::node_timeout): the lock is reported as a majority
    /// of nodes reads it (held by one holder, or free), and while no majority reads it alike
    /// (a quorum forming or coming apart) as the first node that finds it held. Fewer than a
    /// majority answering is [`Error::QuorumNotReached`].
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
    /// let info = locks.inspect("order:42").await?;
    /// if let Some(holder) = &info.holder {
    ///     println!("held by pid {:?} on {:?} since {:?}", holder.pid, holder.host, holder.acquired_at);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: impl AsRef<[u8]>) -> Result<LockInfo, Error> {
        inspect::read(self.inner(), name.as_ref()).await
    }

    /// Removes a lock whoever holds it, for an operator clearing a lock whose holder is stuck.
    /// The `reason` (required, non-empty) is logged as a `warn` event and kept beside the lock
    /// for a week with who forced it and when ([`LockInfo::last_forced_unlock`]); waiters are
    /// woken. The holder's next renewal is refused, so its guard reports the lease lost; until
    /// then it may still act as holder, which is what fencing tokens are for. Returns whether
    /// a lock was removed. On a quorum client it is removed from every node at once, each
    /// within the node timeout.
    pub async fn force_unlock(&self, name: impl AsRef<[u8]>, reason: &str) -> Result<bool, Error> {
        inspect::force_unlock(self.inner(), name.as_ref(), reason).await
    }

    /// The names of the locks held now under this client's key prefix (a `SCAN`: fine for an
    /// operator, not for a hot path), sorted.
    ///
    /// On a quorum client every node is scanned at once, each request within the
    /// [node timeout](crate::ClientBuilder::node_timeout), and a name is listed when a majority
    /// of the nodes holds it, as [`inspect`](Self::inspect) reports a lock (a hold a minority
    /// keeps holds nothing); a lock held on just a majority that includes a silent node is
    /// then not listed. Fewer than a majority answering is [`Error::QuorumNotReached`].
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
    /// for name in locks.list().await? {
    ///     println!("{name}: {:?}", locks.inspect(&name).await?.holder);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn list(&self) -> Result<Vec<String>, Error> {
        inspect::list(self.inner()).await
    }
}
