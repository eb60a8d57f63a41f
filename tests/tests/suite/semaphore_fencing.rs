//! Semaphore permits that can be fenced: a fenced permit holds a permit slot (0 to N-1, the
//! lowest no live fenced permit holds) kept for its lease, and a store keeps one mark per
//! slot. The scripts' slot rules against a real server (a retry keeps its slot, an expired or
//! released permit frees its slot, slots unique among live fenced permits, unfenced permits
//! take none), inspection, and end to end: the stalled holder of a slot is refused once that
//! slot's next holder wrote, and a live holder of another slot never is.

use crate::common;
use crate::fenced::stale;
use crate::fenced_postgres::connect;
use crate::scripts::{run, script};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{client, lock_key, slots_key};
use distlock::fenced::postgres::Fence;
use distlock::fenced::{permit_mark_key, FencedRedis};
use distlock::{Client, FencingToken, Guard};
use distlock_testkit::{wait_until_async, FaultProxy, PostgresServer, RedisServer};
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Value};
use tokio_postgres::types::ToSql;

/// How long a test waits for an event that should come far sooner (a loaded 2-core machine).
const EVENT_LIMIT: Duration = Duration::from_secs(10);

/// The token a guard presents: its value and, for a fenced permit, its slot.
fn token_of(guard: &Guard) -> FencingToken {
    guard.fencing_token().expect("taken with fencing")
}

/// The semaphore scripts as the library composes them, run behind the scripts' key check.
struct Scripts {
    conn: MultiplexedConnection,
    acquire: String,
    release: String,
    lock: String,
    slots: String,
    fence: String,
    permits: u32,
}

/// An acquire's reply: the token and the permit slot when fenced, or busy.
#[derive(Debug, PartialEq)]
enum Reply {
    Fenced { token: i64, slot: i64 },
    Unfenced,
    Busy,
}

impl Scripts {
    async fn new(server: &RedisServer, name: &str, permits: u32) -> Scripts {
        let with_prelude = |body: &str| script(&["fence.lua", "semaphore/prelude.lua", body]);
        Scripts {
            conn: server.async_connection().await,
            acquire: with_prelude("semaphore/acquire.lua"),
            release: with_prelude("semaphore/release.lua"),
            lock: lock_key(name),
            slots: slots_key(name),
            fence: common::fence_key(name),
            permits,
        }
    }

    /// One acquire by `owner` (`retry`: an earlier try's reply was lost).
    async fn acquire(&mut self, owner: &str, ttl_ms: u64, fenced: bool, retry: bool) -> Reply {
        let flag = |on: bool| if on { "1" } else { "0" };
        let mut keys = vec![self.lock.as_str(), self.slots.as_str()];
        if fenced {
            keys.push(&self.fence);
        }
        let (ttl, permits) = (ttl_ms.to_string(), self.permits.to_string());
        let args = [
            owner,
            &ttl,
            flag(retry),
            "1",
            "",
            "",
            flag(fenced),
            "0",
            &permits,
        ];
        let reply = run(&mut self.conn, "acquire", &self.acquire, &keys, &args).await;
        match reply {
            Value::Array(items) => match items.as_slice() {
                [Value::Int(1), Value::Int(token), Value::Int(slot)] => Reply::Fenced {
                    token: *token,
                    slot: *slot,
                },
                [Value::Int(1), Value::Int(-1)] => Reply::Unfenced,
                [Value::Int(0), _] => Reply::Busy,
                other => panic!("unexpected acquire reply: {other:?}"),
            },
            other => panic!("unexpected acquire reply: {other:?}"),
        }
    }

    async fn fenced(&mut self, owner: &str) -> (i64, i64) {
        match self.acquire(owner, 100_000, true, false).await {
            Reply::Fenced { token, slot } => (token, slot),
            other => panic!("{owner}: {other:?}"),
        }
    }

    async fn release(&mut self, owner: &str) -> bool {
        let keys = [self.lock.as_str(), self.slots.as_str()];
        let reply = run(&mut self.conn, "release", &self.release, &keys, &[owner]).await;
        reply == Value::Int(1)
    }

