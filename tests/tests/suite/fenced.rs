//! Writes the store fences (`distlock::fenced`): a token below the highest a key has seen is
//! refused, atomically with the comparison, and a holder stalled past its lease cannot
//! overwrite its successor's write, end to end.

use crate::common;

use std::time::Duration;

use common::client;
use distlock::fenced::{mark_key, FencedRedis, TokenSource};
use distlock::{distributed_lock, Client, Error, FencingToken, Guard, Leadership};
use distlock_testkit::{FaultProxy, RedisServer};
use redis::aio::MultiplexedConnection;
use redis::AsyncCommands;

async fn store(server: &RedisServer) -> FencedRedis<MultiplexedConnection> {
    FencedRedis::new(server.async_connection().await)
}

/// A token of this value, as a store reads one back.
pub(crate) fn token(value: u64) -> FencingToken {
    FencingToken::new(value)
}

pub(crate) fn stale(
    result: Result<impl std::fmt::Debug, Error>,
    token: impl Into<FencingToken>,
    highest: impl Into<FencingToken>,
) {
    let (token, highest) = (token.into(), highest.into());
    match result {
        Err(e @ Error::StaleToken { .. }) => {
            assert!(
                matches!(e, Error::StaleToken { token: t, highest: h } if t == token && h == highest),
                "{e:?}"
            );
            assert!(!e.is_retryable(), "a newer holder is in charge");
        }
        other => panic!("expected a refusal of token {token}: {other:?}"),
    }
}

/// Every write: a token at or above the mark writes and raises it; a lower one is refused
/// and changes nothing.
#[tokio::test]
async fn each_write_refuses_a_token_below_the_highest_seen() {
    let server = RedisServer::start();
    let mut fenced = store(&server).await;
    let mut raw = server.async_connection().await;
    fenced.set("k", "a", token(10)).await.expect("first write");
    fenced
        .set("k", "b", token(10))
        .await
        .expect("the same token again");
    stale(fenced.set("k", "c", token(9)).await, 9, 10);
    assert_eq!(raw.get::<_, String>("k").await.unwrap(), "b");
    assert_eq!(
        fenced.highest_token("k").await.unwrap(),
        Some(FencingToken::new(10))
    );

    fenced
        .set_with_expiry("e", "v", Duration::from_secs(100), token(20))
        .await
        .expect("write");
    let mark_ttl: i64 = raw.pttl(mark_key(b"e")).await.unwrap();
    assert!(mark_ttl > 86_000_000, "the mark is kept a day: {mark_ttl}");
    stale(
        fenced
            .set_with_expiry("e", "w", Duration::from_secs(1), token(19))
            .await,
        19,
        20,
    );
    assert_eq!(raw.get::<_, String>("e").await.unwrap(), "v");

    assert_eq!(fenced.incr_by("n", 5, token(30)).await.unwrap(), 5);
    assert_eq!(fenced.incr_by("n", 2, token(31)).await.unwrap(), 7);
    stale(fenced.incr_by("n", 100, token(30)).await, 30, 31);
    assert_eq!(raw.get::<_, i64>("n").await.unwrap(), 7);

    assert!(fenced.hset("h", "f", "1", token(40)).await.is_ok());
    assert_eq!(fenced.hincr_by("h", "g", 3, token(41)).await.unwrap(), 3);
    stale(fenced.hset("h", "f", "stale", token(40)).await, 40, 41);
    stale(fenced.hdel("h", "f", token(1)).await, 1, 41);
    assert_eq!(raw.hget::<_, _, String>("h", "f").await.unwrap(), "1");
    assert!(fenced.hdel("h", "f", token(42)).await.unwrap());
    assert!(!fenced.hdel("h", "f", token(42)).await.unwrap());

    assert!(fenced.del("k", token(11)).await.unwrap());
    // The mark outlives the key: a stale holder cannot write it back.
    stale(fenced.set("k", "late", token(10)).await, 10, 11);
    assert!(!raw.exists::<_, bool>("k").await.unwrap());
}

