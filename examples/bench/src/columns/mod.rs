//! The contenders. Every column takes and gives back a lock through the same two calls, so
//! the scenarios never know whose lock they drive. Adding a column (e.g. a new distlock mode)
//! is one `Kind` variant, its arms in `name`/`note`/`connect`, and a small `Column` impl in a
//! file of its own (one per column: `distlock`, `rslock`, `redlock`, `dl_redis`, `limit`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

mod distlock;
mod dl_redis;
mod limit;
mod redlock;
mod rslock;

use distlock::Distlock;
pub use dl_redis::dl_redis_provider;
use dl_redis::DlRedis;
use limit::{Limit, LimitQuorum};
use redlock::Redlock;
use rslock::Rslock;

/// Lease of every lock in every scenario: long enough that nothing expires mid-round.
pub const TTL: Duration = Duration::from_secs(10);

/// The peers' retry delay. Their default (200 ms) would leave them idle most of a contended
/// round; 2 ms is distlock's first pause. Both peers draw a uniform delay from [0, this).
const PEER_RETRY_DELAY_MS: u32 = 2;
/// The peers' retries per `lock()` call (their default).
const PEER_RETRY_COUNT: u32 = 3;

/// Why `distlock fenced` has no figure in a scenario.
pub const FENCED_ONLY: &str = "fencing's cost is measured in S1, S2, S4 and S13 only";

pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A lock implementation under test, connected to its server(s).
pub trait Column: Send + Sync {
    /// Takes the lock on `key`, waiting up to `wait` for a busy lock.
    fn acquire<'a>(&'a self, key: &'a str, wait: Duration) -> BoxFut<'a, Result<Held, String>>;
}

/// A held lock of any column.
pub trait Release: Send {
    fn release(self: Box<Self>) -> BoxFut<'static, Result<(), String>>;
}

pub type Held = Box<dyn Release>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// distlock's `setnx` mode (`Client::lock`).
    Distlock,
    /// The same with a fencing token minted on every acquisition (`LockRequest::fencing`):
    /// what fencing costs. Run in S1, S2 and S4 (and S13, the fenced writes) only.
    DistlockFenced,
    Rslock,
    Redlock,
    /// `distributed-lock-redis` (on fred, not redis-rs).
    DlRedis,
    /// The bare minimum with redis-rs: the floor every lock is measured against.
    Limit,
}