    /// The slot recorded for `owner`, if any.
    async fn slot_of(&mut self, owner: &str) -> Option<i64> {
        self.conn.hget(&self.slots, owner).await.expect("HGET")
    }
}

/// A retry whose earlier reply was lost finds its own permit: the same slot (also when a
/// lower one is free by then), a token of its own above the lost one, and no second permit.
#[tokio::test]
async fn a_retried_fenced_acquisition_keeps_its_slot() {
    let server = RedisServer::start();
    let mut s = Scripts::new(&server, "retry", 3).await;
    let (_, slot_a) = s.fenced("a\th").await;
    let (first, slot_b) = s.fenced("b\th").await;
    assert_eq!((slot_a, slot_b), (0, 1));
    assert!(s.release("a\th").await);
    match s.acquire("b\th", 100_000, true, true).await {
        Reply::Fenced { token, slot } => {
            assert_eq!(slot, slot_b, "the retry keeps its slot");
            assert!(
                token > first,
                "the retry's token is its own: {token} > {first}"
            );
        }
        other => panic!("{other:?}"),
    }
    let held: i64 = s.conn.zcard(&s.lock).await.expect("ZCARD");
    assert_eq!(held, 2, "the limit and B's one permit");
    assert_eq!(s.fenced("c\th").await.1, 0);
    assert_eq!(s.fenced("d\th").await.1, 2);
}

/// A permit whose lease ended, or that was released, frees its slot: the next fenced permit
/// takes the lowest free slot, and the ended permit's record is gone.
#[tokio::test]
async fn an_expired_or_released_permit_frees_its_slot() {
    let server = RedisServer::start();
    let mut s = Scripts::new(&server, "ends", 3).await;
    // Long enough that B is taken while A's lease runs, on a loaded machine too.
    let short = match s.acquire("a\th", 1_500, true, false).await {
        Reply::Fenced { slot, .. } => slot,
        other => panic!("{other:?}"),
    };
    assert_eq!(short, 0);
    assert_eq!(s.fenced("b\th").await.1, 1);
    // The server's clock passes A's lease (the server decides; nothing else ends it).
    let lock = s.lock.clone();
    let ended = wait_until_async(EVENT_LIMIT, || {
        let lock = lock.clone();
        let server = &server;
        async move {
            let mut c = server.async_connection().await;
            let ends: Option<f64> = c.zscore(&lock, "a\th").await.expect("ZSCORE");
            let (secs, micros): (i64, i64) =
                redis::cmd("TIME").query_async(&mut c).await.expect("TIME");
            ends.is_some_and(|ends| (secs * 1000 + micros / 1000) as f64 > ends)
        }
    })
    .await;
    assert!(ended);
    let (_, slot_c) = s.fenced("c\th").await;
    assert_eq!(slot_c, 0, "the expired permit's slot is the lowest free");
    assert_eq!(
        s.slot_of("a\th").await,
        None,
        "the stale record was removed"
    );
    assert!(s.release("b\th").await);
    assert_eq!(s.slot_of("b\th").await, None, "released with its permit");
    assert_eq!(s.fenced("d\th").await.1, 1, "the released permit's slot");
}

