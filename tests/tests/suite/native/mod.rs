//! The setnx lease renewed with the server's own `SET .. IFEQ` where the server has it
//! (Valkey 8.1, Redis 8.4) and with the script elsewhere, node by node: a quorum of servers of
//! both kinds, and a server replaced on its port by one of the other kind; a native renewal
//! refused as a syntax error sent again as the script (`fallback.rs`); a Sentinel failover
//! from Redis 7.0 to Valkey 8.1 (`failover.rs`).
//!
//! These need a server with the command (the Valkey 8.1 binary `tests/matrix.sh` fetches into
//! `target/servers/`, or `DISTLOCK_VALKEY_SERVER`) and one without (`redis-server` on `PATH`,
//! Redis 7.0 in CI). Without the first they say so and pass, except in the matrix, where
//! they fail.

use std::path::PathBuf;
use std::time::Duration;

use distlock::Client;
use distlock_testkit::wait_until_async;
use distlock_testkit::RedisServer;

use crate::common;
use common::{has_set_ifeq, renewal_calls as renewals};

mod failover;
mod fallback;

const EVENT_LIMIT: Duration = Duration::from_secs(10);
const TTL: Duration = Duration::from_secs(1);
const RENEW_EVERY: Duration = Duration::from_millis(100);

/// A server with `SET .. IFEQ`, or `None` (with a line saying how to get one).
fn native_binary() -> Option<PathBuf> {
    let named = std::env::var_os("DISTLOCK_VALKEY_SERVER").map(PathBuf::from);
    let kit = std::env::var_os("DISTLOCK_REDIS_SERVER")
        .map(PathBuf::from)
        .filter(|p| {
            p.file_name()
                .is_some_and(|f| f.to_string_lossy().starts_with("valkey"))
        });
    let fetched = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/servers/valkey-8.1/bin/valkey-server");
    let found = named
        .or(kit)
        .or_else(|| fetched.exists().then_some(fetched));
    if found.is_none() {
        let msg = "no valkey-server: `bash tests/matrix.sh valkey-8.1` fetches one into \
                   target/servers/ (or set DISTLOCK_VALKEY_SERVER)";
        assert!(
            std::env::var_os("DISTLOCK_MATRIX_SERVER").is_none(),
            "{msg}"
        );
        eprintln!("skipped: {msg}");
    }
    found
}

/// A server without `SET .. IFEQ`: `redis-server` on `PATH` (Redis 7.0 in CI).
fn scripts_binary() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join("redis-server"))
        .find(|p| p.exists())
        .expect("redis-server on PATH")
}

/// Waits until `server` ran `n` more of the kind of renewal it should run (native if it has
/// the command), and none of the other kind beyond `before`.
async fn wait_renewed(server: &RedisServer, before: (u64, u64), native: bool, n: u64) {
    let grew = wait_until_async(EVENT_LIMIT, || async {
        let now = renewals(server);
        if native {
            now.0 >= before.0 + n
        } else {
            now.1 >= before.1 + n
        }
    })
    .await;
    let now = renewals(server);
    assert!(
        grew,
        "{}: {n} {} renewals expected, saw SET {} -> {}, scripts {} -> {}",
        server.addr(),
        if native { "native" } else { "scripted" },
        before.0,
        now.0,
        before.1,
        now.1
    );
    if native {
        assert_eq!(now.1, before.1, "a server with SET .. IFEQ ran the script");
    } else {
        assert_eq!(now.0, before.0, "a server without SET .. IFEQ was sent SET");
    }
}

fn holder(server: &RedisServer, name: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(common::lock_key(name))
        .query(&mut server.connection())
        .expect("GET")
}

/// A quorum of two servers with the command and two without (a majority of 3 of 4 always has
/// both kinds): each server that holds the lock renews it its own way, and the lock stays held
/// through many ttls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_of_servers_with_and_without_native_commands_renews_node_by_node() {
    let Some(native) = native_binary() else {
        return;
    };
    let scripts = scripts_binary();
    let servers = [&native, &native, &scripts, &scripts]
        .map(|binary| RedisServer::builder().binary(binary).start());
    let kinds: Vec<bool> = servers.iter().map(has_set_ifeq).collect();
    assert_eq!(
        kinds,
        [true, true, false, false],
        "the servers are not of both kinds"
    );
    let locks = Client::quorum_builder(servers.iter().map(RedisServer::url))
        .restart_delay(Duration::ZERO)
        .connect()
        .await
        .expect("connect");
    let guard = locks
        .lock("mixed")
        .ttl(TTL)
        .renew_every(RENEW_EVERY)
        .try_acquire()
        .await
        .expect("free");
    // The acquisition returns once a majority (3) granted it; a fourth may not have.
    let held: Vec<Option<String>> = servers.iter().map(|s| holder(s, "mixed")).collect();
    let token = held
        .iter()
        .flatten()
        .next()
        .cloned()
        .expect("held somewhere");
    let holders: Vec<usize> = (0..servers.len())
        .filter(|&i| held[i].as_ref() == Some(&token))
        .collect();
    assert!(holders.len() >= 3, "{held:?}");
    let before: Vec<_> = servers.iter().map(renewals).collect();
    // Past several ttls: only renewals keep the lock.
    for &i in &holders {
        wait_renewed(&servers[i], before[i], kinds[i], 15).await;
    }
    assert!(guard.is_held());
    for &i in &holders {
        assert_eq!(holder(&servers[i], "mixed").as_ref(), Some(&token));
    }
    guard.release().await.expect("release");
}

