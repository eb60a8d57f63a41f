//! Several workers contend for locks on a real Redis; the output shows who held what and when.
//!
//! Run with `bash examples/demo.sh` (starts its own redis-server on a free port).

use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::Error;

#[tokio::main]
async fn main() {
    let (_server, locks) = distlock_examples::demo_server().await;
    let clock = Arc::new(Instant::now());

    println!("1. four workers, two orders, three rounds each (ttl 5 s, wait 2 s):");
    let mut workers = Vec::new();
    for w in 1..=4 {
        let (locks, clock) = (locks.clone(), clock.clone());
        workers.push(tokio::spawn(async move {
            for round in 0..3 {
                let order = format!("order:{}", 1 + (w + round) % 2);
                let guard = locks
                    .lock(&order)
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(2))
                    .fencing(true)
                    .acquire()
                    .await
                    .expect("the lock frees within the wait");
                say(
                    &clock,
                    &format!(
                        "worker-{w} holds {order:<8} fencing token {}",
                        guard.fencing_token().expect("taken with fencing(true)")
                    ),
                );
                tokio::time::sleep(Duration::from_millis(25)).await; // the critical section
                say(&clock, &format!("worker-{w} releases {order}"));
                guard.release().await.expect("release a held lock");
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }

    println!("\n2. a held lock: another task's single attempt fails at once; the holder asking again\n   gets an error instead of waiting on itself:");
    let held = locks.lock("report").try_acquire().await.expect("free");
    let other = locks.clone();
    match tokio::spawn(async move { other.lock("report").try_acquire().await }).await {
        Ok(Err(e @ Error::Busy { .. })) => say(&clock, &format!("another task: {e}")),
        other => panic!("expected Busy, got {other:?}"),
    }
    match locks
        .lock("report")
        .wait(Duration::from_secs(5))
        .acquire()
        .await
    {
        Err(e @ Error::Reentrant { .. }) => say(&clock, &format!("the holder itself: {e}")),
        other => panic!("expected Reentrant, got {other:?}"),
    }
    held.release().await.expect("release");

    println!(
        "\n3. a holder stalls past its 200 ms ttl; the lease ends and fencing tells them apart:"
    );
    let stale = locks
        .lock("invoice:7")
        .ttl(Duration::from_millis(200))
        .watchdog(false) // as if its process froze: nothing renews the lease
        .fencing(true)
        .try_acquire()
        .await
        .expect("free");
    say(
        &clock,
        &format!(
            "slow worker holds invoice:7, token {}",
            stale.fencing_token().expect("taken with fencing(true)")
        ),
    );
    let other = locks.clone();
    let next = tokio::spawn(async move {
        other
            .lock("invoice:7")
            .wait(Duration::from_secs(2))
            .fencing(true)
            .acquire()
            .await
    })
    .await
    .expect("next worker")
    .expect("free once the stale lease ran out");
    say(
        &clock,
        &format!(
            "next worker holds invoice:7, token {} (larger: the stale writer can be refused)",
            next.fencing_token().expect("taken with fencing(true)")
        ),
    );
    say(
        &clock,
        &format!(
            "slow worker still believes it holds it? is_held() = {}",
            stale.is_held()
        ),
    );
    match stale.release().await {
        Err(e) => say(&clock, &format!("slow worker's release is refused: {e}")),
        Ok(()) => panic!("a stale release must be refused"),
    }
    next.release().await.expect("release");
    println!("\ndone; the demo's redis-server stops now");
}

fn say(clock: &Instant, what: &str) {
    println!("  [{:>7.1} ms] {what}", clock.elapsed().as_secs_f64() * 1e3);
}
