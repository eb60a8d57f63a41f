//! The examples users find with `cargo run -p distlock --example <name>` (distlock/examples/),
//! each run as a user would run it, against servers the test kit starts; the axum service and
//! the scheduled job in modules of their own. `cargo test --all-targets` builds examples as
//! test harnesses, not as the programs users run, so tests/run.sh builds them first (`cargo
//! build --examples`); run alone, this test asks for that.

mod axum_service;
mod scheduled_job;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use distlock_testkit::{RedisServer, RedisServers};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// How long an example may take to print what the test waits for: far more than it needs.
const LIMIT: Duration = Duration::from_secs(30);

fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<this test> -> target/<profile>/examples/<name>
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>")
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is not built: cargo build --examples",
        path.display()
    );
    path
}

async fn run_to_end(name: &str, env: &[(&str, String)]) -> String {
    let out = tokio::time::timeout(
        LIMIT,
        Command::new(example(name))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} did not finish"))
    .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Starts a long-running example; its stdout, line by line.
fn start(name: &str, env: &[(&str, String)]) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut child = Command::new(example(name))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the example");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    (child, lines)
}

async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    tokio::time::timeout(LIMIT, lines.next_line())
        .await
        .expect("the example printed nothing more")
        .expect("read stdout")
        .expect("the example ended early")
}

/// Ctrl-C, as a user stops it; it must end cleanly.
async fn interrupt(mut child: Child) {
    let pid = child.id().expect("running") as i32;
    // SAFETY: sending a signal to our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let status = tokio::time::timeout(LIMIT, child.wait())
        .await
        .expect("the example did not stop on Ctrl-C")
        .expect("wait");
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn lock_by_hand() {
    let server = RedisServer::start();
    let out = run_to_end("lock_by_hand", &[("REDIS_URL", server.url())]).await;
    assert!(out.contains("with fencing token"), "{out}");
    assert!(out.contains("a second client finds it busy"), "{out}");
    assert!(out.contains("released"), "{out}");
}

#[tokio::test]
async fn read_write() {
    let server = RedisServer::start();
    let out = run_to_end("read_write", &[("REDIS_URL", server.url())]).await;
    assert_eq!(out.matches(": writing").count(), 2, "{out}");
    assert_eq!(out.matches(": reading").count(), 4, "{out}");
    assert!(out.contains("downgraded"), "{out}");
}

#[tokio::test]
async fn quorum() {
    let servers = RedisServers::start(3);
    let out = run_to_end("quorum", &[("REDIS_URLS", servers.urls().join(","))]).await;
    assert!(
        out.contains("holding payout:7 on a majority, fencing token Some("),
        "{out}"
    );
    assert!(out.contains("released on every node"), "{out}");
}

#[tokio::test]
async fn leader_runs_the_job_and_hands_over_when_stopped() {
    let server = RedisServer::start();
    let env = [("REDIS_URL", server.url())];
    let term = |line: String| -> u64 {
        line.strip_prefix("leading, term ")
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("unexpected line {line:?}"))
    };
    let (first, mut first_out) = start("leader", &env);
    assert_eq!(next_line(&mut first_out).await, "campaigning");
    let t1 = term(next_line(&mut first_out).await);
    assert_eq!(
        next_line(&mut first_out).await,
        format!("job: working as the leader of term {t1}")
    );
    // A second instance waits while the first leads.
    let (second, mut second_out) = start("leader", &env);
    assert_eq!(next_line(&mut second_out).await, "campaigning");
    interrupt(first).await;
    let stopped = std::time::Instant::now();
    loop {
        let line = next_line(&mut first_out).await;
        if line == "resigned" {
            break;
        }
        assert!(line.starts_with("job: "), "{line}");
    }
    // It takes over at once: by the resignation, not by the first one's 10 s lease.
    let t2 = term(next_line(&mut second_out).await);
    assert!(t2 > t1, "terms {t1} then {t2}");
    assert!(
        stopped.elapsed() < Duration::from_secs(5),
        "took over {:?} after the first stopped",
        stopped.elapsed()
    );
    assert_eq!(
        next_line(&mut second_out).await,
        format!("job: working as the leader of term {t2}")
    );
    interrupt(second).await;
}