impl Kind {
    /// Column order of every table, chart and round.
    pub const ALL: [Kind; 6] = [
        Kind::Distlock,
        Kind::DistlockFenced,
        Kind::Rslock,
        Kind::Redlock,
        Kind::DlRedis,
        Kind::Limit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Distlock => "distlock",
            Kind::DistlockFenced => "distlock fenced",
            Kind::Rslock => "rslock",
            Kind::Redlock => "redlock",
            Kind::DlRedis => "distributed-lock-redis",
            Kind::Limit => "limit",
        }
    }

    /// Whether the targets apply to this column (our own lock modes).
    pub fn ours(self) -> bool {
        matches!(self, Kind::Distlock)
    }

    /// A peer crate: our columns must be ahead of every one of these.
    pub fn peer(self) -> bool {
        !self.ours() && self != Kind::Limit && self != Kind::DistlockFenced
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// How the column is set up, printed under the table.
    pub fn note(self) -> &'static str {
        match self {
            Kind::DistlockFenced => {
                "distlock fenced: the distlock column with `.fencing(true)` on every request, so each \
                 acquisition also mints a fencing token (the acquire script: `SET NX PX` + `INCR` of the \
                 lock's counter, where distlock without fencing sends one plain `SET .. NX PX .. GET`). \
                 Run in S1, S2 and S4 only (and S13, where it is the fenced writes): it shows what fencing costs, and no target applies to it."
            }
            Kind::Distlock => {
                "distlock setnx mode (this workspace): one `Client` (`Client::connect(url)`, or in S4 \
                 `Client::quorum_builder(urls).restart_delay(ZERO)`: the restart guard would keep the bench's \
                 just-started nodes out for 30 s, and costs a request nothing once they are in), \
                 `client.lock(key).ttl(10 s).wait(w).acquire()`, \
                 `guard.release()`; everything else at its defaults, as users get it (the watchdog stays on; \
                 a waiter waits the way distlock waits)."
            }
            Kind::Rslock => {
                "rslock =0.10.0 (features tokio-comp; redis-rs 1.x, the same redis crate as the workspace): \
                 `LockManager::new(urls)`, `set_retry(3, 2 ms)`, `lock(key, 10 s)`, `Lock::release()`. \
                 `lock()` makes 3 tries with a uniform [0, 2 ms) pause and has no deadline, and `acquire()` loops forever, \
                 so the bench wraps `lock()` in its own loop that stops at the wait deadline. \
                 A failed try also sends its compare-and-delete script to every node. Release returns nothing (best effort)."
            }
            Kind::Redlock => {
                "redlock =2.0.0 (sync; redis-rs 0.23, a second copy): `RedLock::new(urls)`, `set_retry(3, 2)` (ms), \
                 `lock(key, 10000)`, `unlock(&lock)`. Every call runs in `tokio::task::spawn_blocking` (its `async` \
                 feature only blocks the runtime thread), which adds one thread hand-off per acquire and per release. \
                 It opens a new TCP connection for every command; `lock()` has no deadline and sleeps after its \
                 last failed try too, so the bench loops over `lock()` until the wait deadline."
            }
            Kind::DlRedis => {
                "distributed-lock-redis =0.2.0 (with distributed-lock-core =0.2.0; built on fred 9, its own Redis \
                 client with one auto-pipelined connection per node, not on redis-rs): one `RedisLockProvider` \
                 (`builder().urls(urls).expiry(10 s).min_validity(9 s).extension_cadence(10 s / 3)`: its defaults are \
                 30 s, 27 s and 10 s, the same proportions), `provider.create_lock(key).try_acquire()` (a fresh lock \
                 object per acquisition: its token is drawn when the object is made), `handle.release()`. \
                 Its `acquire(timeout)` makes one attempt and returns `Timeout` at once when the lock is busy (it \
                 does not wait; it also spawns a task that sleeps for the whole timeout), so the bench loops over \
                 `try_acquire()` with a uniform [0, 2 ms) pause, the other peers' retry delay, until the wait deadline. \
                 Every handle spawns an extension task whose first interval tick fires at once, so an extend script \
                 can go out right after the acquire, racing the release that aborts the task. The key gets the \
                 prefix `distributed-lock:`. In S4 it sends SET NX PX to all nodes in parallel and returns at a \
                 majority; a failed attempt leaves its partial SETs to expire."
            }
            Kind::Limit => {
                "limit: the minimal correct commands with redis-rs on one shared MultiplexedConnection: \
                 `SET key token NX PX 10000`, release by a compare-and-delete `redis::Script` (EVALSHA); \
                 a busy lock is polled every 1 ms (`tokio::time::sleep`, which rounds up to the 1 ms timer tick). \
                 In S4 (limit-quorum) the minimal correct Redlock: one MultiplexedConnection per node, \
                 `SET key token NX PX 10000` sent to all 5 nodes at once (the futures joined, so it waits for all 5 \
                 answers), held if at least 3 said OK and the validity (ttl - elapsed - (ttl/100 + 2 ms)) is still \
                 positive; release (and the undo of a failed attempt) is the compare-and-delete script on all 5 at once, \
                 joined the same way. No per-node timeout (the bench's nodes are healthy), so it is a floor, not a \
                 production client."
            }
        }
    }

    /// Why the column has no S6 (many held locks renewed by a watchdog); `None` if it has one.
    pub fn no_watchdog(self) -> Option<&'static str> {
        match self {
            Kind::Distlock => None,
            Kind::DistlockFenced => Some(FENCED_ONLY),
            Kind::Rslock => Some(
                "no watchdog: rslock renews only when asked (`extend`, one request per lock per node), so there is no batched renewal to measure",
            ),
            Kind::Redlock => Some("no watchdog and no extend: a lock lives for its ttl"),
            Kind::DlRedis => Some(
                "not batched: every held lock has an extension task of its own (a tokio interval, one extend script per lock per node per tick)",
            ),
            Kind::Limit => Some("baseline without renewal: a lock lives for its ttl"),
        }
    }

    /// Connects to one node (`urls.len() == 1`) or to independent quorum nodes. `Err` says
    /// why the column cannot run there; the report prints it as "n/a".
    pub async fn connect(self, urls: &[String]) -> Result<Arc<dyn Column>, String> {
        let quorum = urls.len() > 1;
        let failed = |e: &dyn std::fmt::Display| format!("connect failed: {e}");
        Ok(match self {
            Kind::Distlock | Kind::DistlockFenced => {
                let client = if quorum {
                    // The nodes were just started; the restart guard would refuse them for its
                    // 30 s delay (see the note above).
                    ::distlock::Client::quorum_builder(urls)
                        .restart_delay(Duration::ZERO)
                        .connect()
                        .await
                } else {
                    // The default number of connections, unless an A/B run sets it (README,
                    // "Several connections to one node").
                    let connections = std::env::var("DISTLOCK_BENCH_CONNECTIONS")
                        .ok()
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(::distlock::DEFAULT_CONNECTIONS);
                    ::distlock::Client::builder(&urls[0])
                        .connections(connections)
                        .connect()
                        .await
                };
                Arc::new(Distlock {
                    client: client.map_err(|e| failed(&e))?,
                    fencing: self == Kind::DistlockFenced,
                })
            }
            Kind::Rslock => {
                let mut manager = ::rslock::LockManager::new(urls.to_vec());
                manager.set_retry(
                    PEER_RETRY_COUNT,
                    Duration::from_millis(PEER_RETRY_DELAY_MS.into()),
                );
                Arc::new(Rslock(manager))
            }
            Kind::Redlock => {
                let mut redlock = ::redlock::RedLock::new(urls.to_vec());
                redlock.set_retry(PEER_RETRY_COUNT, PEER_RETRY_DELAY_MS);
                Arc::new(Redlock(Arc::new(redlock)))
            }
            Kind::DlRedis => {
                let provider = dl_redis_provider(urls).await?;
                Arc::new(DlRedis(provider))
            }
            Kind::Limit if quorum => {
                Arc::new(LimitQuorum::connect(urls).await.map_err(|e| failed(&e))?)
            }
            Kind::Limit => Arc::new(Limit::connect(&urls[0]).await.map_err(|e| failed(&e))?),
        })
    }
}

