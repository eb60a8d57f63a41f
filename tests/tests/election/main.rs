//! Leader election on real servers: one leader at a time through `kill -9` of the leader,
//! `SIGSTOP` of the leader past its lease and resignations, in candidate processes
//! (`contender elect`) whose actions a separate server checks (`Observer::lead`), with terms
//! strictly increasing; on one node, a Redlock quorum and a Redis Cluster. Observers hear a
//! resignation by its wake-up and a dead leader by its lease; a leader learns of its loss
//! before its server's lease ends; lost replies leave no leadership behind.

use distlock_testkit::common;

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{contender, lock_key, pttl};
use distlock::{Client, Error, FencingToken, Leader};
use distlock_testkit::{
    wait_until_async, FaultProxy, Observer, RedisCluster, RedisSentinel, RedisServer, RedisServers,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};

/// How long a test waits for an event that should come far sooner; only a broken election
/// reaches it, and the test then fails instead of hanging.
const EVENT_LIMIT: Duration = Duration::from_secs(15);

mod lost;
mod observers;
mod one_leader;

/// One URL: a single node; several, comma-separated: a quorum (without the restart guard, as
/// the contender connects: the servers are fresh); `cluster:URL,..`: a Redis Cluster.
async fn connect(url: &str) -> Client {
    if let Some(seeds) = url.strip_prefix("cluster:") {
        return Client::cluster(seeds.split(',')).await.expect("connect");
    }
    if url.contains(',') {
        return Client::quorum_builder(url.split(','))
            .restart_delay(Duration::ZERO)
            .connect()
            .await
            .expect("connect");
    }
    Client::connect(url).await.expect("connect")
}

/// Waits (up to [`EVENT_LIMIT`]) until the observed leader satisfies `ok`; returns it.
async fn seen(
    leader: &mut watch::Receiver<Option<Leader>>,
    what: &str,
    ok: impl FnMut(&Option<Leader>) -> bool,
) -> Option<Leader> {
    let found = tokio::time::timeout(EVENT_LIMIT, leader.wait_for(ok))
        .await
        .map(|seen| seen.expect("the observer runs").clone());
    found.unwrap_or_else(|_| panic!("the observer never saw {what}: {:?}", *leader.borrow()))
}

fn term(leader: &Option<Leader>) -> Option<FencingToken> {
    leader.as_ref().map(|l| l.term)
}

// ---------------------------------------------------------------------------------------------
// Candidate processes.

/// Candidate processes (`contender elect`) of one election, their stdout lines merged.
struct Candidates {
    children: Vec<Option<Child>>,
    stdins: Vec<Option<ChildStdin>>,
    lines: mpsc::UnboundedReceiver<(usize, String)>,
    /// Lines read but not yet expected.
    pending: VecDeque<(usize, String)>,
}

impl Candidates {
    fn start(n: usize, url: &str, observer: &str, name: &str, ttl: Duration) -> Candidates {
        let (send, lines) = mpsc::unbounded_channel();
        let mut children = Vec::new();
        let mut stdins = Vec::new();
        for i in 0..n {
            let mut child = Command::new(contender())
                .args(["elect", url, observer, name, &ttl.as_millis().to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn a candidate");
            let stdout = child.stdout.take().expect("stdout");
            stdins.push(child.stdin.take());
            children.push(Some(child));
            let send = send.clone();
            tokio::spawn(async move {
                let mut out = BufReader::new(stdout).lines();
                while let Ok(Some(line)) = out.next_line().await {
                    let _ = send.send((i, line));
                }
            });
        }
        Candidates {
            children,
            stdins,
            lines,
            pending: VecDeque::new(),
        }
    }

    /// The first line (from any candidate, in arrival order) that `wanted` accepts, with its
    /// candidate; the lines before it are kept for later.
    async fn expect(
        &mut self,
        what: &str,
        wanted: impl Fn(usize, &str) -> bool,
    ) -> (usize, String) {
        if let Some(at) = self.pending.iter().position(|(i, l)| wanted(*i, l)) {
            return self.pending.remove(at).expect("found");
        }
        let deadline = tokio::time::Instant::now() + EVENT_LIMIT;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!("no {what} within {EVENT_LIMIT:?}; read {:?}", self.pending)
                })
                .expect("a candidate is running");
            if wanted(line.0, &line.1) {
                return line;
            }
            self.pending.push_back(line);
        }
    }

    /// The next candidate to lead, and its term.
    async fn next_leader(&mut self) -> (usize, FencingToken) {
        let (i, line) = self
            .expect("new leader", |_, l| l.starts_with("LEAD "))
            .await;
        (i, term_in(&line))
    }

    fn signal(&self, i: usize, signal: libc::c_int) {
        let pid = self.children[i]
            .as_ref()
            .and_then(Child::id)
            .expect("a running candidate") as libc::pid_t;
        // SAFETY: signalling our own child process.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
    }

    async fn kill(&mut self, i: usize) {
        let mut child = self.children[i].take().expect("a running candidate");
        child.kill().await.expect("kill -9");
        self.stdins[i] = None;
    }

    async fn send(&mut self, i: usize, command: &str) {
        let stdin = self.stdins[i].as_mut().expect("a running candidate");
        stdin
            .write_all(format!("{command}\n").as_bytes())
            .await
            .expect("write to the candidate");
        stdin.flush().await.expect("flush");
    }

    /// Every line not yet expected from candidate `i`.
    fn unexpected_from(&self, i: usize) -> Vec<&str> {
        self.pending
            .iter()
            .filter(|(j, _)| *j == i)
            .map(|(_, l)| l.as_str())
            .collect()
    }
}

/// The term a candidate's line names (`LEAD <term>`, `LOST <term>`).
fn term_in(line: &str) -> FencingToken {
    line.split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .map(FencingToken::new)
        .unwrap_or_else(|| panic!("no number in {line:?}"))
}

/// Waits until the leader with `term` acted (as the observer saw it).
async fn acts_of(observer: &Observer, term: FencingToken) {
    let acted = wait_until_async(EVENT_LIMIT, || async {
        observer.terms().await.contains(&term)
    })
    .await;
    assert!(
        acted,
        "the leader of term {term} never acted: {:?}",
        observer.terms().await
    );
}
