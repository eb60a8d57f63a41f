//! Writes the store fences (`distlock::fenced`): a token below the highest a key has seen is
//! refused, atomically with the comparison, and a holder stalled past its lease cannot
//! overwrite its successor's write, end to end.

use crate::common;

use std::time::Duration;

use common::client;
use distlock::fenced::{mark_key, FencedRedis};
use distlock::{Client, Error, FencingToken, Guard};
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

/// The run every store's end-to-end test makes: holder A takes the lock `name` with fencing
/// (ttl 1 s) through a proxy; then ([`Self::successor_takes_over`]) A's connections freeze (a
/// stalled process, a cut network) until A's own guard reports its lease lost, and B takes the
/// lock. The test writes to its store as A before, as B after, and as A once it thaws `proxy`.
pub(crate) struct StalledHolder {
    pub(crate) proxy: FaultProxy,
    pub(crate) guard_a: Guard,
    pub(crate) token_a: FencingToken,
    b: Client,
    name: &'static str,
}

impl StalledHolder {
    pub(crate) async fn take(server: &RedisServer, name: &'static str) -> StalledHolder {
        let proxy = FaultProxy::start(&server.addr()).expect("proxy");
        let a = Client::connect(&proxy.url()).await.expect("connect A");
        let guard_a = a
            .lock(name)
            .fencing(true)
            .ttl(Duration::from_secs(1))
            .try_acquire()
            .await
            .expect("free");
        let token_a = guard_a.fencing_token().expect("fenced");
        StalledHolder {
            proxy,
            guard_a,
            token_a,
            b: client(server).await,
            name,
        }
    }

    /// Freezes A until its guard reports the lease lost (the event), then B takes the lock;
    /// B's guard and token, above A's.
    pub(crate) async fn successor_takes_over(&self) -> (Guard, FencingToken) {
        self.proxy.freeze();
        self.guard_a.lost().await;
        let guard_b = self
            .b
            .lock(self.name)
            .fencing(true)
            .wait(Duration::from_secs(10))
            .acquire()
            .await
            .expect("B gets the lock once A's lease ended");
        let token_b = guard_b.fencing_token().expect("fenced");
        assert!(token_b > self.token_a);
        (guard_b, token_b)
    }
}

/// The run of [`StalledHolder`] on a Redis key: A comes back and writes, fenced or not.
/// Returns the value left.
async fn stalled_holder_writes(fenced_writes: bool) -> String {
    let server = RedisServer::start();
    let run = StalledHolder::take(&server, "resource-lock").await;
    let (guard_b, token_b) = run.successor_takes_over().await;
    let mut store_b = store(&server).await;
    store_b
        .set("resource", "B", token_b)
        .await
        .expect("B writes");
    run.proxy.thaw();
    if fenced_writes {
        let mut store_a = store(&server).await;
        stale(
            store_a.set("resource", "A", run.token_a).await,
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
    guard_b.release().await.expect("release");
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
    assert_eq!(stalled_holder_writes(true).await, "B");
}

/// The control: the same run with a plain write loses B's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fencing_the_stalled_holder_overwrites_its_successor() {
    assert_eq!(stalled_holder_writes(false).await, "A");
}
