//! S8: leader failover time. A leader runs in a child process of this binary (the hidden
//! `--leader-child` argument): it campaigns, says `LEAD <term>` on stdout, and leads until its
//! stdin closes. The follower campaigns in the bench process itself, on a `Client` of its own.
//! Once the follower waits, the parent sends the leader SIGKILL (`Child::kill`) at a random
//! point of its renewal period and times from just before the kill to the follower's
//! `campaign()` returning. The follower must not lead before the kill, and its term must be
//! above the killed leader's; then it resigns, and the next sample starts a new leader.
//!
//! Only distlock has leader election among the columns: the other columns are n/a.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::columns::Kind;
use crate::results::{absolute, row, Fmt, RowSpec, Source, TargetSpec};
use crate::scenarios::Metrics;

/// The hidden first argument that turns the binary into a leader.
pub const CHILD_FLAG: &str = "--leader-child";

/// The leaders' ttls, and the names of their figures (seconds from the kill to the next
/// leader's `campaign()` returning; the longest also over the ttl).
pub const TTLS: [(Duration, [&str; 4]); 3] = [
    (
        Duration::from_secs(1),
        [
            "ttl1_min_s",
            "ttl1_median_s",
            "ttl1_max_s",
            "ttl1_max_x_ttl",
        ],
    ),
    (
        Duration::from_secs(5),
        [
            "ttl5_min_s",
            "ttl5_median_s",
            "ttl5_max_s",
            "ttl5_max_x_ttl",
        ],
    ),
    (
        Duration::from_secs(30),
        [
            "ttl30_min_s",
            "ttl30_median_s",
            "ttl30_max_s",
            "ttl30_max_x_ttl",
        ],
    ),
];

/// How long the follower campaigns before the kill at least: its first attempt has found
/// the name held, and it waits.
const FOLLOWER_SETTLES: Duration = Duration::from_millis(200);

/// Why `kind` has no failover figure, if it has none.
pub fn skips(kind: Kind) -> Option<&'static str> {
    match kind {
        Kind::Distlock => None,
        _ => Some("no leader election"),
    }
}

pub const NOTE: &str = "S8 distlock: the leader is a child process of the bench binary with a `Client::connect(url)` of its own, \
    `client.election(name).ttl(ttl).campaign()` (the lease renewed every ttl/3 by the watchdog, the defaults); \
    the follower is `client.election(name).ttl(ttl).campaign()` on another `Client` in the bench process. \
    No peer crate in the table has leader election (rslock, redlock and distributed-lock-redis have none), so \
    there is nothing to compare against.";

/// The leader: `--leader-child <redis url> <election name> <ttl ms>`.
pub fn child(args: &[String]) -> ExitCode {
    match run_child(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run_child(args: &[String]) -> Result<(), String> {
    let [url, name, ttl_ms] = args else {
        return Err(format!(
            "usage: bench {CHILD_FLAG} <redis url> <election name> <ttl ms>"
        ));
    };
    let ttl = Duration::from_millis(ttl_ms.parse().map_err(|e| format!("ttl `{ttl_ms}`: {e}"))?);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    runtime.block_on(async {
        let client = distlock::Client::connect(url)
            .await
            .map_err(|e| e.to_string())?;
        let leadership = client
            .election(name)
            .ttl(ttl)
            .wait(Duration::from_secs(60))
            .campaign()
            .await
            .map_err(|e| format!("campaign: {e}"))?;
        {
            let mut stdout = std::io::stdout().lock();
            writeln!(stdout, "LEAD {}", leadership.term())
                .and_then(|()| stdout.flush())
                .map_err(|e| format!("stdout: {e}"))?;
        }
        // Leads until the parent closes stdin (or kills it, the point of the exercise).
        let eof = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new()));
        tokio::select! {
            lost = leadership.lost() => Err(format!("lost the lead: {lost}")),
            _ = eof => leadership.resign().await.map_err(|e| e.to_string()),
        }
    })
}

