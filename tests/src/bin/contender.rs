//! A lock user in its own OS process, for the multi-process tests.
//!
//! ```text
//! contender mutex URL OBSERVER_URL NAME TASKS TARGET   # contend until the observer counts TARGET sections
//! contender hold URL NAME TTL_MS                       # take the lock, print HELD <token>, wait to be killed
//! ```

use std::io::Write;
use std::time::{Duration, Instant};

use distlock::Client;
use distlock_testkit::Observer;

/// A process gives up after this long even if the target was not reached, so a broken lock
/// cannot hang the test suite; the test then fails on the count.
const MAX_RUN: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["mutex", url, observer, name, tasks, target] => {
            let tasks = tasks.parse().expect("TASKS is a number");
            let target = target.parse().expect("TARGET is a number");
            mutex(url, observer, name, tasks, target).await;
        }
        ["hold", url, name, ttl_ms] => {
            hold(
                url,
                name,
                Duration::from_millis(ttl_ms.parse().expect("TTL_MS is a number")),
            )
            .await
        }
        _ => {
            eprintln!("usage: contender mutex URL OBSERVER NAME TASKS TARGET | contender hold URL NAME TTL_MS");
            std::process::exit(2);
        }
    }
}

async fn mutex(url: &str, observer: &str, name: &str, tasks: usize, target: u64) {
    let client = Client::connect(url)
        .await
        .expect("connect to the lock server");
    let observer = Observer::connect(observer, name).await;
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (client, observer, name) = (client.clone(), observer.clone(), name.to_owned());
        handles.push(tokio::spawn(async move {
            let mut sections = 0u64;
            while observer.acked().await < target && started.elapsed() < MAX_RUN {
                let guard = client
                    .lock(&name)
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(30))
                    .acquire()
                    .await
                    .expect("acquire within the wait");
                observer.enter().await;
                observer.bump(Duration::from_micros(100)).await;
                observer.exit().await;
                guard.release().await.expect("release a held lock");
                sections += 1;
            }
            sections
        }));
    }
    let mut total = 0;
    for h in handles {
        total += h.await.expect("contender task");
    }
    println!("DONE {total}");
}

async fn hold(url: &str, name: &str, ttl: Duration) {
    let client = Client::connect(url)
        .await
        .expect("connect to the lock server");
    let guard = client
        .lock(name)
        .ttl(ttl)
        .try_acquire()
        .await
        .expect("the lock is free");
    println!("HELD {}", guard.fencing_token());
    std::io::stdout().flush().expect("flush stdout");
    // Hold until killed: the test kills this process with SIGKILL, so no release runs.
    std::future::pending::<()>().await;
}
