//! No wake-up missed, no token going back: the paths where a free lock stayed idle while
//! callers waited, or a fencing token went below an earlier one, each reached for real (a
//! killed writer process, a reply lost behind the fault proxy, an operator's forced unlock).
//! Each test names the defect it pins (issue 36); each failed on the code before its fix. The
//! semaphore's item 1 is pinned where it lives (`distlock/src/channels.rs`'s tests).

use crate::common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{as_other_owner, client, contender, fence_key, intents_key, lock_key, subscribers};
use distlock::Client;
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer};
use redis::AsyncCommands;

/// How long a test waits for an event that takes milliseconds.
const EVENT_LIMIT: Duration = Duration::from_secs(10);
/// A lease far longer than any waiter here waits: a waiter served before it ends was woken,
/// or bounded by something shorter, never by this lease.
const LONG: Duration = Duration::from_secs(120);

async fn exists(server: &RedisServer, key: &str) -> bool {
    let mut c = server.async_connection().await;
    c.exists(key).await.expect("EXISTS")
}

/// Item 2. Writer W0 holds; a reader waits and learns W0's lease end (two minutes off); a
/// writer in another process comes to wait, registers its intent and is killed; W0 leaves.
/// The reader, woken by W0's release, is turned away by the dead writer's intent, which
/// nothing withdraws and nothing announces when it lapses: it must try again when the intent
/// ends (2 s at most), not sleep to W0's old lease end (it waited out its whole 10 s wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_turned_away_by_a_crashed_writers_intent_waits_only_for_the_intent() {
    let server = RedisServer::start();
    let (holders, readers) = (client(&server).await, client(&server).await);
    let name = "lapsing-intent";
    let w0 = holders
        .write(name)
        .ttl(LONG)
        .try_acquire()
        .await
        .expect("free");
    let reader = {
        let readers = readers.clone();
        tokio::spawn(as_other_owner(async move {
            readers
                .read(name)
                .ttl(LONG)
                .wait(EVENT_LIMIT)
                .acquire()
                .await
        }))
    };
    let asleep = wait_until_async(EVENT_LIMIT, || async {
        distlock::__private::local_waiters(&readers, name) == 1
            && subscribers(&server, &lock_key(name)).await > 0
    })
    .await;
    assert!(asleep, "the reader waits");
    let mut writer = Command::new(contender())
        .args(["wait", "write", &server.url(), name, "30000"])
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn the writer");
    let mut raw = server.async_connection().await;
    // The set's placeholder, and the writer's intent.
    let intends = wait_until_async(EVENT_LIMIT, || {
        let mut raw = raw.clone();
        async move { raw.zcard::<_, u64>(intents_key(name)).await.expect("ZCARD") >= 2 }
    })
    .await;
    assert!(intends, "the writer registered its intent");
    writer.kill().expect("SIGKILL the writer");
    writer.wait().expect("reap the writer");
    w0.release().await.expect("release");
    let got = reader.await.expect("reader task");
    assert!(
        got.is_ok(),
        "the reader slept past the dead writer's intent: {got:?}"
    );
    let left: u64 = raw.zcard(intents_key(name)).await.expect("ZCARD");
    assert!(left <= 2, "{left}");
}

/// Item 4. Three readers of one process wait behind a writer stuck with a long lease; an
/// operator forces the lock open. Every one of them must get in: the forced unlock published
/// the payload that wakes one waiter per process, and the two others slept to the forced
/// writer's lease end (their whole wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_unlock_wakes_every_waiter_of_a_process() {
    let server = RedisServer::start();
    let (holders, readers) = (client(&server).await, client(&server).await);
    let name = "forced-open";
    let _stuck = holders
        .write(name)
        .ttl(LONG)
        .try_acquire()
        .await
        .expect("free");
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let readers = readers.clone();
            tokio::spawn(as_other_owner(async move {
                readers
                    .read(name)
                    .ttl(LONG)
                    .wait(EVENT_LIMIT)
                    .acquire()
                    .await
            }))
        })
        .collect();
    let asleep = wait_until_async(EVENT_LIMIT, || async {
        distlock::__private::local_waiters(&readers, name) == 3
    })
    .await;
    assert!(asleep, "the three readers wait");
    assert!(holders
        .force_unlock(name, "stuck writer")
        .await
        .expect("force"));
    let mut inside = Vec::new();
    for task in tasks {
        inside.push(
            task.await
                .expect("reader task")
                .expect("every reader is woken by the forced unlock"),
        );
    }
    assert_eq!(inside.len(), 3);
}