/// Over a long run of fenced and unfenced acquisitions and releases, every live fenced permit
/// has a slot below N of its own, each new one the lowest free; unfenced permits take none but
/// count against the limit.
#[tokio::test]
async fn slots_are_unique_among_live_fenced_permits_and_unfenced_ones_take_none() {
    let server = RedisServer::start();
    let n = 4;
    let mut s = Scripts::new(&server, "many", n).await;
    // A fixed pseudo-random sequence (xorshift), so a failure replays.
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut fenced: BTreeMap<String, i64> = BTreeMap::new();
    let mut unfenced: BTreeSet<String> = BTreeSet::new();
    for step in 0..300 {
        let held = fenced.len() + unfenced.len();
        if held > 0 && next() % 2 == 0 {
            let all: Vec<String> = fenced.keys().chain(&unfenced).cloned().collect();
            let owner = &all[next() as usize % all.len()];
            assert!(s.release(owner).await, "step {step}: {owner} held");
            fenced.remove(owner);
            unfenced.remove(owner);
            continue;
        }
        let owner = format!("o{step}\th");
        let with_fencing = next() % 3 != 0;
        let reply = s.acquire(&owner, 100_000, with_fencing, false).await;
        if held == n as usize {
            assert_eq!(reply, Reply::Busy, "step {step}");
            continue;
        }
        match reply {
            Reply::Fenced { slot, .. } => {
                assert!(with_fencing);
                let lowest_free = (0..).find(|s| !fenced.values().any(|v| v == s));
                assert_eq!(Some(slot), lowest_free, "step {step}: {fenced:?}");
                fenced.insert(owner, slot);
            }
            Reply::Unfenced => {
                assert!(!with_fencing);
                assert_eq!(s.slot_of(&owner).await, None);
                unfenced.insert(owner);
            }
            Reply::Busy => panic!("step {step}: busy with {held} of {n} held"),
        }
        let slots: BTreeSet<i64> = fenced.values().copied().collect();
        assert_eq!(slots.len(), fenced.len(), "step {step}: {fenced:?}");
        assert!(slots.iter().all(|&slot| slot < i64::from(n)));
    }
}

/// Through the client: fenced permits get slots (seen by inspection too), an unfenced one
/// none, and a permit whose lease ended while its holder stalled hands its slot to the next
/// fenced holder, with a larger token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_reports_each_permits_slot_and_an_ended_lease_frees_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let permit = |fencing: bool| locks.semaphore("pool", 3).fencing(fencing);
    let a = permit(true)
        .ttl(Duration::from_millis(500))
        .watchdog(false)
        .try_acquire()
        .await
        .expect("free");
    let plain = permit(false).try_acquire().await.expect("free");
    let c = permit(true).try_acquire().await.expect("free");
    let slot = |guard: &Guard| guard.fencing_token().and_then(FencingToken::slot);
    assert_eq!((slot(&a), slot(&plain), slot(&c)), (Some(0), None, Some(1)));
    assert_eq!(plain.fencing_token(), None);
    let info = locks.inspect("pool").await.expect("inspect");
    let mut slots: Vec<Option<u32>> = info.permit_holders.iter().map(|p| p.slot).collect();
    slots.sort();
    assert_eq!(slots, [None, Some(0), Some(1)]);
    // The semaphore is full; the next fenced holder gets a permit when A's lease ends.
    let b = permit(true)
        .wait(EVENT_LIMIT)
        .acquire()
        .await
        .expect("A's permit frees at its ttl");
    assert!(!a.is_held());
    assert_eq!(slot(&b), Some(0), "A's slot, the lowest free");
    assert!(token_of(&b) > token_of(&a));
    for guard in [b, plain, c] {
        guard.release().await.expect("release");
    }
}

/// Two live holders of two slots write one resource in turn, the older token after the newer:
/// with a mark per slot both are accepted; compared as lock tokens (one mark for the key),
/// the older live holder would be refused, which is why permits carry slots.
#[tokio::test]
async fn live_holders_of_two_slots_both_write_where_one_mark_refuses_the_older() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let older = locks
        .semaphore("writers", 2)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let newer = locks
        .semaphore("writers", 2)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let (old, new) = (token_of(&older), token_of(&newer));
    assert!(old < new && old.slot() != new.slot());
    let mut store = FencedRedis::new(server.async_connection().await);
    for round in 0..3 {
        store.incr_by("count", 1, new).await.expect("the newer");
        store
            .incr_by("count", 1, old)
            .await
            .unwrap_or_else(|e| panic!("round {round}: a live holder refused: {e}"));
    }
    assert_eq!(
        store.highest_permit_token("count", 0).await.unwrap(),
        Some(old)
    );
    assert_eq!(
        store.highest_permit_token("count", 1).await.unwrap(),
        Some(new)
    );
    // The same writes as lock tokens: one mark, and the older live holder is refused.
    let (old, new) = (FencingToken::new(old.get()), FencingToken::new(new.get()));
    store.incr_by("one-mark", 1, new).await.expect("the newer");
    stale(store.incr_by("one-mark", 1, old).await, old, new);
    older.release().await.expect("release");
    newer.release().await.expect("release");
}