/// The server behind a single node's address replaced by one of the other kind, twice: after
/// each reconnection the client reads what the new server has, and renews its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_replaced_by_another_version_is_renewed_its_own_way() {
    let Some(native) = native_binary() else {
        return;
    };
    let mut server = RedisServer::builder().binary(&native).start();
    let locks = Client::connect(&server.url()).await.expect("connect");
    for (round, (binary, has)) in [
        (native.clone(), true),
        (scripts_binary(), false),
        (native, true),
    ]
    .into_iter()
    .enumerate()
    {
        if round > 0 {
            server.restart_as(&binary);
        }
        assert_eq!(has_set_ifeq(&server), has);
        let name = format!("replaced-{round}");
        // Waits out the reconnection (the first attempt may meet the dead connection).
        let guard = locks
            .lock(&name)
            .ttl(TTL)
            .renew_every(RENEW_EVERY)
            .wait(EVENT_LIMIT)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let before = renewals(&server);
        wait_renewed(&server, before, has, 15).await;
        assert!(guard.is_held(), "round {round}: the lease was lost");
        guard.release().await.expect("release");
    }
}

/// A lease extended beyond its ttl by hand is never cut back to the ttl by a native renewal
/// (the extend script never shortens a lease; `SET .. PX` would): from the extension on, the
/// watchdog renews it with the script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_extended_beyond_its_ttl_is_not_shortened_by_native_renewals() {
    let Some(native) = native_binary() else {
        return;
    };
    let server = RedisServer::builder().binary(&native).start();
    let locks = Client::connect(&server.url()).await.expect("connect");
    let mut guard = locks
        .lock("longer")
        .ttl(TTL)
        .renew_every(RENEW_EVERY)
        .try_acquire()
        .await
        .expect("free");
    wait_renewed(&server, renewals(&server), true, 3).await;
    guard.extend(Duration::from_secs(60)).await.expect("extend");
    let before = renewals(&server);
    let scripted = wait_until_async(EVENT_LIMIT, || async {
        renewals(&server).1 >= before.1 + 10
    })
    .await;
    assert!(scripted, "no scripted renewals after the extension");
    let left = common::pttl(&server, "longer").await;
    assert!(left > 50_000, "the 60 s lease was cut back to {left} ms");
    assert!(guard.is_held());
    guard.release().await.expect("release");
}

/// A user whose ACL leaves out `@scripting` (`docs/deployments.md`, "Native commands"): on a
/// server with `SET .. IFEQ` it takes a setnx lock (a try, without fencing: plain `SET .. NX`)
/// and the watchdog keeps it, renewing natively; the release is a script, refused, so the
/// lock ends with its lease. On a server without the command the same user's lease is lost
/// at the first renewal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripting_a_lock_is_kept_only_where_the_server_renews_natively() {
    let Some(native) = native_binary() else {
        return;
    };
    const NO_SCRIPTS: &str = "~distlock:* resetchannels &distlock:* +@connection +@read \
                              +@write +@pubsub +time -@dangerous +info -@scripting";
    for (binary, has) in [(native, true), (scripts_binary(), false)] {
        let server = RedisServer::builder().binary(&binary).start();
        let url = common::add_locker(&server, NO_SCRIPTS);
        let locks = Client::connect(&url).await.expect("connect");
        let name = "no-scripts";
        let guard = locks
            .lock(name)
            .ttl(TTL)
            .renew_every(RENEW_EVERY)
            .try_acquire()
            .await
            .expect("a plain SET .. NX needs no script");
        let fenced = locks
            .lock("no-scripts-fenced")
            .fencing(true)
            .try_acquire()
            .await;
        assert!(fenced.is_err(), "fencing runs a script: {fenced:?}");
        if !has {
            let lost = tokio::time::timeout(EVENT_LIMIT, guard.lost()).await;
            assert!(lost.is_ok(), "a lease no renewal can reach was not lost");
            continue;
        }
        wait_renewed(&server, renewals(&server), true, 15).await;
        assert!(guard.is_held());
        let busy = locks.lock(name).try_acquire().await;
        assert!(busy.is_err(), "taken twice: {busy:?}");
        let released = guard.release().await;
        assert!(released.is_err(), "the release is a script: {released:?}");
        // The lease, no longer renewed, ends the lock.
        let ended = wait_until_async(EVENT_LIMIT, || async {
            common::pttl(&server, name).await == -2
        })
        .await;
        assert!(ended, "the lock outlived its lease");
        let again = locks.lock(name).try_acquire().await;
        assert!(again.is_ok(), "{again:?}");
        drop(again);
    }
}