/// A client whose every connection goes through `proxy`. Its response timeout is longer than
/// any test holds a reply back: the reply is lost by the reset the test makes, not by the
/// client's own timeout, whatever the machine's load.
/// One cycle of each kind first: a client's first hold on a server writes its process record
/// and reads the server's eviction policy, and a script's first call loads it (`NOSCRIPT`),
/// round trips a held reply would stall.
async fn behind(proxy: &FaultProxy) -> Client {
    let locks = Client::builder(&proxy.url())
        .response_timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("connect");
    let warm = locks.lock("warm-up").try_acquire().await.expect("free");
    warm.release().await.expect("release");
    let warm = locks.lock_many(["warm-a", "warm-b"]).try_acquire().await;
    warm.expect("free").release().await.expect("release");
    locks
}

/// Holds back the replies of the proxy's connections until `taken` holds (the request reached
/// the server and changed it), runs `meanwhile`, then loses the held replies with a reset:
/// the client retries the call, which finds what `meanwhile` left. (A call that waits: a
/// single attempt reports the lost connection instead of retrying.)
async fn lose_reply_after<T, M, F>(
    proxy: &FaultProxy,
    call: impl std::future::Future<Output = T>,
    taken: impl Fn() -> F,
    meanwhile: impl std::future::Future<Output = M>,
) -> (T, M)
where
    F: std::future::Future<Output = bool>,
{
    proxy.reply_latency(Duration::from_secs(3600));
    tokio::join!(call, async {
        assert!(
            wait_until_async(EVENT_LIMIT, &taken).await,
            "the call reached the server"
        );
        let left = meanwhile.await;
        proxy.reply_latency(Duration::ZERO);
        proxy.reset_all();
        left
    })
}

/// Item 3, a single name. A fenced acquisition takes the lock, its reply is lost, and the
/// fencing counter is gone before the retry (an operator, eviction, a restart without
/// persistence): the retry finds the lock its own and must hand out a token minted as every
/// other is, above every earlier one. It read the counter instead: 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_retry_after_a_lost_reply_gets_a_token_above_every_earlier_one() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("proxy");
    let locks = behind(&proxy).await;
    let name = "fenced-retry";
    let first = locks
        .lock(name)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let earlier = first.fencing_token().expect("fenced");
    first.release().await.expect("release");
    let raw = server.async_connection().await;
    let retried = lose_reply_after(
        &proxy,
        locks
            .lock(name)
            .fencing(true)
            .ttl(LONG)
            .wait(EVENT_LIMIT)
            .acquire(),
        || async { exists(&server, &lock_key(name)).await },
        async {
            let _: () = raw.clone().del(fence_key(name)).await.expect("DEL");
        },
    )
    .await
    .0
    .expect("the retry finds the lock its own");
    let token = retried.fencing_token().expect("fenced");
    assert!(
        token > earlier,
        "the retry's token {token} is not above the earlier {earlier}"
    );
}

