//! Several independent `redis-server` masters, e.g. the N nodes of a Redlock.

use std::ops::{Index, IndexMut};

use super::server::{RedisServer, RedisServerBuilder};

/// `n` independent (non-replicating) Redis masters, each a [`RedisServer`].
///
/// All are spawned from the calling thread, which matters for the
/// `PR_SET_PDEATHSIG` caveat described on [`RedisServer`].
#[derive(Debug)]
pub struct RedisServers {
    servers: Vec<RedisServer>,
}

impl RedisServers {
    /// Starts `n` servers with default arguments; they boot concurrently.
    ///
    /// # Panics
    /// If any server fails to start (see [`RedisServer::start`]).
    pub fn start(n: usize) -> Self {
        RedisServer::builder().start_many(n)
    }

    /// Starts `n` servers that all get the same extra arguments.
    ///
    /// # Panics
    /// If any server fails to start (see [`RedisServer::start`]).
    pub fn start_with(n: usize, args: &[&str]) -> Self {
        RedisServer::builder()
            .args(args.iter().copied())
            .start_many(n)
    }

    /// Number of servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are no servers.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The `i`-th server, if any.
    pub fn get(&self, i: usize) -> Option<&RedisServer> {
        self.servers.get(i)
    }

    /// The `i`-th server mutably (to kill, pause, restart it), if any.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut RedisServer> {
        self.servers.get_mut(i)
    }

    /// Iterates over the servers in start order.
    pub fn iter(&self) -> std::slice::Iter<'_, RedisServer> {
        self.servers.iter()
    }

    /// Iterates mutably over the servers in start order.
    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, RedisServer> {
        self.servers.iter_mut()
    }

    /// `redis://127.0.0.1:<port>/` of every server, in order.
    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// `127.0.0.1:<port>` of every server, in order.
    pub fn addrs(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::addr).collect()
    }

    /// Takes the servers out, e.g. to hand them to different owners.
    pub fn into_vec(self) -> Vec<RedisServer> {
        self.servers
    }
}

impl Index<usize> for RedisServers {
    type Output = RedisServer;

    fn index(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }
}

impl IndexMut<usize> for RedisServers {
    fn index_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }
}

impl<'a> IntoIterator for &'a RedisServers {
    type Item = &'a RedisServer;
    type IntoIter = std::slice::Iter<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut RedisServers {
    type Item = &'a mut RedisServer;
    type IntoIter = std::slice::IterMut<'a, RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}

impl IntoIterator for RedisServers {
    type Item = RedisServer;
    type IntoIter = std::vec::IntoIter<RedisServer>;

    fn into_iter(self) -> Self::IntoIter {
        self.servers.into_iter()
    }
}

// The builder's methods that start several servers live here, beside what they return, so
// `server.rs` does not import this file back.
impl RedisServerBuilder {
    /// Starts `n` independent servers with these arguments.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_many(&self, n: usize) -> RedisServers {
        self.try_start_many(n).unwrap_or_else(|msg| panic!("{msg}"))
    }

    /// Like [`start_many`](Self::start_many) but returns the failure instead of panicking.
    pub fn try_start_many(&self, n: usize) -> Result<RedisServers, String> {
        let servers = (0..n)
            .map(|_| self.try_start())
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RedisServers { servers })
    }
}
