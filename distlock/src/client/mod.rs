//! The lock client: one Redis deployment, its connection and its settings.

mod builder;
mod default;
mod operators;

use std::sync::Arc;

pub use builder::ClientBuilder;
use builder::Shape;
pub(crate) use default::scoped_default;
pub use default::{default_client, default_quorum_client, scope_default, set_default};

use crate::election::Election;
use crate::error::Error;
use crate::lock::LockRequest;
use crate::mode::Primitive;
use crate::reentrant;
use crate::runtime::{Shared, Shutdown};
use crate::semaphore;
use crate::setnx;

/// A handle to the locks of one Redis deployment. Cheap to clone (an `Arc` inside); clones
/// share its connections (to one node: [`DEFAULT_CONNECTIONS`](crate::DEFAULT_CONNECTIONS) connections, see
/// [`ClientBuilder::connections`]), which reconnect by themselves after a failure.
///
/// ```no_run
/// # async fn demo() -> Result<(), distlock::Error> {
/// use std::time::Duration;
/// let locks = distlock::Client::connect("redis://127.0.0.1:6379").await?;
/// let guard = locks
///     .lock("order:42")
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .acquire()
///     .await?;
/// // ... the critical section (take it with `.fencing(true)` and `guard.fencing_token()`
/// // orders writes to other systems) ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Shared>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field(
                "nodes",
                &self
                    .inner
                    .nodes
                    .nodes
                    .iter()
                    .map(|n| &n.addr)
                    .collect::<Vec<_>>(),
            )
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to one Redis node with default settings. The URL may be `redis://`, `rediss://`
    /// (with the `tls` feature), carry `user:password@` and a database number.
    pub async fn connect(url: &str) -> Result<Client, Error> {
        Client::builder(url).connect().await
    }

    /// Starts configuring a client for one Redis node.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder::new(vec![url.to_owned()], Shape::Nodes)
    }

    /// Connects to N >= 3 independent Redis masters and locks by majority (Redlock): every
    /// lock is taken on all of them in parallel and held only while a majority (N/2 + 1)
    /// granted it in time. Errors on a minority of nodes are tolerated. A node counts only once
    /// its server has been up for the restart delay (30 s by default; see
    /// [`ClientBuilder::restart_delay`]).
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// let locks = distlock::Client::quorum([
    ///     "redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379",
    /// ])
    /// .await?;
    /// let guard = locks.lock("payout:7").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn quorum<I, S>(urls: I) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Client::quorum_builder(urls).connect().await
    }

    /// Starts configuring a quorum client; see [`Client::quorum`].
    pub fn quorum_builder<I, S>(urls: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        ClientBuilder::new(
            urls.into_iter().map(|u| u.as_ref().to_owned()).collect(),
            Shape::Nodes,
        )
    }

    /// Connects to a Redis Cluster through any of its nodes (`seeds`: one is enough, more
    /// survive one being down at start-up). Every mode works as on one node: all keys of a
    /// lock share one slot (the hash tag in the key layout), each script goes to the master
    /// of that slot, and redis-rs follows `MOVED`/`ASK` redirections and failovers. Waiters
    /// are woken through sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`), heard on the lock's shard
    /// only. See [the deployments guide](crate::guide::deployments) for what a failover costs, and
    /// [`ClientBuilder::replicas`] to make it unlikely to cost a held lock.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// let locks = distlock::Client::cluster(["redis://10.0.0.1:7000", "redis://10.0.0.2:7000"]).await?;
    /// let guard = locks.lock("order:42").acquire().await?;
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn cluster<I, S>(seeds: I) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Client::cluster_builder(seeds).connect().await
    }

    /// Starts configuring a Redis Cluster client; see [`Client::cluster`].
    pub fn cluster_builder<I, S>(seeds: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        ClientBuilder::new(
            seeds.into_iter().map(|u| u.as_ref().to_owned()).collect(),
            Shape::Cluster,
        )
    }

    /// Connects to the master that the sentinels at `sentinels` know as `master_name`, and
    /// follows it when Sentinel fails over to a replica. Requests only ever go to the server
    /// the sentinels name as master and that says it is one; a server demoted meanwhile
    /// refuses writes (`READONLY`), which makes the client ask the sentinels again. The data
    /// servers are reached with the first sentinel URL's user, password and database.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), distlock::Error> {
    /// let locks = distlock::Client::sentinel(
    ///     ["redis://10.0.0.1:26379", "redis://10.0.0.2:26379", "redis://10.0.0.3:26379"],
    ///     "locks",
    /// )
    /// .await?;
    /// # Ok(()) }
    /// ```
    pub async fn sentinel<I, S>(sentinels: I, master_name: &str) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Client::sentinel_builder(sentinels, master_name)
            .connect()
            .await
    }

    /// Starts configuring a Sentinel client; see [`Client::sentinel`].
    pub fn sentinel_builder<I, S>(sentinels: I, master_name: &str) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        ClientBuilder::new(
            sentinels
                .into_iter()
                .map(|u| u.as_ref().to_owned())
                .collect(),
            Shape::Sentinel(master_name.to_owned()),
        )
    }

    /// True for a client over several independent masters (Redlock).
    pub fn is_quorum(&self) -> bool {
        self.inner.nodes.is_quorum()
    }

    /// An exclusive, non-reentrant lock (`SET NX PX` with a random owner token).
    ///
    /// The name may be any UTF-8 text; it is checked when the lock is acquired.
    #[track_caller]
    pub fn lock(&self, name: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest::new(
            &self.inner,
            &setnx::SETNX,
            name.as_ref(),
            std::panic::Location::caller(),
        )
    }

    /// Several exclusive locks at once, all or none: the guard holds every name, and
    /// [`Guard::is_held`](crate::Guard::is_held) is true only while every name is held (the
    /// lease is the shortest of the names'; the watchdog renews them all, and losing any one
    /// loses the set). One release frees every name.
    ///
    /// Each name is the same lock as [`lock`](Self::lock) of that name: `lock_many(["a", "b"])`
    /// excludes `lock("a")`, and `lock("a")` excludes the set. **One name, one mode**: for
    /// names the rest of the code takes with [`write`](Self::write) or [`read`](Self::read),
    /// use [`write_many`](Self::write_many); this set meets those with
    /// [`Error::ModeConflict`] at runtime, and only when the two meet under load. The names are taken in one fixed
    /// order whatever the order given (duplicates count once), so callers asking for `[a, b]`
    /// and `[b, a]` never deadlock, and a caller that finds a name busy holds none of them while
    /// it waits, for that name's release. An acquisition that fails or is dropped leaves no
    /// name taken. On one node, through Sentinel and on each node of a quorum the names are
    /// taken in one script; on a Redis Cluster, the names of each slot together, a slot at a
    /// time, what was taken given back when a later slot is busy (give related names one hash
    /// tag, `account:{7}`, to keep them in one slot).
    ///
    /// The request takes every setting of [`lock`](Self::lock)'s; with
    /// [`fencing(true)`](LockRequest::fencing) the set gets one token, above every earlier
    /// token of each of its names. Under steady contention a set may wait longer than single
    /// locks of its names: it needs all of them free at once. A task holding one of the names
    /// gets [`Error::Reentrant`] at once. Errors and the guard's
    /// [`name`](crate::Guard::name) show the set as `[a, b]` (in its fixed order), but
    /// [`Error::ModeConflict`] and [`Error::WrongType`] name the one name they concern.
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
    /// use std::time::Duration;
    /// let (from, to) = ("account:7", "account:3");
    /// let both = locks
    ///     .lock_many([from, to])
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(2))
    ///     .acquire()
    ///     .await?;
    /// // ... move the money: no other transfer touches either account meanwhile ...
    /// both.release().await
    /// # }
    /// ```
    #[track_caller]
    pub fn lock_many<I, N>(&self, names: I) -> LockRequest<'_>
    where
        I: IntoIterator<Item = N>,
        N: AsRef<[u8]>,
    {
        LockRequest::of_key(
            &self.inner,
            &crate::many::MANY,
            self.inner.set_key(Primitive::Lock, names),
            std::panic::Location::caller(),
        )
    }

    /// A reentrant exclusive lock: the same task (or [`LockContext`](crate::LockContext)) may take it again while
    /// holding it, and must release it as often as it took it; other tasks wait.
    #[track_caller]
    pub fn reentrant(&self, name: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest::new(
            &self.inner,
            &reentrant::REENTRANT,
            name.as_ref(),
            std::panic::Location::caller(),
        )
    }

    /// The shared side of a read/write lock: any number of tasks may hold it together, never
    /// while a task holds [`write`](Self::write) of the same name. Reentrant per task like
    /// [`reentrant`](Self::reentrant). Writers are preferred: while a writer waits, new
    /// readers wait too (tasks already reading may re-enter), so readers cannot starve it.
    ///
    /// With [`fencing(true)`](LockRequest::fencing), a read guard's
    /// [`fencing_token`](crate::Guard::fencing_token) is the token of the latest fenced write
    /// (0 before the first): reads share it instead of each drawing a new one.
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
    /// let doc = locks.read("doc:7").acquire().await?;
    /// // ... read the document; other readers may be here too, writers are not ...
    /// doc.release().await
    /// # }
    /// ```
    #[track_caller]
    pub fn read(&self, name: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest::new(
            &self.inner,
            &crate::rwlock::READ,
            name.as_ref(),
            std::panic::Location::caller(),
        )
    }

    /// The exclusive side of a read/write lock: one task at a time, and no readers. Reentrant
    /// per task; with [`fencing(true)`](LockRequest::fencing) every write tenure draws a new,
    /// larger fencing token. The writer may
    /// also take [`read`](Self::read) and then release the write guard to keep reading
    /// (downgrade). A task holding only the read lock gets [`Error::Upgrade`] at once instead
    /// of waiting forever: release the read lock first, or take the write lock from the start.
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
    /// let write = locks.write("doc:7").fencing(true).acquire().await?;
    /// // ... change the document, passing write.fencing_token() to the store ...
    /// let read = locks.read("doc:7").try_acquire().await?; // the writer may always read
    /// write.release().await?; // downgraded: still reading, other readers may join
    /// read.release().await
    /// # }
    /// ```
    #[track_caller]
    pub fn write(&self, name: impl AsRef<[u8]>) -> LockRequest<'_> {
        LockRequest::new(
            &self.inner,
            &crate::rwlock::WRITE,
            name.as_ref(),
            std::panic::Location::caller(),
        )
    }

    /// Several names at once on the write side of each name's read/write lock, all or none:
    /// what [`write`](Self::write) is to one name, this is to a set of them. Use it where the
    /// rest of the code takes these names with [`write`](Self::write) and
    /// [`read`](Self::read) (a transfer between two accounts that are otherwise written and
    /// read one at a time): each name is the very lock `write(name)` takes, so the set
    /// excludes each name's writers and readers, and they exclude the set.
    /// [`lock_many`](Self::lock_many) takes the names as exclusive locks, a mode of their own:
    /// a name used by both is refused at runtime with [`Error::ModeConflict`] (one name, one
    /// mode).
    ///
    /// As [`lock_many`](Self::lock_many): the names are taken in one fixed order whatever the
    /// order given (duplicates count once), so callers asking for `[a, b]` and `[b, a]` never
    /// deadlock; a caller that finds a name busy holds none of them while it waits, for that
    /// name's release; an acquisition that fails or is dropped leaves no name taken; the guard
    /// is held only while every name is (one lease, renewed by the watchdog, the shortest of
    /// the names'); one release frees every name; with [`fencing(true)`](LockRequest::fencing)
    /// the set gets one token, above every earlier token of each name (a new one on every
    /// acquisition; a name it re-enters keeps its own tenure's token). On a Redis Cluster the
    /// names of each slot are taken together, a slot at a time (give related names one hash
    /// tag, `account:{7}`, to keep them in one slot).
    ///
    /// As [`write`](Self::write), per name: writers are preferred, and a set that waits is a
    /// waiting writer on every one of its names (new readers of each name wait for it, so
    /// a stream of readers on one name cannot starve it; the price: while it waits, new
    /// readers of all its names wait too). The owner is the task: a name the task already
    /// holds with `write` is re-entered (and stays held after the set's release), and a name
    /// it holds only with `read` is refused with [`Error::Upgrade`]. One node, Sentinel and
    /// Cluster; a quorum client refuses it with [`Error::InvalidConfig`], as it refuses
    /// [`write`](Self::write).
    ///
    /// Why a method of its own rather than a flag on [`lock_many`](Self::lock_many)'s request:
    /// the mode is chosen where the names are, as for one name (`lock`, `write`), so no
    /// request can ask for a mode its method does not take.
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
    /// use std::time::Duration;
    /// // Elsewhere one account is written with `locks.write("account:7")` and its balance
    /// // read with `locks.read("account:7")`: the transfer takes both in the same mode.
    /// let both = locks
    ///     .write_many(["account:7", "account:3"])
    ///     .ttl(Duration::from_secs(10))
    ///     .wait(Duration::from_secs(2))
    ///     .fencing(true)
    ///     .acquire()
    ///     .await?;
    /// // ... move the money; no writer or reader of either account meanwhile ...
    /// both.release().await
    /// # }
    /// ```
    #[track_caller]
    pub fn write_many<I, N>(&self, names: I) -> LockRequest<'_>
    where
        I: IntoIterator<Item = N>,
        N: AsRef<[u8]>,
    {
        LockRequest::of_key(
            &self.inner,
            &crate::many::WRITE_MANY,
            self.inner.set_key(Primitive::WriteLock, names),
            std::panic::Location::caller(),
        )
    }

    /// A counting semaphore: at most `permits` holders of `name` at once, across every
    /// process. Each acquisition takes one permit and its guard gives it back; the request
    /// takes the settings every lock does (ttl, wait, watchdog, fencing, ...).
    ///
    /// Each permit has a lease of its own, in the server's time: a holder that crashed frees
    /// its one permit when its own ttl runs out, whatever the other holders do, and the
    /// watchdog renews each permit alone. A release wakes one waiter. With
    /// [`fencing(true)`](LockRequest::fencing) every permit gets a token of its own, larger
    /// than every token minted for the name before.
    ///
    /// The number of permits is recorded by the holder that finds the name free; while a
    /// permit is held, a request with another number fails with
    /// [`Error::PermitsMismatch`] (nothing changes), so every holder of one name must ask for
    /// the same number. A task may hold several permits of one semaphore, one per guard: a
    /// task that waits for a permit while it holds all of them waits until its `wait` runs
    /// out. `permits` must be at least 1. One node, Sentinel and Cluster; a quorum client
    /// refuses it with [`Error::InvalidConfig`] when the request is made: a majority of
    /// nodes, each with its own permits, does not bound the holders by the limit.
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) -> Result<(), distlock::Error> {
    /// use std::time::Duration;
    /// // At most 4 exports at a time for this tenant, across every instance of the service.
    /// let permit = locks
    ///     .semaphore("export:acme", 4)
    ///     .ttl(Duration::from_secs(30))
    ///     .wait(Duration::from_secs(10))
    ///     .acquire()
    ///     .await?;
    /// // ... run the export; `permit.lost()` resolves if the lease cannot be renewed ...
    /// permit.release().await
    /// # }
    /// ```
    #[track_caller]
    pub fn semaphore(&self, name: impl AsRef<[u8]>, permits: u32) -> LockRequest<'_> {
        LockRequest::new(
            &self.inner,
            &semaphore::SEMAPHORE,
            name.as_ref(),
            std::panic::Location::caller(),
        )
        .with_permits(permits)
    }

    /// A leader election among the processes that campaign under `name`:
    /// [`lead`](Election::lead) runs a job whenever this process leads, until it is done or the
    /// client shuts down; [`campaign`](Election::campaign) waits until this process leads and
    /// returns its [`Leadership`](crate::Leadership) (its term, its loss, its resignation), for a loop of your
    /// own; [`observe`](Election::observe) follows who leads.
    ///
    /// Leadership is the exclusive lock `name` ([`Client::lock`]), held with a fencing token,
    /// which is the term, and renewed by the watchdog; one name is one election (do not lock
    /// it by other means). It runs wherever that lock does: one node, Sentinel, Redis Cluster
    /// and a Redlock quorum (terms from the quorum's fencing: see
    /// [the design guide](crate::guide::design#leader-election) for what each promises).
    ///
    /// ```no_run
    /// # async fn demo(client: distlock::Client) -> Result<(), distlock::Error> {
    /// # async fn run_the_scheduler(term: distlock::FencingToken) {}
    /// use std::time::Duration;
    ///
    /// let election = client.election("billing-scheduler").ttl(Duration::from_secs(10));
    /// loop {
    ///     // Waits until this process leads; `ShutDown` once the client is shut down.
    ///     let leadership = election.campaign().await?;
    ///     tokio::select! {
    ///         lost = leadership.lost() => eprintln!("no longer leading: {lost}"),
    ///         () = run_the_scheduler(leadership.term()) => {
    ///             leadership.resign().await?; // the next candidate takes over at once
    ///             return Ok(());
    ///         }
    ///     }
    /// }
    /// // The same loop in one call:
    /// // election.lead(|term| run_the_scheduler(term)).await
    /// # }
    /// ```
    #[track_caller]
    pub fn election(&self, name: impl AsRef<[u8]>) -> Election {
        Election::new(&self.inner, name.as_ref(), std::panic::Location::caller())
    }

    /// Renewal round trips the watchdog has sent (one per tick, however many locks it renews).
    pub fn renewal_round_trips(&self) -> u64 {
        self.inner.watchdog.round_trips()
    }

    /// Locks whose leases the watchdog is renewing right now.
    pub fn renewing(&self) -> usize {
        self.inner.watchdog.len()
    }

    /// Shuts the client down, for a service that stops: every clone of it takes no more
    /// locks ([`Error::ShutDown`]; acquisitions waiting now end with it), every lock it still
    /// holds is taken back and released (their guards report the lease lost: a locked fn's
    /// body is cancelled and returns [`Error::LeaseLost`], as its work stopped part-way), and
    /// this waits, at most `within`, for those releases and for the ones already going on in
    /// the background (dropped guards, abandoned attempts). What is not done by then goes on
    /// while the runtime runs, and every lock still frees when its lease ends.
    ///
    /// A lock kept for its [`min_hold`](crate::LockRequest::min_hold) is not released early:
    /// its lease ends it. The connections close when the last clone of the client and the
    /// last guard are dropped. Calling it again returns at once.
    ///
    /// ```no_run
    /// # async fn demo(locks: distlock::Client) {
    /// # async fn serve() {}
    /// serve().await; // until the service is told to stop
    /// let report = locks.shutdown(std::time::Duration::from_secs(5)).await;
    /// if !report.is_complete() {
    ///     eprintln!("locks left to their leases: {report:?}");
    /// }
    /// # }
    /// ```
    pub async fn shutdown(&self, within: std::time::Duration) -> Shutdown {
        self.inner.shutdown(within).await
    }

    pub(crate) fn inner(&self) -> &Arc<Shared> {
        &self.inner
    }
}