/// A write the server refuses for the application's reasons (the wrong type) fails as a
/// Redis error and raises no mark.
#[tokio::test]
async fn a_failed_write_raises_no_mark() {
    let server = RedisServer::start();
    let mut fenced = store(&server).await;
    let mut raw = server.async_connection().await;
    let _: () = raw.set("text", "not a number").await.unwrap();
    let failed = fenced.incr_by("text", 1, token(5)).await;
    assert!(matches!(failed, Err(Error::Redis { .. })), "{failed:?}");
    assert_eq!(fenced.highest_token("text").await.unwrap(), None);
}

#[distributed_lock(key = "account:<id>", client = locks, fencing = true)]
async fn deposit(
    locks: &Client,
    id: u64,
    amount: i64,
    store: &mut FencedRedis<MultiplexedConnection>,
) -> Result<i64, Error> {
    store
        .hincr_by(
            format!("account:{id}"),
            "balance",
            amount,
            distlock::lease(),
        )
        .await
}

#[distributed_lock(key = "account:<id>", client = locks)]
async fn deposit_unfenced(
    locks: &Client,
    id: u64,
    store: &mut FencedRedis<MultiplexedConnection>,
) -> Result<i64, Error> {
    let lease = distlock::lease().expect("inside a locked fn");
    store.incr_by(format!("account:{id}:n"), 1, &lease).await
}

/// A locked fn with `fencing = true` writes in one line, passing the lease it sees: the write
/// carries the call's token, above one minted before it, which the key then refuses. Without
/// fencing, or outside a locked fn, the write fails as a mistake and nothing is written.
#[tokio::test]
async fn a_locked_fn_writes_fenced_passing_its_lease() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut store = store(&server).await;
    let earlier = locks
        .lock("account:7")
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let stale_token = earlier.fencing_token().expect("fenced");
    earlier.release().await.expect("release");

    assert_eq!(deposit(&locks, 7, 5, &mut store).await.unwrap(), 5);
    let mark = store
        .highest_token("account:7")
        .await
        .unwrap()
        .expect("marked");
    assert!(mark > stale_token, "{mark} after {stale_token}");
    stale(
        store
            .hincr_by("account:7", "balance", 100, stale_token)
            .await,
        stale_token,
        mark,
    );

    let unfenced = deposit_unfenced(&locks, 7, &mut store).await;
    assert!(
        matches!(unfenced, Err(Error::InvalidConfig { .. })),
        "{unfenced:?}"
    );
    let outside = store
        .hincr_by("account:7", "balance", 1, distlock::lease())
        .await;
    assert!(
        matches!(outside, Err(Error::InvalidConfig { .. })),
        "{outside:?}"
    );
    let guard = locks.lock("account:7").try_acquire().await.expect("free");
    let by_hand = store.hincr_by("account:7", "balance", 1, &guard).await;
    assert!(
        matches!(by_hand, Err(Error::InvalidConfig { .. })),
        "{by_hand:?}"
    );
    guard.release().await.expect("release");
    let balance: i64 = server
        .async_connection()
        .await
        .hget("account:7", "balance")
        .await
        .unwrap();
    assert_eq!(balance, 5, "only the fenced call wrote");
    let counted: bool = server
        .async_connection()
        .await
        .exists("account:7:n")
        .await
        .unwrap();
    assert!(!counted, "the unfenced fn wrote nothing");
}

/// What a holder holds in a [`StalledHolder`] run: a lock's guard, or an election's
/// leadership (whose term is its token). A fenced write takes either as it is.
pub(crate) enum Held {
    Lock(Guard),
    Leader(Leadership),
}

/// Which of the two a run takes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Lock,
    Leader,
}

impl Held {
    async fn take(client: &Client, kind: Kind, name: &str, wait: Duration) -> Held {
        let ttl = Duration::from_secs(1);
        match kind {
            Kind::Lock => Held::Lock(
                client
                    .lock(name)
                    .fencing(true)
                    .ttl(ttl)
                    .wait(wait)
                    .acquire()
                    .await
                    .expect("the lock"),
            ),
            Kind::Leader => Held::Leader(
                client
                    .election(name)
                    .ttl(ttl)
                    .wait(wait)
                    .campaign()
                    .await
                    .expect("the lead"),
            ),
        }
    }

    pub(crate) fn fencing_token(&self) -> FencingToken {
        match self {
            Held::Lock(guard) => guard.fencing_token().expect("fenced"),
            Held::Leader(leadership) => leadership.term(),
        }
    }

