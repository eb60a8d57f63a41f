//! Testing code that takes locks (feature `testing`, for `[dev-dependencies]`): a real
//! throwaway server per test, the faults a lock must survive on demand, and assertions about
//! who holds what. Nothing here is a fake: every fault acts on a real server process and real
//! connections, and the lock takes the same paths as in production.
//!
//! * [`TestServer`] starts a `redis-server` (or `valkey-server`: [`server_binary`] says which)
//!   on a free loopback port, keeping nothing on disk, and stops it when dropped;
//!   [`TestQuorum`] starts several for a Redlock client, [`TestCluster`] a Redis Cluster.
//!   Each test gets its own, so tests run in parallel.
//! * Faults: [`end_lease`] ends a held lease now, as its expiry would (the holder's guard
//!   reports it lost, a locked fn's body is cancelled); [`TestServer::pause`] /
//!   [`resume`](TestServer::resume) make the server stop answering without closing anything;
//!   [`TestServer::restart`] brings it back empty; [`TestServer::kill`];
//!   [`FaultProxy`] between client and server loses replies, goes silent, adds latency.
//! * Assertions: [`lock_state`] (who holds a lock, in which mode, with which token, how many
//!   wait), [`wait_for_waiters`].
//! * Locked fns against a test's own server: [`scope_default`](crate::scope_default) makes a
//!   client the default of the locked fns a future calls, for that task only.
//!
//! ```no_run
//! use distlock::testing::{end_lease, lock_state, TestServer};
//!
//! #[tokio::test]
//! async fn a_lost_lease_is_reported() -> Result<(), Box<dyn std::error::Error>> {
//!     let server = TestServer::start().await?;
//!     let locks = server.client().await?;
//!     let guard = locks.lock("job:1").acquire().await?;
//!     assert!(lock_state(&locks, "job:1").await?.is_held_by(&guard));
//!
//!     end_lease(&locks, "job:1").await?;
//!     guard.lost().await;
//!     assert!(!guard.is_held());
//!     Ok(())
//! }
//! ```
//!
//! The guide: [Testing](crate::guide::testing).

mod binary;
mod cluster;
mod faults;
mod locks;
mod process;
mod proxy;
mod quorum;
mod server;

pub use binary::{server_binary, SERVER_ENV};
pub use cluster::{TestCluster, TestClusterBuilder};
pub use faults::end_lease;
pub use locks::{lock_state, wait_for_waiters, LockState};
pub use process::spawn_process;
pub use proxy::FaultProxy;
pub use quorum::TestQuorum;
pub use server::{TestServer, TestServerBuilder};

/// Why a throwaway server did not start or take a fault: one line saying what to do (install
/// a server, set [`SERVER_ENV`]) or what the server said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    message: String,
}

impl ServerError {
    pub(crate) fn new(message: impl Into<String>) -> ServerError {
        ServerError {
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ServerError {}