/// S8 for distlock: `samples[i]` kills for `TTLS[i]` on the node at `url`, elections named
/// after `name`. Per ttl: min, median and max seconds, and the max over the ttl.
pub async fn run(url: &str, name: &str, samples: [usize; 3]) -> Result<Metrics, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let client = distlock::Client::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let mut metrics = Metrics::new();
    for ((ttl, names), count) in TTLS.into_iter().zip(samples) {
        let mut times = Vec::with_capacity(count);
        for i in 0..count {
            let election = format!("{name}:ttl{}:{i}", ttl.as_secs());
            let took = sample(&exe, &client, url, &election, ttl).await?;
            eprintln!("  S8 ttl {ttl:?}: {:.3} s", took.as_secs_f64());
            times.push(took.as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let median = crate::results::median(times.clone());
        let max = times.last().copied().unwrap_or(f64::NAN);
        metrics.insert(names[0], times.first().copied().unwrap_or(f64::NAN));
        metrics.insert(names[1], median);
        metrics.insert(names[2], max);
        metrics.insert(names[3], max / ttl.as_secs_f64());
    }
    Ok(metrics)
}

/// One failover: a new leader process, the follower waiting here, SIGKILL, the follower's win.
async fn sample(
    exe: &std::path::Path,
    client: &distlock::Client,
    url: &str,
    name: &str,
    ttl: Duration,
) -> Result<Duration, String> {
    let mut leader = Command::new(exe)
        .arg(CHILD_FLAG)
        .arg(url)
        .arg(name)
        .arg(ttl.as_millis().to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawning {}: {e}", exe.display()))?;
    let result = follow(&mut leader, client, name, ttl).await;
    // Killed already unless something failed first; reaped in every case.
    let _ = leader.kill();
    let _ = tokio::task::spawn_blocking(move || leader.wait()).await;
    result
}

async fn follow(
    leader: &mut Child,
    client: &distlock::Client,
    name: &str,
    ttl: Duration,
) -> Result<Duration, String> {
    let stdout = leader.stdout.take().ok_or("leader stdout")?;
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| e.to_string())?
    .map_err(|e| format!("leader stdout: {e}"))?;
    let leader_term = line
        .trim()
        .strip_prefix("LEAD ")
        .and_then(|t| t.parse().ok())
        .map(distlock::FencingToken::new)
        .ok_or_else(|| format!("leader said `{}`", line.trim()))?;

    let election = client
        .election(name)
        .ttl(ttl)
        .wait(ttl * 3 + Duration::from_secs(10));
    let follower = tokio::spawn(async move { election.campaign().await });
    // The kill lands anywhere in the leader's renewal period (ttl/3), not in step with it.
    let phase = rand::random_range(0..(ttl / 3).as_micros() as u64);
    tokio::time::sleep(FOLLOWER_SETTLES + Duration::from_micros(phase)).await;
    if follower.is_finished() {
        return Err(format!(
            "the follower led while the leader of term {leader_term} was alive"
        ));
    }
    let killed = Instant::now();
    leader.kill().map_err(|e| format!("SIGKILL: {e}"))?;
    let leadership = follower
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the follower's campaign: {e}"))?;
    let took = killed.elapsed();
    let term = leadership.term();
    leadership.resign().await.map_err(|e| e.to_string())?;
    if term <= leader_term {
        return Err(format!(
            "the new leader's term {term} is not above the killed leader's {leader_term}"
        ));
    }
    Ok(took)
}

/// S8's rows of the table: per ttl, the fastest, median and slowest failover, and the slowest
/// over the ttl.
pub const ROWS: &[RowSpec] = &[
    row("S8", "ttl 1 s: min s", "ttl1_min_s", Fmt::Ratio),
    row("S8", "ttl 1 s: median s", "ttl1_median_s", Fmt::Ratio),
    row("S8", "ttl 1 s: max s", "ttl1_max_s", Fmt::Ratio),
    row("S8", "ttl 1 s: max ÷ ttl", "ttl1_max_x_ttl", Fmt::Ratio),
    row("S8", "ttl 5 s: min s", "ttl5_min_s", Fmt::Ratio),
    row("S8", "ttl 5 s: median s", "ttl5_median_s", Fmt::Ratio),
    row("S8", "ttl 5 s: max s", "ttl5_max_s", Fmt::Ratio),
    row("S8", "ttl 5 s: max ÷ ttl", "ttl5_max_x_ttl", Fmt::Ratio),
    row("S8", "ttl 30 s: min s", "ttl30_min_s", Fmt::Ratio),
    row("S8", "ttl 30 s: median s", "ttl30_median_s", Fmt::Ratio),
    row("S8", "ttl 30 s: max s", "ttl30_max_s", Fmt::Ratio),
    row("S8", "ttl 30 s: max ÷ ttl", "ttl30_max_x_ttl", Fmt::Ratio),
];

/// A dead leader is replaced by its lease at worst: the follower sleeps until the lease it
/// was told of ends, and retries.
pub const TARGETS: &[TargetSpec] = &[
    TargetSpec {
        scenario: "S8",
        metric: "ttl1_max_x_ttl",
        goal: "≤ 1.1 (by the lease at worst)",
        source: Source::Informational,
        every_column: false,
        judge: |r, k| absolute(r, k, "S8", "ttl1_max_x_ttl", |v| v <= 1.1),
        ahead: None,
    },
    TargetSpec {
        scenario: "S8",
        metric: "ttl5_max_x_ttl",
        goal: "≤ 1.1 (by the lease at worst)",
        source: Source::Informational,
        every_column: false,
        judge: |r, k| absolute(r, k, "S8", "ttl5_max_x_ttl", |v| v <= 1.1),
        ahead: None,
    },
    TargetSpec {
        scenario: "S8",
        metric: "ttl30_max_x_ttl",
        goal: "≤ 1.1 (by the lease at worst)",
        source: Source::Informational,
        every_column: false,
        judge: |r, k| absolute(r, k, "S8", "ttl30_max_x_ttl", |v| v <= 1.1),
        ahead: None,
    },
];

pub const DEFINITIONS: &[&str] = &[
    "S8: once, after the rounds, on the single node: for each ttl (1 s, 5 s, 30 s; 7, 5 and 3 kills, with --quick 3, 2 and 1) a leader process (a child of the bench binary, its own `Client`) campaigns and leads; the bench process campaigns as the follower on a `Client` of its own, and after 200 ms plus a random part of the leader's renewal period (uniform in [0, ttl/3)) sends the leader SIGKILL. The figure is the time from just before the kill to the follower's `campaign()` returning; a follower that leads before the kill, or whose term is not above the killed leader's, fails the sample. It is bounded by what was left of the leader's lease at the kill (between 2/3 of the ttl and the ttl, the watchdog renewing every ttl/3) plus the follower's retry. No peer crate has leader election.",
];
