//! A native renewal refused by a server that lacks the command after all: the reading of the
//! node's commands is stale (the server behind the connection changed without a
//! reconnection), and the renewal goes again as the script.

use distlock::Client;
use distlock_testkit::{wait_until_async, FaultProxy, RedisServer};

use super::{
    holder, native_binary, renewals, scripts_binary, wait_renewed, EVENT_LIMIT, RENEW_EVERY, TTL,
};
use crate::common;

/// A node read as having `SET .. IFEQ` (Valkey 8.1) whose connection then reaches a server
/// without it (Redis 7.0: the fault proxy redirects the open connection, the lock's key and
/// lease copied over, as a failover would have them): the next native renewal is answered
/// `ERR syntax error`, sent again as the script in the same tick, and the lease stays held;
/// from then on the node renews by script, with no reconnection and no new reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_renewal_refused_as_a_syntax_error_goes_again_as_the_script() {
    let Some(native) = native_binary() else {
        return;
    };
    let valkey = RedisServer::builder().binary(&native).start();
    let redis = RedisServer::builder().binary(scripts_binary()).start();
    assert!(common::has_set_ifeq(&valkey) && !common::has_set_ifeq(&redis));
    let proxy = FaultProxy::start(&valkey.addr()).expect("fault proxy");
    let locks = Client::connect(&proxy.url()).await.expect("connect");
    let name = "fallback";
    let guard = locks
        .lock(name)
        .ttl(TTL)
        .renew_every(RENEW_EVERY)
        .try_acquire()
        .await
        .expect("free");
    wait_renewed(&valkey, renewals(&valkey), true, 3).await;
    let connections = proxy.connections();

    // The key, with what is left of its lease, on the server the connection goes to next.
    let token = holder(&valkey, name).expect("held on Valkey");
    let left = common::pttl(&valkey, name).await;
    assert!(left > 0, "{left}");
    redis::cmd("SET")
        .arg(common::lock_key(name))
        .arg(&token)
        .arg("PX")
        .arg(left)
        .exec(&mut redis.connection())
        .expect("SET on Redis 7.0");
    let before = renewals(&redis);
    proxy.redirect(&redis.addr()).expect("redirect");

    // Renewed by script on Redis 7.0, past several ttls: only renewals keep the key.
    let scripted = wait_until_async(EVENT_LIMIT * 2, || async {
        renewals(&redis).1 >= before.1 + 30
    })
    .await;
    let after = renewals(&redis);
    assert!(
        scripted,
        "scripted renewals on Redis 7.0: {before:?} -> {after:?}"
    );
    // The native renewals the redirect caught (one pipeline's, or up to the watchdog's three
    // outstanding), refused; none after (the node is marked as lacking the command).
    let refused = after.0 - before.0;
    assert!(
        (1..=3).contains(&refused),
        "{refused} SETs reached Redis 7.0 (1 to 3 refused native renewals expected)"
    );
    assert!(guard.is_held(), "the lease was lost");
    assert_eq!(holder(&redis, name).as_deref(), Some(token.as_str()));
    assert!(common::pttl(&redis, name).await > 0);
    assert_eq!(
        proxy.connections(),
        connections,
        "the client reconnected: its commands were read again, not found lacking"
    );
    // Valkey, no longer reached, lets its copy of the lease run out.
    let expired = wait_until_async(EVENT_LIMIT, || async { holder(&valkey, name).is_none() }).await;
    assert!(expired, "Valkey's key was still renewed");
    guard.release().await.expect("release on Redis 7.0");
    assert_eq!(holder(&redis, name), None);
}
