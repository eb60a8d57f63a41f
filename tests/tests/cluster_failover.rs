//! Faults on a real Redis Cluster (3 masters, 3 replicas, `cluster-node-timeout` 1.5 s),
//! formed once for this binary; the tests take turns (each kills or pauses servers).
//!
//! * Replica acknowledgement with every replica of the lock's master paused: acquisitions
//!   fail with `ReplicasNotConfirmed` within the timeout and leave no key behind.
//! * The master of a held lock killed: operations resume after the promotion, the holder
//!   keeps its lease or is told it lost it, no second owner gets in while the first is told
//!   it holds the lock, and fencing tokens keep growing across the promoted replica.

use distlock_testkit::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use common::{fence_key, lock_key};
use distlock::{distributed_lock, Client, Error, LockRequest};
use distlock_testkit::{Keeper, RedisCluster};

static CLUSTER: LazyLock<Keeper<RedisCluster>> = LazyLock::new(|| Keeper::new(RedisCluster::start));

/// Replica acknowledgement timeout in these tests.
const ACK: Duration = Duration::from_millis(300);
/// How long after a master is killed operations must work again: the failure detection
/// (`cluster-node-timeout` 1.5 s, and the time for a majority of masters to agree), the
/// election, and the client noticing the new topology, with room for a loaded machine.
const RESUME_LIMIT: Duration = Duration::from_secs(20);

fn seeds() -> Vec<String> {
    CLUSTER.with(|c| c.urls())
}

fn slot_of(name: &str) -> u16 {
    RedisCluster::slot_of(lock_key(name).as_bytes())
}

fn master_of(name: &str) -> usize {
    let slot = slot_of(name);
    CLUSTER.with(move |c| c.master_of_slot(slot))
}

fn exists_on(server: usize, key: String) -> bool {
    CLUSTER.with(move |c| {
        redis::cmd("EXISTS")
            .arg(key)
            .query::<bool>(&mut c.server(server).connection())
            .expect("EXISTS on the master")
    })
}

fn request<'c>(locks: &'c Client, mode: &str, name: &str) -> LockRequest<'c> {
    match mode {
        "reentrant" => locks.reentrant(name),
        "read" => locks.read(name),
        "write" => locks.write(name),
        _ => locks.lock(name),
    }
}

/// Pauses (SIGSTOP) every replica of the master serving `name`'s slot; returns them.
fn pause_replicas_of(name: &str) -> Vec<usize> {
    let slot = slot_of(name);
    CLUSTER.with(move |c| {
        let replicas = c.replicas_of_slot(slot);
        assert!(!replicas.is_empty(), "the master has a replica");
        for &r in &replicas {
            c.server_mut(r).pause();
        }
        replicas
    })
}

fn resume(servers: Vec<usize>) {
    CLUSTER.with(move |c| {
        for r in servers {
            c.server_mut(r).resume();
        }
        c.wait_settled();
    });
}

