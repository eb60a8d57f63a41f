//! The limit column: the minimal correct lock with redis-rs, on one node, on the cluster, and
//! on the quorum's nodes (limit-quorum, the minimal correct Redlock).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{timed_out, BoxFut, Column, Held, Release, TTL};

/// How often `limit` polls a busy lock: the floor any smarter waiting is measured against.
const LIMIT_POLL: Duration = Duration::from_millis(1);

/// The minimal correct lock on one connection: a single node's, or (S1c/S2c) redis-rs's
/// cluster connection, which sends each command to the master of the key's slot.
pub struct Limit<C> {
    conn: C,
    release: Arc<redis::Script>,
}

const COMPARE_AND_DELETE: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0";

impl Limit<redis::aio::MultiplexedConnection> {
    pub async fn connect(url: &str) -> redis::RedisResult<Self> {
        let conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        Ok(Limit::on(conn))
    }
}

impl Limit<redis::cluster_async::ClusterConnection> {
    pub async fn connect_cluster(urls: &[String]) -> redis::RedisResult<Self> {
        let conn = redis::cluster::ClusterClient::new(urls.to_vec())?
            .get_async_connection()
            .await?;
        Ok(Limit::on(conn))
    }
}

impl<C> Limit<C> {
    fn on(conn: C) -> Self {
        Limit {
            conn,
            release: Arc::new(redis::Script::new(COMPARE_AND_DELETE)),
        }
    }
}

struct LimitHeld<C> {
    conn: C,
    release: Arc<redis::Script>,
    key: String,
    token: String,
}

impl<C> Column for Limit<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn acquire<'a>(&'a self, key: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        Box::pin(async move {
            // 128 random bits per acquisition, like distlock's owner token.
            let token = format!("{:032x}", rand::random::<u128>());
            let deadline = Instant::now() + wait;
            let mut conn = self.conn.clone();
            loop {
                let set: Option<String> = redis::cmd("SET")
                    .arg(key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                if set.is_some() {
                    return Ok(Box::new(LimitHeld {
                        conn,
                        release: Arc::clone(&self.release),
                        key: key.to_owned(),
                        token,
                    }) as Held);
                }
                if Instant::now() >= deadline {
                    return Err(timed_out(key, wait));
                }
                tokio::time::sleep(LIMIT_POLL).await;
            }
        })
    }
}

/// `limit` on the quorum nodes (`limit-quorum`): the minimal correct Redlock.
pub struct LimitQuorum {
    conns: Vec<redis::aio::MultiplexedConnection>,
    release: Arc<redis::Script>,
}

impl LimitQuorum {
    pub async fn connect(urls: &[String]) -> redis::RedisResult<LimitQuorum> {
        let mut conns = Vec::with_capacity(urls.len());
        for url in urls {
            conns.push(
                redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            );
        }
        Ok(LimitQuorum {
            conns,
            release: Arc::new(redis::Script::new(COMPARE_AND_DELETE)),
        })
    }
}

/// The compare-and-delete script on every node at once; how many deleted the key.
async fn release_all(
    conns: &[redis::aio::MultiplexedConnection],
    script: &redis::Script,
    key: &str,
    token: &str,
) -> Result<usize, String> {
    let replies = futures::future::join_all(conns.iter().map(|conn| {
        let mut conn = conn.clone();
        async move {
            script
                .key(key)
                .arg(token)
                .invoke_async::<i64>(&mut conn)
                .await
        }
    }))
    .await;
    let mut deleted = 0;
    for reply in replies {
        deleted += usize::from(reply.map_err(|e| e.to_string())? == 1);
    }
    Ok(deleted)
}

impl Column for LimitQuorum {
    fn acquire<'a>(&'a self, key: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>> {
        Box::pin(async move {
            let token = format!("{:032x}", rand::random::<u128>());
            let deadline = Instant::now() + wait;
            let quorum = self.conns.len() / 2 + 1;
            let drift = TTL / 100 + Duration::from_millis(2);
            loop {
                let started = Instant::now();
                let replies = futures::future::join_all(self.conns.iter().map(|conn| {
                    let mut conn = conn.clone();
                    let set = redis::cmd("SET")
                        .arg(key)
                        .arg(&token)
                        .arg("NX")
                        .arg("PX")
                        .arg(TTL.as_millis() as u64)
                        .clone();
                    async move { set.query_async::<Option<String>>(&mut conn).await }
                }))
                .await;
                // A node's error counts as a no, like a busy key.
                let acked = replies.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
                let valid = started.elapsed() + drift < TTL;
                if acked >= quorum && valid {
                    return Ok(Box::new(LimitQuorumHeld {
                        conns: self.conns.clone(),
                        release: Arc::clone(&self.release),
                        key: key.to_owned(),
                        token,
                        quorum,
                    }) as Held);
                }
                // Undo a partial acquisition everywhere before trying again.
                if acked > 0 {
                    release_all(&self.conns, &self.release, key, &token).await?;
                }
                if Instant::now() >= deadline {
                    return Err(timed_out(key, wait));
                }
                tokio::time::sleep(LIMIT_POLL).await;
            }
        })
    }
}

struct LimitQuorumHeld {
    conns: Vec<redis::aio::MultiplexedConnection>,
    release: Arc<redis::Script>,
    key: String,
    token: String,
    quorum: usize,
}

impl Release for LimitQuorumHeld {
    fn release(self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        Box::pin(async move {
            let deleted = release_all(&self.conns, &self.release, &self.key, &self.token).await?;
            if deleted >= self.quorum {
                Ok(())
            } else {
                Err(format!(
                    "`{}` was ours on only {deleted} nodes at release",
                    self.key
                ))
            }
        })
    }
}

impl<C> Release for LimitHeld<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    fn release(mut self: Box<Self>) -> BoxFut<'static, Result<(), String>> {
        Box::pin(async move {
            let deleted: i64 = self
                .release
                .key(&self.key)
                .arg(&self.token)
                .invoke_async(&mut self.conn)
                .await
                .map_err(|e| e.to_string())?;
            match deleted {
                1 => Ok(()),
                _ => Err(format!("`{}` was no longer ours", self.key)),
            }
        })
    }
}