/// On a Redis Cluster (S1c, S2c): a second `impl` so the single-node code above stays as it
/// was.
impl Kind {
    /// How the column is set up on the Redis Cluster, printed under the table.
    pub fn cluster_note(self) -> &'static str {
        match self {
            Kind::DistlockFenced => FENCED_ONLY,
            Kind::Distlock => {
                "distlock: one `Client::cluster(urls)` (every node's URL as a seed), the same `lock(key).ttl(10 s)\
                 .wait(w).acquire()` and `guard.release()`; its keys share the lock name's slot through the hash tag \
                 (`distlock:{name}`)."
            }
            Kind::Rslock => {
                "rslock: `LockManager::new_cluster(urls)` (its `cluster` feature: one redis-rs async cluster \
                 connection, the cluster counted as one server, so quorum 1), `set_retry(3, 2 ms)`, the same loop \
                 around `lock()` as on one node."
            }
            Kind::Redlock => {
                "redlock: n/a, no Redis Cluster support: every URL is an independent server (a plain redis-rs 0.23 \
                 `Client`), with no slot routing or MOVED handling."
            }
            Kind::DlRedis => {
                "distributed-lock-redis: not documented for Redis Cluster, but its builder hands the URL to fred, \
                 whose cluster mode takes a `redis-cluster://host:port?node=host:port&node=host:port` URL (all nodes; \
                 one URL, so one client and quorum 1), and it works: the same provider settings and loop as on one node. \
                 SET NX PX goes to the key's master, but its release and extend scripts are custom `EVAL` commands \
                 that fred routes by their first string argument, the script text, so they go to the master of that \
                 text's slot; for a key on another master the server answers MOVED, and fred re-reads the slot map \
                 (`CLUSTER SLOTS`) and resends. In a quick check of S1c, each MOVED came with one `CLUSTER SLOTS`."
            }
            Kind::Limit => {
                "limit on the cluster: the same minimal lock through redis-rs's async cluster connection \
                 (`ClusterClient::new(urls)?.get_async_connection()`, one shared, cloned per acquisition): \
                 `SET key token NX PX 10000` and the compare-and-delete `redis::Script` (EVALSHA), both routed by \
                 the key's slot; a busy lock polled every 1 ms."
            }
        }
    }

    /// Connects to a Redis Cluster through `urls` (seeds). `Err` says why the column cannot
    /// run there; the report prints it as "n/a".
    pub async fn connect_cluster(self, urls: &[String]) -> Result<Arc<dyn Column>, String> {
        let failed = |e: &dyn std::fmt::Display| format!("connect failed: {e}");
        Ok(match self {
            Kind::Distlock => Arc::new(Distlock {
                client: ::distlock::Client::cluster(urls)
                    .await
                    .map_err(|e| failed(&e))?,
                fencing: false,
            }),
            Kind::DistlockFenced => return Err(FENCED_ONLY.to_owned()),
            Kind::Rslock => {
                let mut manager =
                    ::rslock::LockManager::new_cluster(urls.to_vec()).map_err(|e| failed(&e))?;
                manager.set_retry(
                    PEER_RETRY_COUNT,
                    Duration::from_millis(PEER_RETRY_DELAY_MS.into()),
                );
                Arc::new(Rslock(manager))
            }
            Kind::Redlock => return Err("no Redis Cluster support".to_owned()),
            Kind::DlRedis => {
                // fred's cluster mode, through its `redis-cluster://` URL (see the note).
                let addrs: Vec<&str> = urls
                    .iter()
                    .map(|u| u.trim_start_matches("redis://").trim_end_matches('/'))
                    .collect();
                let url = format!(
                    "redis-cluster://{}?{}",
                    addrs[0],
                    addrs[1..]
                        .iter()
                        .map(|a| format!("node={a}"))
                        .collect::<Vec<_>>()
                        .join("&")
                );
                let provider = dl_redis_provider(&[url]).await?;
                Arc::new(DlRedis(provider))
            }
            Kind::Limit => Arc::new(Limit::connect_cluster(urls).await.map_err(|e| failed(&e))?),
        })
    }

    /// The Redis key the column stores for the lock `name` on the cluster (its slot decides
    /// the master).
    pub fn cluster_key(self, name: &str) -> String {
        match self {
            Kind::Distlock | Kind::DistlockFenced => format!("distlock:{{{name}}}"),
            Kind::DlRedis => format!("distributed-lock:{name}"),
            Kind::Rslock | Kind::Redlock | Kind::Limit => name.to_owned(),
        }
    }
}

fn timed_out(key: &str, wait: Duration) -> String {
    format!("`{key}` still busy after {wait:?}")
}