#[distributed_lock(key = "{ack}-attr", client = locks, wait = "0s", replicas = 1, replicas_timeout = "300ms")]
async fn acked_call(locks: &Client, ran: &AtomicBool) -> Result<(), Error> {
    ran.store(true, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_replica_paused_acknowledged_acquisitions_fail_and_leave_no_key() {
    let _serial = CLUSTER.serial().await;
    // Per client, and per lock on a client without it.
    let acked = Client::cluster_builder(seeds())
        .replicas(1, ACK)
        .connect()
        .await
        .expect("connect");
    let plain = Client::cluster(seeds()).await.expect("connect");
    for mode in ["setnx", "reentrant", "read", "write"] {
        let name = format!("{{ack}}-{mode}");
        let guard = request(&acked, mode, &name)
            .try_acquire()
            .await
            .expect("a healthy replica confirms");
        guard.release().await.expect("release");
    }
    assert!(acked_call(&plain, &AtomicBool::new(false)).await.is_ok());
    // One hash tag: the four locks share a slot, so one master and its replicas.
    let paused = pause_replicas_of("{ack}-setnx");
    // The attribute: the body never runs on an unconfirmed lock.
    let ran = AtomicBool::new(false);
    let err = acked_call(&plain, &ran).await.expect_err("unconfirmed");
    assert!(matches!(err, Error::ReplicasNotConfirmed { .. }), "{err}");
    assert!(!ran.load(Ordering::SeqCst), "the body did not run");
    assert!(!exists_on(master_of("{ack}-attr"), lock_key("{ack}-attr")));
    for mode in ["setnx", "reentrant", "read", "write"] {
        let name = format!("{{ack}}-{mode}");
        let master = master_of(&name);
        for (who, req) in [
            ("client setting", request(&acked, mode, &name)),
            (
                "lock setting",
                request(&plain, mode, &name).replicas(1, ACK),
            ),
        ] {
            let started = Instant::now();
            let err = req.try_acquire().await.expect_err("no replica can confirm");
            let took = started.elapsed();
            assert!(
                matches!(
                    err,
                    Error::ReplicasNotConfirmed {
                        wanted: 1,
                        confirmed: 0,
                        ..
                    }
                ),
                "{mode} ({who}): {err}"
            );
            assert!(
                took < ACK + Duration::from_secs(2),
                "{mode} ({who}): failed within the timeout, took {took:?}"
            );
            assert!(
                !exists_on(master, lock_key(&name)),
                "{mode} ({who}): the undone acquisition left no key"
            );
        }
    }
    resume(paused);
    // Confirmed again once the replica is back.
    let guard = acked
        .lock("{ack}-setnx")
        .fencing(true)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("confirmed after the replica resumed");
    guard.release().await.expect("release");
}

/// Kills the master serving a held lock. With replica acknowledgement the lock was on the
/// replica before the holder heard of it, so the promoted replica keeps it: the holder keeps
/// its lease and a second client cannot take the lock until the holder releases it.
/// Without it, the holder may keep it or be told it lost it; either way no second owner gets
/// in while the holder is told it holds the lock. Fencing tokens keep growing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_master_of_a_held_lock() {
    let _serial = CLUSTER.serial().await;
    for acked in [true, false] {
        let builder = Client::cluster_builder(seeds());
        let holder = if acked {
            builder.replicas(1, ACK)
        } else {
            builder
        }
        .connect()
        .await
        .expect("connect");
        let other = Client::cluster(seeds()).await.expect("connect");
        let name = format!("fo-{acked}");
        let slot = slot_of(&name);
        let guard = holder
            .lock(&name)
            .fencing(true)
            // Longer than a failover takes: the lease must outlast the renewals that fail
            // while the slot has no master.
            .ttl(Duration::from_secs(10))
            .try_acquire()
            .await
            .expect("free");
        let before = guard.fencing_token().expect("fencing(true)");
        let master = master_of(&name);
        let killed = Instant::now();
        CLUSTER.with(move |c| c.server_mut(master).kill());
        // While the cluster fails over, a second owner never gets in while the holder is
        // told it holds the lock.
        let mut second = None;
        while killed.elapsed() < RESUME_LIMIT {
            match other.lock(&name).fencing(true).try_acquire().await {
                Ok(g) => {
                    assert!(
                        !guard.is_held(),
                        "acked={acked}: a second owner got in while the first is told it holds the lock"
                    );
                    second = Some(g);
                    break;
                }
                // Busy on the promoted master: the lock survived the failover.
                Err(Error::Busy { .. }) if master_of(&name) != master => break,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
        let (promoted, took) = CLUSTER.with(move |c| c.wait_failover(slot, master));
        let _ = took;
        println!(
            "acked={acked}: server {promoted} promoted, operations resumed {:?} after the kill",
            killed.elapsed()
        );
        assert!(killed.elapsed() < RESUME_LIMIT);
        if acked {
            assert!(
                second.is_none(),
                "the acknowledged lock survived the failover"
            );
            // Renewed on the promoted master: still held after more than a ttl.
            tokio::time::sleep(Duration::from_secs(11)).await;
            assert!(
                guard.is_held(),
                "the acknowledged lock is still held after a ttl"
            );
            assert!(
                matches!(
                    other.lock(&name).fencing(true).try_acquire().await,
                    Err(Error::Busy { .. })
                ),
                "nobody else can take it"
            );
            guard
                .release()
                .await
                .expect("the holder releases on the promoted master");
        } else {
            // Kept (it was replicated before the kill) or reported lost; never both owners.
            println!(
                "not acked: holder still holds: {}, second got in: {}",
                guard.is_held(),
                second.is_some()
            );
            if guard.is_held() {
                guard.release().await.expect("release");
            }
        }
        drop(second);
        // Operations resume: the next owner gets the lock on the promoted master, with a
        // larger token (the promoted replica's counter, or its clock floor).
        let started = Instant::now();
        let next = other
            .lock(&name)
            .fencing(true)
            .wait(RESUME_LIMIT)
            .acquire()
            .await
            .expect("operations resume after the promotion");
        println!(
            "acked={acked}: next acquisition after {:?}",
            started.elapsed()
        );
        assert!(
            next.fencing_token().expect("fencing(true)") > before,
            "tokens never go backwards across a failover: {} then {}",
            before,
            next.fencing_token().expect("fencing(true)")
        );
        next.release().await.expect("release");
        CLUSTER.with(move |c| {
            c.server_mut(master).restart();
            c.wait_settled();
        });
    }
}

/// A promoted replica that lost the fencing counter (here: deleted on the master and so on
/// its replicas, the worst case of a lagging replica) starts it at the server clock in
/// microseconds, above every token issued before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_keep_growing_when_the_counter_is_lost() {
    let _serial = CLUSTER.serial().await;
    let locks = Client::cluster(seeds()).await.expect("connect");
    let name = "fo-floor";
    let first = locks
        .lock(name)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    let before = first.fencing_token().expect("fencing(true)");
    first.release().await.expect("release");
    let master = master_of(name);
    CLUSTER.with(move |c| {
        redis::cmd("DEL")
            .arg(fence_key(name))
            .exec(&mut c.server(master).connection())
            .expect("DEL the counter");
    });
    let after = locks
        .lock(name)
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    assert!(
        after.fencing_token().expect("fencing(true)") > before,
        "{} then {}",
        before,
        after.fencing_token().expect("fencing(true)")
    );
    after.release().await.expect("release");
}

/// A replica that lagged (paused, its link cut, while its master issued tokens) is promoted when the master
/// is killed: its fencing counter is behind the tokens already handed out, and the fence
/// floor (the server clock) still makes the next token larger than all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_that_lagged_still_issues_larger_tokens() {
    let _serial = CLUSTER.serial().await;
    let locks = Client::cluster(seeds()).await.expect("connect");
    let name = "fo-lag";
    let slot = slot_of(name);
    for _ in 0..3 {
        let guard = locks
            .lock(name)
            .fencing(true)
            .try_acquire()
            .await
            .expect("free");
        guard.release().await.expect("release");
    }
    let master = master_of(name);
    let lagging = pause_replicas_of(name);
    // Cut the paused replica's link, so what follows is not even in its socket buffer.
    CLUSTER.with(move |c| {
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .exec(&mut c.server(master).connection())
            .expect("CLIENT KILL TYPE replica");
    });
    // Tokens the replica never receives.
    let mut last = distlock::FencingToken::new(0);
    for _ in 0..5 {
        let guard = locks
            .lock(name)
            .fencing(true)
            .try_acquire()
            .await
            .expect("free");
        last = guard.fencing_token().expect("fencing(true)");
        guard.release().await.expect("release");
    }
    let fence_key = fence_key(name);
    let (promoted, took) = CLUSTER.with(move |c| {
        c.server_mut(master).kill();
        for &r in &lagging {
            c.server_mut(r).resume();
        }
        c.wait_failover(slot, master)
    });
    println!("lagging replica {promoted} promoted after {took:?}");
    // The promoted replica's own counter (absent counts as 0), read on it directly; it may
    // answer LOADING or TRYAGAIN for a moment after the promotion.
    let behind: u64 = CLUSTER.with(move |c| {
        let started = Instant::now();
        loop {
            let read: redis::RedisResult<Option<u64>> = redis::cmd("GET")
                .arg(&fence_key)
                .query(&mut c.server(promoted).connection());
            match read {
                Ok(counter) => break counter.unwrap_or(0),
                Err(e) if started.elapsed() < RESUME_LIMIT => {
                    eprintln!("GET the counter on the promoted replica: {e}; again");
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => panic!("GET the counter on the promoted replica: {e}"),
            }
        }
    });
    assert!(
        behind < last.get(),
        "the promoted replica lagged: counter {behind}, last token {last}"
    );
    let next = locks
        .lock(name)
        .fencing(true)
        .wait(RESUME_LIMIT)
        .acquire()
        .await
        .expect("operations resume after the promotion");
    assert!(
        next.fencing_token().expect("fencing(true)") > last,
        "a token at or below one issued before the failover: {} after {last}",
        next.fencing_token().expect("fencing(true)")
    );
    next.release().await.expect("release");
    CLUSTER.with(move |c| {
        c.server_mut(master).restart();
        c.wait_settled();
    });
}
