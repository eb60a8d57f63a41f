//! The scheduled-job example run as three real processes on one real Redis: each period's job
//! runs exactly once, whether the instances' timers fire together or one after another.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use distlock_testkit::RedisServer;

const JOB: &str = env!("CARGO_BIN_EXE_scheduled_job");
const LOCK_KEY: &str = "distlock:{job:nightly-report}";

fn outcome(out: Output) -> String {
    assert!(out.status.success(), "instance failed: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn runs(server: &RedisServer, period: &str) -> i64 {
    let mut conn = server.connection();
    redis::cmd("GET")
        .arg(format!("runs:{period}"))
        .query::<Option<i64>>(&mut conn)
        .expect("GET")
        .unwrap_or(0)
}

/// The lock of the last period is gone (its minimum hold ended): the next period may start.
fn until_unlocked(server: &RedisServer) {
    let mut conn = server.connection();
    let start = Instant::now();
    while redis::cmd("EXISTS")
        .arg(LOCK_KEY)
        .query::<i64>(&mut conn)
        .expect("EXISTS")
        == 1
    {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the lock never ended"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn each_period_runs_once_across_three_instances() {
    let server = RedisServer::start();
    let url = server.url();

    // Period 1: the three timers fire together.
    let children: Vec<_> = (0..3)
        .map(|_| {
            Command::new(JOB)
                .args([&url, "p1"])
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut said: Vec<String> = children
        .into_iter()
        .map(|c| outcome(c.wait_with_output().expect("wait")))
        .collect();
    said.sort();
    assert_eq!(said, ["ran", "skipped", "skipped"]);
    assert_eq!(runs(&server, "p1"), 1);

    // Period 2: the timers fire one after another, each after the previous instance is done:
    // without the minimum hold every instance would find the lock free and run the job again.
    until_unlocked(&server);
    let said: Vec<String> = (0..3)
        .map(|_| outcome(Command::new(JOB).args([&url, "p2"]).output().expect("run")))
        .collect();
    assert_eq!(said, ["ran", "skipped", "skipped"]);
    assert_eq!(runs(&server, "p2"), 1);
}
