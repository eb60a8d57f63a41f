//! The leader loop in one call (`Election::lead`): the job runs while leading, is dropped when
//! the lead is lost and runs again on the next win, and the loop ends when the client shuts
//! down; a campaign, and the loop written by hand around it, ends at shutdown too.

use crate::common;

use std::time::Duration;

use common::lock_key;
use distlock::{Client, Error};
use distlock_testkit::RedisServer;
use tokio::sync::mpsc;

/// How long a test waits for an event that should come far sooner.
const EVENT_LIMIT: Duration = Duration::from_secs(15);

async fn connect(url: &str) -> Client {
    Client::connect(url).await.expect("connect")
}

/// Flags its drop: a leader's job dropped at its `.await` when the lead is lost.
struct DropFlag(Option<tokio::sync::oneshot::Sender<()>>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        if let Some(dropped) = self.0.take() {
            let _ = dropped.send(());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_runs_the_job_while_leading_and_resigns_when_it_is_done() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let election = locks.election("e-lead-done").ttl(Duration::from_secs(30));
    let (term, leading_during_job) = election
        .lead(|term| {
            let locks = locks.clone();
            async move {
                let info = locks.inspect("e-lead-done").await.expect("inspect");
                (term, info.fencing_token)
            }
        })
        .await
        .expect("the job ran");
    assert_eq!(leading_during_job, Some(term), "the job ran while leading");
    // Resigned: the next candidate leads at once, not after the 30 s lease.
    let next = tokio::time::timeout(
        Duration::from_secs(5),
        connect(&server.url())
            .await
            .election("e-lead-done")
            .campaign(),
    )
    .await
    .expect("the lead was free")
    .expect("lead");
    assert!(next.term() > term);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_stops_the_job_on_loss_campaigns_again_and_ends_at_shutdown() {
    let server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let (terms, mut started) = mpsc::unbounded_channel();
    let (drops, mut dropped) = mpsc::unbounded_channel();
    let election = locks
        .election("e-lead-lost")
        .ttl(Duration::from_millis(900));
    let leading = tokio::spawn(async move {
        election
            .lead(move |term| {
                let (terms, drops) = (terms.clone(), drops.clone());
                async move {
                    let (dropped, on_drop) = tokio::sync::oneshot::channel();
                    let _flag = DropFlag(Some(dropped));
                    let _ = drops.send(on_drop);
                    let _ = terms.send(term);
                    // A job that never ends by itself.
                    std::future::pending::<()>().await
                }
            })
            .await
    });
    let first = tokio::time::timeout(EVENT_LIMIT, started.recv())
        .await
        .expect("leads")
        .expect("a term");
    let first_job = dropped.recv().await.expect("the job's flag");
    // Another process's operator deletes the leader's lock: its next renewal is refused.
    let mut raw = server.async_connection().await;
    let _: i64 = redis::cmd("DEL")
        .arg(lock_key("e-lead-lost"))
        .query_async(&mut raw)
        .await
        .expect("DEL");
    tokio::time::timeout(EVENT_LIMIT, first_job)
        .await
        .expect("the job is dropped once the lead is lost")
        .expect("dropped, not leaked");
    let second = tokio::time::timeout(EVENT_LIMIT, started.recv())
        .await
        .expect("leads again")
        .expect("a term");
    assert!(second > first, "a new term: {second} after {first}");
    // Shutting the client down takes the lead back and ends the loop.
    let _ = locks.shutdown(Duration::from_secs(5)).await;
    let ended = tokio::time::timeout(EVENT_LIMIT, leading)
        .await
        .expect("lead returns at shutdown")
        .expect("no panic");
    assert!(
        matches!(ended, Err(Error::ShutDown { .. })),
        "{:?}",
        ended.map(|_| ())
    );
    assert!(started.try_recv().is_err(), "no third term after shutdown");
}

/// A campaign waiting for another leader ends when its client shuts down, with an error that
/// is not retryable: the loop written the obvious way (campaign again after a retryable
/// error, stop on any other) stops instead of spinning on `ShutDown` for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_a_waiting_campaign_and_the_campaign_loop() {
    let server = RedisServer::start();
    let leader = connect(&server.url()).await;
    let _leading = leader.election("e-shut").campaign().await.expect("leads");
    let candidate = connect(&server.url()).await;
    let election = candidate
        .election("e-shut")
        .wait(Duration::from_millis(200));
    let campaigns = tokio::spawn(async move {
        let mut tries = 0u32;
        loop {
            tries += 1;
            match election.campaign().await {
                Ok(_) => panic!("the lead is held elsewhere"),
                Err(e) if e.is_retryable() => continue,
                Err(e) => return (e, tries),
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let _ = candidate.shutdown(Duration::from_secs(5)).await;
    let (e, tries) = tokio::time::timeout(EVENT_LIMIT, campaigns)
        .await
        .expect("the loop ends")
        .expect("no panic");
    assert!(matches!(e, Error::ShutDown { .. }), "{e}");
    assert!(!e.is_retryable(), "{e}");
    assert!(tries >= 2, "campaigned again after a timeout: {tries}");
}
