//! Ending a held lease on demand, as its expiry would.

use crate::channels::WAKE_ALL;
use crate::client::Client;
use crate::error::{Error, Op};
use crate::key::Kind;

/// Ends every hold of the lock `name` now, as if its lease had run out on the server, and
/// makes `client`'s watchdog renew at once, so that a holder on `client` learns it within a
/// round trip instead of at its next renewal: its [`Guard::is_held`](crate::Guard::is_held)
/// turns false, [`Guard::lost`](crate::Guard::lost) resolves, and a locked fn's body is
/// cancelled and the fn returns [`Error::LeaseLost`] (or the body goes on and sees
/// [`Lease::lost`](crate::Lease::lost), with `on_lost = "continue"`). Returns whether a hold
/// was there.
///
/// The lock's keys are deleted on every server of `client` (the holds, a read/write lock's
/// readers and a semaphore's permit slots; the fencing counter and waiting writers' intents stay, as they would).
/// Waiters, which sleep until a release is published or at the latest until the holder's
/// lease would end, are woken as that moment would wake them: a wake-up for all is
/// published on the lock's channel, so each tries once now. A holder whose watchdog is off
/// (`watchdog = false`) learns of the loss only at its lease's end, as it would.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let server = distlock::testing::TestServer::start().await?;
/// let locks = server.client().await?;
/// let guard = locks.lock("job:1").acquire().await?;
/// distlock::testing::end_lease(&locks, "job:1").await?;
/// let lost = guard.lost().await; // within a round trip
/// assert!(matches!(lost, distlock::Error::LeaseLost { .. }));
/// # Ok(()) }
/// ```
pub async fn end_lease(client: &Client, name: impl AsRef<[u8]>) -> Result<bool, Error> {
    let shared = client.inner();
    let key = shared.key(name.as_ref())?;
    let mut removed = false;
    for node in &shared.nodes.nodes {
        let mut conn = node.conn.clone();
        let deleted: i64 = redis::cmd("DEL")
            .arg(key.lock())
            .arg(key.helper_arg(Kind::Readers))
            .arg(key.helper_arg(Kind::Slots))
            .query_async(&mut conn)
            .await
            .map_err(|e| Error::redis(Op::ForceUnlock, key.name(), e))?;
        removed |= deleted > 0;
        let publish = if node.conn.sharded() {
            "SPUBLISH"
        } else {
            "PUBLISH"
        };
        redis::cmd(publish)
            .arg(key.lock())
            .arg(WAKE_ALL)
            .exec_async(&mut conn)
            .await
            .map_err(|e| Error::redis(Op::ForceUnlock, key.name(), e))?;
    }
    shared.watchdog.renew_now();
    Ok(removed)
}