/// The stalled-holder run for a semaphore of two permits: holder A takes a fenced permit
/// (slot 0, ttl 1 s) through a proxy, C a fenced permit (slot 1) it keeps renewed; then
/// ([`Self::successor_takes_over`]) A's connections freeze until its guard reports the lease
/// lost, and B takes the freed permit: A's slot, a token above A's and C's.
pub(crate) struct StalledPermit {
    pub(crate) proxy: FaultProxy,
    pub(crate) guard_a: Guard,
    pub(crate) token_a: FencingToken,
    pub(crate) guard_c: Guard,
    pub(crate) token_c: FencingToken,
    b: Client,
}

impl StalledPermit {
    const NAME: &str = "writers";

    pub(crate) async fn take(server: &RedisServer) -> StalledPermit {
        let proxy = FaultProxy::start(&server.addr()).expect("proxy");
        let a = Client::connect(&proxy.url()).await.expect("connect A");
        let guard_a = a
            .semaphore(Self::NAME, 2)
            .fencing(true)
            .ttl(Duration::from_secs(1))
            .try_acquire()
            .await
            .expect("free");
        let b = client(server).await;
        let guard_c = b
            .semaphore(Self::NAME, 2)
            .fencing(true)
            .try_acquire()
            .await
            .expect("free");
        let (token_a, token_c) = (token_of(&guard_a), token_of(&guard_c));
        assert_eq!((token_a.slot(), token_c.slot()), (Some(0), Some(1)));
        StalledPermit {
            proxy,
            guard_a,
            token_a,
            guard_c,
            token_c,
            b,
        }
    }

    /// Freezes A until its guard reports the lease lost (the event), then B takes the permit;
    /// B's guard and token.
    pub(crate) async fn successor_takes_over(&self) -> (Guard, FencingToken) {
        self.proxy.freeze();
        self.guard_a.lost().await;
        let guard_b = self
            .b
            .semaphore(Self::NAME, 2)
            .fencing(true)
            .wait(EVENT_LIMIT)
            .acquire()
            .await
            .expect("B gets a permit once A's lease ended");
        let token_b = token_of(&guard_b);
        assert_eq!(token_b.slot(), self.token_a.slot(), "A's slot");
        assert!(token_b > self.token_a && token_b > self.token_c);
        assert!(self.guard_c.is_held(), "C stays a live holder throughout");
        (guard_b, token_b)
    }
}

/// The run of [`StalledPermit`] on a Redis hash: C writes, B writes, C (live, in the other
/// slot, with a token below B's) writes again, and A comes back and writes, fenced or not.
/// Returns the value left.
async fn stalled_permit_writes(fenced_writes: bool) -> String {
    let server = RedisServer::start();
    let run = StalledPermit::take(&server).await;
    let mut store = FencedRedis::new(server.async_connection().await);
    store
        .hincr_by("resource", "c", 1, run.token_c)
        .await
        .expect("C writes");
    let (guard_b, token_b) = run.successor_takes_over().await;
    store
        .hset("resource", "value", "B", token_b)
        .await
        .expect("B writes");
    assert_eq!(
        store
            .hincr_by("resource", "c", 1, run.token_c)
            .await
            .expect("a live holder of another slot is never refused"),
        2
    );
    run.proxy.thaw();
    if fenced_writes {
        stale(
            store.hset("resource", "value", "A", run.token_a).await,
            run.token_a,
            token_b,
        );
        let mark: Option<u64> = server
            .async_connection()
            .await
            .get(permit_mark_key(b"resource", 0))
            .await
            .unwrap();
        assert_eq!(mark, Some(token_b.get()), "slot 0's mark is B's token");
    } else {
        let _: () = server
            .async_connection()
            .await
            .hset("resource", "value", "A")
            .await
            .unwrap();
    }
    drop(run);
    guard_b.release().await.expect("release");
    server
        .async_connection()
        .await
        .hget("resource", "value")
        .await
        .unwrap()
}

