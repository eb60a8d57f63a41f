//! Lost replies leave no leadership behind.

use super::*;

// ---------------------------------------------------------------------------------------------
// Lost replies.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_replies_leave_no_leadership_behind() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    let name = "e-lossy";
    let ttl = Duration::from_secs(60);
    let locks = connect(&proxy.url()).await;
    let watcher = connect(&server.url()).await;
    let election = locks.election(name).ttl(ttl).wait(Duration::from_secs(30));
    // Before the faults: the call site's record and the scripts are on the server.
    election
        .campaign()
        .await
        .expect("lead")
        .resign()
        .await
        .expect("resign");

    // Campaigns and resignations whose replies are lost: each is sent again (the retried
    // acquisition finds its own hold, the retried release frees nothing more).
    proxy.drop_replies(0.25);
    let mut last = FencingToken::new(0);
    for _ in 0..20 {
        let leadership = election
            .campaign()
            .await
            .expect("lead despite lost replies");
        assert!(
            leadership.term() > last,
            "terms {last} then {}",
            leadership.term()
        );
        last = leadership.term();
        // A resignation that failed after its tries goes on in the background.
        let _ = leadership.resign().await;
    }
    proxy.drop_replies(0.0);
    let gone = wait_until_async(EVENT_LIMIT, || async { pttl(&server, name).await == -2 }).await;
    assert!(gone, "a leadership was left behind for its ttl");

    // A campaign cancelled after its acquisition reached the server, its reply late: the
    // term it took unseen is given back. (A clean cycle first: the connections the faults
    // reset have been opened again, and the next acquisition goes straight out.)
    election
        .campaign()
        .await
        .expect("lead")
        .resign()
        .await
        .expect("resign");
    proxy.reply_latency(Duration::from_secs(3));
    let campaign = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign().await })
    };
    let taken = wait_until_async(EVENT_LIMIT, || async { pttl(&server, name).await > 0 }).await;
    assert!(taken, "the campaign never reached the server");
    campaign.abort();
    let gone = wait_until_async(EVENT_LIMIT, || async { pttl(&server, name).await == -2 }).await;
    assert!(gone, "a cancelled campaign left its leadership for its ttl");
    proxy.reply_latency(Duration::ZERO);

    let leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    assert_eq!(*leader.borrow(), None);
    let next = watcher
        .election(name)
        .ttl(ttl)
        .wait(Duration::ZERO)
        .campaign()
        .await
        .expect("nobody leads");
    assert!(next.term() > last);
}
