//! Several independent throwaway servers: the masters of a Redlock quorum.

use std::ops::{Index, IndexMut};

use super::{ServerError, TestServer, TestServerBuilder};
use crate::client::{Client, ClientBuilder};
use crate::error::Error;

/// `n` independent [`TestServer`]s for a quorum ([`Client::quorum`]) client; each can be
/// paused, killed or restarted on its own (`quorum[2].pause()`). Dropping it stops them all.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::testing::TestQuorum;
///
/// let mut nodes = TestQuorum::start(3).await?;
/// let locks = nodes.client().await?;
/// nodes[0].kill(); // 2 of 3 still make a majority
/// let guard = locks.lock("job:1").acquire().await?;
/// # drop(guard); Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestQuorum {
    servers: Vec<TestServer>,
}

impl TestQuorum {
    /// Starts `n` servers with the default settings, concurrently.
    pub async fn start(n: usize) -> Result<TestQuorum, ServerError> {
        Self::start_with(n, &TestServer::builder()).await
    }

    /// Starts `n` servers, each as `builder` says, concurrently.
    pub async fn start_with(
        n: usize,
        builder: &TestServerBuilder,
    ) -> Result<TestQuorum, ServerError> {
        let starts = (0..n).map(|_| builder.clone().start());
        let servers = futures_util::future::join_all(starts)
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TestQuorum { servers })
    }

    /// Each server's `redis://` URL, in order.
    #[must_use]
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(TestServer::url).collect()
    }

    /// A quorum client on these servers ([`Client::quorum`]), counting each node as soon as
    /// it answers (see [`client_builder`](Self::client_builder)).
    pub async fn client(&self) -> Result<Client, Error> {
        self.client_builder().connect().await
    }

    /// A builder for a quorum client with settings of the test's own. Its
    /// [`restart_delay`](ClientBuilder::restart_delay) is zero: a server that has just
    /// started lost no locks, and the default delay would keep every fresh server out of the
    /// quorum for its first seconds. A test of the restart guard sets it back.
    pub fn client_builder(&self) -> ClientBuilder {
        Client::quorum_builder(self.urls()).restart_delay(std::time::Duration::ZERO)
    }

    /// How many servers.
    #[must_use]
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The servers, in order.
    pub fn iter(&self) -> std::slice::Iter<'_, TestServer> {
        self.servers.iter()
    }

    /// A server by index, if there is one (the `[i]` operator panics out of range).
    pub fn get_mut(&mut self, i: usize) -> Option<&mut TestServer> {
        self.servers.get_mut(i)
    }
}

impl Index<usize> for TestQuorum {
    type Output = TestServer;

    fn index(&self, i: usize) -> &TestServer {
        &self.servers[i]
    }
}

impl IndexMut<usize> for TestQuorum {
    fn index_mut(&mut self, i: usize) -> &mut TestServer {
        &mut self.servers[i]
    }
}