/// End to end: the stalled permit holder's late write is refused by the store, B's value
/// stands, and the live holder of the other slot wrote throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_permit_holders_late_write_is_refused_and_live_holders_are_not() {
    assert_eq!(stalled_permit_writes(true).await, "B");
}

/// The control: the same run with a plain write loses B's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fencing_the_stalled_permit_holder_overwrites_its_successor() {
    assert_eq!(stalled_permit_writes(false).await, "A");
}

/// The run of [`StalledPermit`] on a PostgreSQL row whose fence keeps permit slots: C writes
/// its column, B writes the owner, C writes again (live, in the other slot, its token below
/// B's), and A comes back and writes the owner with its old token, fenced or as a plain
/// `UPDATE`. Returns the owner and C's column the row is left with.
async fn stalled_permit_writes_postgres(fenced_write: bool) -> (String, String) {
    let server = RedisServer::start();
    let pg = PostgresServer::start();
    let db = connect(&pg).await;
    db.batch_execute(
        "CREATE TABLE shards (id bigint PRIMARY KEY, owner text NOT NULL, c text NOT NULL)",
    )
    .await
    .expect("create the table");
    let fence = Fence::new("shards", "fencing_token").permit_slots("fencing_slots");
    fence.install(&db).await.expect("install the fence");
    let id = 1_i64;
    let key: &[(&str, &(dyn ToSql + Sync))] = &[("id", &id)];

    let run = StalledPermit::take(&server).await;
    fence
        .upsert(&db, key, &[("owner", &"A"), ("c", &"C1")], run.token_a)
        .await
        .expect("A writes while it holds its permit");
    fence
        .update(&db, key, &[("c", &"C2")], run.token_c)
        .await
        .expect("C writes");
    let (guard_b, token_b) = run.successor_takes_over().await;
    fence
        .update(&db, key, &[("owner", &"B")], token_b)
        .await
        .expect("B writes");
    fence
        .update(&db, key, &[("c", &"C3")], run.token_c)
        .await
        .expect("a live holder of another slot is never refused");
    run.proxy.thaw();
    if fenced_write {
        let late = fence
            .update(&db, key, &[("owner", &"A")], run.token_a)
            .await;
        stale(late, run.token_a, token_b);
    } else {
        db.execute("UPDATE shards SET owner = 'A' WHERE id = 1", &[])
            .await
            .expect("an unfenced write is not refused");
    }
    drop(run);
    guard_b.release().await.expect("release");
    let row = db
        .query_one(
            "SELECT owner, c, fencing_slots FROM shards WHERE id = 1",
            &[],
        )
        .await
        .expect("the row");
    let marks: Vec<Option<i64>> = row.get(2);
    let slot_0 = marks.first().copied().flatten();
    assert_eq!(
        slot_0.map(|t| t as u64),
        Some(token_b.get()),
        "slot 0's mark is B's token: {marks:?}"
    );
    (row.get(0), row.get(1))
}

/// End to end on PostgreSQL: the stalled permit holder's late write is refused by the table,
/// B's value stands, and the live holder of the other slot wrote throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_permit_holders_late_write_is_refused_by_postgres() {
    assert_eq!(
        stalled_permit_writes_postgres(true).await,
        ("B".to_owned(), "C3".to_owned())
    );
}

/// The control: the same run with a plain `UPDATE` (no token) loses B's value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_the_stalled_permit_holder_overwrites_its_successor_in_postgres() {
    assert_eq!(
        stalled_permit_writes_postgres(false).await,
        ("A".to_owned(), "C3".to_owned())
    );
}