/// Item 3, several names: the same through `lock_many`, whose retry that found every name its
/// own returned the highest counter as it stood (0 once the counters were gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_retry_of_several_names_gets_a_token_above_every_earlier_one() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("proxy");
    let locks = behind(&proxy).await;
    let names = ["fenced-a", "fenced-b"];
    let first = locks
        .lock_many(names)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let earlier = first.fencing_token().expect("fenced");
    first.release().await.expect("release");
    let raw = server.async_connection().await;
    let retried = lose_reply_after(
        &proxy,
        locks
            .lock_many(names)
            .fencing(true)
            .ttl(LONG)
            .wait(EVENT_LIMIT)
            .acquire(),
        || async { exists(&server, &lock_key(names[1])).await },
        async {
            for name in names {
                let _: () = raw.clone().del(fence_key(name)).await.expect("DEL");
            }
        },
    )
    .await
    .0
    .expect("the retry finds every name its own");
    let token = retried.fencing_token().expect("fenced");
    assert!(
        token > earlier,
        "the retry's token {token} is not above the earlier {earlier}"
    );
}

/// Item 5, busy. `lock_many([a, b])` takes both names but its reply is lost; meanwhile a
/// waiter of `b` finds it held (and sleeps to that two-minute lease), an operator frees `a`
/// and another client takes it. The retry finds `a` busy and gives `b` back: that must wake
/// `b`'s waiter, as a release does. It was deleted in silence, the waiter's mark left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_that_gives_a_name_back_wakes_its_waiters() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("proxy");
    let (locks, others) = (behind(&proxy).await, client(&server).await);
    let (a, b) = ("given-a", "given-b");
    let (set, (b_waiter, _a)) = lose_reply_after(
        &proxy,
        locks
            .lock_many([a, b])
            .ttl(LONG)
            .wait(Duration::from_secs(1))
            .acquire(),
        || async { exists(&server, &lock_key(b)).await },
        async {
            let b_waiter = {
                let others = others.clone();
                tokio::spawn(
                    async move { others.lock(b).ttl(LONG).wait(EVENT_LIMIT).acquire().await },
                )
            };
            let asleep = wait_until_async(EVENT_LIMIT, || async {
                distlock::__private::local_waiters(&others, b) == 1
                    && subscribers(&server, &lock_key(b)).await > 0
            })
            .await;
            assert!(asleep, "b's waiter sleeps on the set's hold");
            assert!(others.force_unlock(a, "test").await.expect("force"));
            let a_held = others
                .lock(a)
                .ttl(LONG)
                .try_acquire()
                .await
                .expect("a is free");
            (b_waiter, a_held)
        },
    )
    .await;
    let got_b = b_waiter.await.expect("waiter task");
    assert!(
        got_b.is_ok(),
        "b's waiter slept through the set's giving back of b: {got_b:?}"
    );
    assert!(set.is_err(), "a stays held by the other client");
}

/// Item 5, refused. As above, but `a` is found holding the application's data (a string
/// without expiry): the call fails, and when it returns no name may hold its token. `b` was
/// left to a background give-back that ran after the caller had its error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_set_holds_no_name_when_the_call_returns() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("proxy");
    let locks = behind(&proxy).await;
    let others = client(&server).await;
    let (a, b) = ("refused-a", "refused-b");
    let raw = server.async_connection().await;
    let refused = lose_reply_after(
        &proxy,
        locks
            .lock_many([a, b])
            .ttl(LONG)
            .wait(EVENT_LIMIT)
            .acquire(),
        || async { exists(&server, &lock_key(b)).await },
        async {
            assert!(others.force_unlock(a, "test").await.expect("force"));
            let _: () = raw
                .clone()
                .set(lock_key(a), "the application's")
                .await
                .expect("SET");
            // From here on every chunk takes 300 ms through the proxy: a give-back sent after
            // the caller has its error cannot reach the server before the check below.
            proxy.latency(Duration::from_millis(300), Duration::ZERO);
        },
    )
    .await
    .0;
    assert!(refused.is_err(), "{refused:?}");
    assert!(
        !exists(&server, &lock_key(b)).await,
        "b is still held when the refused call returns ({refused:?})"
    );
}
