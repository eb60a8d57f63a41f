//! RESP3 pushes and attributes among the replies, injected by the proxy or redirected by
//! another client's `CLIENT TRACKING .. REDIRECT`: never taken for answers.

use super::*;

/// Every reply preceded by a push (and then by an attribute), on every connection of the
/// client: no call gets a push, an attribute or another call's answer as its own; none hangs.
/// (The acquisition connection handed each push to the oldest waiting caller: answers shifted
/// by one, `try_acquire` of a held lock returned a guard.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_and_attributes_before_replies_never_become_answers() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let _held = held_elsewhere(&server, "held").await;
    for connections in [1, 2, 3] {
        let client = Client::builder(&proxy.url())
            .connections(connections)
            .connect()
            .await
            .expect("connect");
        for frame in [INVALIDATE, ATTRIBUTE] {
            proxy.push_before_replies(Some(frame));
            let injected = proxy.pushes_injected();
            let wrong = wrong_answers(&client, "held", 4, 25).await;
            proxy.push_before_replies(None);
            assert!(
                wrong.is_empty(),
                "connections({connections}), {:?} before every reply: {wrong:#?}",
                String::from_utf8_lossy(frame)
            );
            assert!(proxy.pushes_injected() > injected, "nothing was injected");
        }
    }
}

/// Real pushes: another client tracks every `distlock` key (`CLIENT TRACKING on BCAST`) with
/// its invalidations redirected to each of our client's connections (whose ids `CLIENT LIST`
/// gives anyone), so every lock taken or released sends a push to each, where Redis places
/// it. Answers stay with their calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalidations_redirected_by_another_client_never_become_answers() {
    let server = RedisServer::start();
    let _held = held_elsewhere(&server, "held").await;
    let before = client_ids(&server);
    let client = Client::builder(&server.url())
        .connections(3)
        .connect()
        .await
        .expect("connect");
    // Every connection open: each lane took a lock once.
    for i in 0..8 {
        let guard = client
            .lock(format!("warm:{i}"))
            .try_acquire()
            .await
            .expect("free");
        guard.release().await.expect("release");
    }
    let ours: Vec<u64> = client_ids(&server)
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    assert!(ours.len() >= 3, "the client's connections: {ours:?}");
    // One tracking connection per target: a connection redirects to one client.
    let _trackers: Vec<redis::Connection> = ours
        .iter()
        .map(|id| {
            let mut tracker = server.connection();
            redis::cmd("CLIENT")
                .arg("TRACKING")
                .arg("on")
                .arg("REDIRECT")
                .arg(id)
                .arg("BCAST")
                .arg("PREFIX")
                .arg("distlock")
                .exec(&mut tracker)
                .expect("CLIENT TRACKING");
            tracker
        })
        .collect();
    let wrong = wrong_answers(&client, "held", 8, 40).await;
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The ids of the client connections `server` has now.
fn client_ids(server: &RedisServer) -> Vec<u64> {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut server.connection())
        .expect("CLIENT LIST");
    list.lines()
        // Not the connection that asks.
        .filter(|l| !l.contains("cmd=client|list"))
        .filter_map(|l| l.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .collect()
}