    async fn lost(&self) {
        match self {
            Held::Lock(guard) => drop(guard.lost().await),
            Held::Leader(leadership) => drop(leadership.lost().await),
        }
    }

    pub(crate) async fn release(self) {
        match self {
            Held::Lock(guard) => guard.release().await.expect("release"),
            Held::Leader(leadership) => leadership.resign().await.expect("resign"),
        }
    }
}

/// The guard or the leadership itself, as a user passes it to a fenced write.
impl TokenSource for &Held {
    fn token(&self) -> Result<FencingToken, Error> {
        match self {
            Held::Lock(guard) => guard.token(),
            Held::Leader(leadership) => leadership.token(),
        }
    }
}

/// The run every store's end-to-end test makes: holder A takes the lock or the lead `name`
/// (ttl 1 s) through a proxy; then ([`Self::successor_takes_over`]) A's connections freeze (a
/// stalled process, a cut network) until A itself reports its lease lost, and B takes over.
/// The test writes to its store as A before, as B after, and as A once it thaws `proxy`.
pub(crate) struct StalledHolder {
    pub(crate) proxy: FaultProxy,
    pub(crate) a: Held,
    pub(crate) token_a: FencingToken,
    b: Client,
    kind: Kind,
    name: &'static str,
}

impl StalledHolder {
    pub(crate) async fn take(server: &RedisServer, kind: Kind, name: &'static str) -> Self {
        let proxy = FaultProxy::start(&server.addr()).expect("proxy");
        let client_a = Client::connect(&proxy.url()).await.expect("connect A");
        let a = Held::take(&client_a, kind, name, Duration::ZERO).await;
        StalledHolder {
            proxy,
            token_a: a.fencing_token(),
            a,
            b: client(server).await,
            kind,
            name,
        }
    }

    /// Freezes A until it reports its lease lost (the event), then B takes over; what B
    /// holds and its token, above A's.
    pub(crate) async fn successor_takes_over(&self) -> (Held, FencingToken) {
        self.proxy.freeze();
        self.a.lost().await;
        let b = Held::take(&self.b, self.kind, self.name, Duration::from_secs(10)).await;
        let token_b = b.fencing_token();
        assert!(token_b > self.token_a, "{token_b} after {}", self.token_a);
        (b, token_b)
    }
}

/// The run of [`StalledHolder`] on a Redis key: each writes passing what it holds, and A
/// comes back and writes, fenced or not. Returns the value left.
async fn stalled_holder_writes(kind: Kind, fenced_writes: bool) -> String {
    let server = RedisServer::start();
    let run = StalledHolder::take(&server, kind, "resource-lock").await;
    let (b, token_b) = run.successor_takes_over().await;
    let mut store_b = store(&server).await;
    store_b.set("resource", "B", &b).await.expect("B writes");
    run.proxy.thaw();
    if fenced_writes {
        let mut store_a = store(&server).await;
        stale(
            store_a.set("resource", "A", &run.a).await,
            run.token_a,
            token_b,
        );
    } else {
        let _: () = server
            .async_connection()
            .await
            .set("resource", "A")
            .await
            .unwrap();
    }
    drop(run);
    b.release().await;
    server
        .async_connection()
        .await
        .get("resource")
        .await
        .unwrap()
}

/// End to end: the stalled holder's late write is refused by the store, and B's value stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_holders_late_write_is_refused_and_the_successors_stands() {
    assert_eq!(stalled_holder_writes(Kind::Lock, true).await, "B");
}

/// The control: the same run with a plain write loses B's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fencing_the_stalled_holder_overwrites_its_successor() {
    assert_eq!(stalled_holder_writes(Kind::Lock, false).await, "A");
}

/// End to end for leaders: a leader frozen past its lease writes with its term once it
/// resumes; the store refuses it, and the next leader's value stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_leaders_late_write_is_refused_and_the_next_leaders_stands() {
    assert_eq!(stalled_holder_writes(Kind::Leader, true).await, "B");
}

/// The control for leaders: the same run with a plain write loses the next leader's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fencing_the_stalled_leader_overwrites_the_next_leaders_write() {
    assert_eq!(stalled_holder_writes(Kind::Leader, false).await, "A");
}
