//! Leader election on real servers: one leader at a time through `kill -9` of the leader,
//! `SIGSTOP` of the leader past its lease and resignations, in candidate processes
//! (`contender elect`) whose actions a separate server checks (`Observer::lead`), with terms
//! strictly increasing; on one node, a Redlock quorum and a Redis Cluster. Observers hear a
//! resignation by its wake-up and a dead leader by its lease; a leader learns of its loss
//! before its server's lease ends; lost replies leave no leadership behind.

mod common;

use std::collections::VecDeque;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{lock_key, pttl, CONTENDER};
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
            let mut child = Command::new(CONTENDER)
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

/// Three candidate processes on `url` with leases of `ttl`: the leader is killed (`kill -9`),
/// the next stopped (`SIGSTOP`) until the third took over and acted, then resumed (it must
/// report the loss, and never act while the other leads), then the leader resigns and the
/// resumed one takes over. An observer in this process follows it all. Exactly one leader
/// acts at a time (the observer server refuses no action as stale), and terms increase.
async fn one_leader_at_a_time(url: &str, ttl: Duration, name: &str) {
    let observer_server = RedisServer::start();
    let observer = Observer::connect(&observer_server.url(), name).await;
    let watcher = connect(url).await;
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    // Every leader the observer reports, in order.
    let history = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let recorder = {
        let (mut leader, history) = (leader.clone(), history.clone());
        tokio::spawn(async move {
            loop {
                if let Some(now) = &*leader.borrow_and_update() {
                    history.lock().expect("history").push(now.term);
                }
                if leader.changed().await.is_err() {
                    return;
                }
            }
        })
    };
    let mut candidates = Candidates::start(3, url, &observer_server.url(), name, ttl);

    let (first, t1) = candidates.next_leader().await;
    acts_of(&observer, t1).await;
    seen(&mut leader, "the first leader", |l| term(l) == Some(t1)).await;

    // A leader killed: the next one leads once its lease ran out.
    candidates.kill(first).await;
    let killed_at = Instant::now();
    let (second, t2) = candidates.next_leader().await;
    assert!(t2 > t1, "terms {t1} then {t2}");
    assert!(
        killed_at.elapsed() >= ttl / 3,
        "the next leader took over {:?} after the kill, before the lease could end",
        killed_at.elapsed()
    );
    acts_of(&observer, t2).await;
    seen(&mut leader, "the second leader", |l| term(l) == Some(t2)).await;

    // A leader stopped past its lease: the third takes over, and the stopped one, resumed,
    // reports the loss.
    candidates.signal(second, libc::SIGSTOP);
    let (third, t3) = candidates.next_leader().await;
    assert_ne!(third, second);
    assert!(t3 > t2, "terms {t2} then {t3}");
    acts_of(&observer, t3).await;
    candidates.signal(second, libc::SIGCONT);
    let (_, lost) = candidates
        .expect("the resumed leader's loss", |i, l| {
            i == second && l.starts_with("LOST ")
        })
        .await;
    assert_eq!(term_in(&lost), t2);
    // It acted no more: the third still leads and acts.
    let acts = observer.acts().await;
    assert!(wait_until_async(EVENT_LIMIT, || async { observer.acts().await > acts + 10 }).await);
    assert_eq!(observer.terms().await.last(), Some(&t3));

    // A resignation: the resumed candidate takes over.
    candidates.send(third, "resign").await;
    candidates
        .expect("the resignation", |i, l| {
            i == third && l == format!("RESIGNED {t3}")
        })
        .await;
    let (fourth, t4) = candidates.next_leader().await;
    assert_eq!(fourth, second);
    assert!(t4 > t3, "terms {t3} then {t4}");
    acts_of(&observer, t4).await;
    seen(&mut leader, "the fourth leader", |l| term(l) == Some(t4)).await;

    assert_eq!(observer.stale_terms().await, 0, "two leaders acted at once");
    assert_eq!(observer.terms().await, [t1, t2, t3, t4]);
    assert!(
        candidates.unexpected_from(second).is_empty(),
        "{:?}",
        candidates.unexpected_from(second)
    );
    eprintln!(
        "{name}: terms {t1} {t2} {t3} {t4}, {} actions, {} refused as late",
        observer.acts().await,
        observer.late().await
    );
    recorder.abort();
    let observed = history.lock().expect("history").clone();
    assert!(
        observed.windows(2).all(|w| w[0] <= w[1]) && observed.last() == Some(&t4),
        "the observer's terms went back: {observed:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_on_one_node() {
    let server = RedisServer::start();
    one_leader_at_a_time(&server.url(), Duration::from_millis(1000), "e-node").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_on_a_quorum() {
    let servers = RedisServers::start(3);
    one_leader_at_a_time(
        &servers.urls().join(","),
        Duration::from_millis(1500),
        "e-quorum",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_on_a_cluster() {
    let cluster = RedisCluster::start();
    let url = format!("cluster:{}", cluster.urls().join(","));
    one_leader_at_a_time(&url, Duration::from_millis(1500), "e-cluster").await;
}

// ---------------------------------------------------------------------------------------------
// Observers, in-process leaders.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observers_hear_resignations_and_new_leaders_by_their_messages() {
    let server = RedisServer::start();
    let name = "e-events";
    // Three clients, as three processes: a leader's release publishes for another client's
    // observer only because the observer marked the lock.
    let (a, b, watcher) = (
        connect(&server.url()).await,
        connect(&server.url()).await,
        connect(&server.url()).await,
    );
    // A lease of a minute: what comes within EVENT_LIMIT came by a message, not by the
    // lease running out.
    let ttl = Duration::from_secs(60);
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    assert_eq!(*leader.borrow(), None);

    let first = a.election(name).ttl(ttl).campaign().await.expect("lead");
    assert!(first.is_leader());
    let now = seen(&mut leader, "the leader", |l| term(l) == Some(first.term()))
        .await
        .expect("a leader");
    assert_eq!(now.holder.pid, Some(std::process::id()));
    assert!(now.holder.host.is_some(), "{:?}", now.holder);
    assert!(
        now.holder
            .site
            .as_deref()
            .is_some_and(|s| s.contains("election.rs")),
        "{:?}",
        now.holder
    );

    // Someone else leads: a bounded campaign times out; the leader's own task is refused.
    let busy = b
        .election(name)
        .ttl(ttl)
        .wait(Duration::from_millis(200))
        .campaign()
        .await
        .expect_err("someone leads");
    assert!(matches!(busy, Error::Timeout { .. }), "{busy}");
    let again = a
        .election(name)
        .campaign()
        .await
        .expect_err("this task leads");
    assert!(matches!(again, Error::Reentrant { .. }), "{again}");

    // A candidate waits, in the observer's client; the leader resigns: the candidate leads
    // at once (its own sleep is capped by the leader's minute-long lease: the observer took
    // neither its wake-up nor its turn), and the observer sees it.
    // Its attempt (the fenced acquire script) found the lock busy once the server ran it;
    // nothing else runs a script meanwhile (the observer reads only on messages now).
    let scripts = || {
        tokio::task::block_in_place(|| server.commandstats().get("evalsha").copied()).unwrap_or(0)
    };
    let before = scripts();
    let candidate = {
        let watcher = watcher.clone();
        tokio::spawn(async move { watcher.election(name).ttl(ttl).campaign().await })
    };
    let waiting = wait_until_async(EVENT_LIMIT, || async { scripts() > before }).await;
    assert!(waiting, "the candidate never attempted");
    first.resign().await.expect("resign");
    let second = tokio::time::timeout(EVENT_LIMIT, candidate)
        .await
        .expect("the candidate was woken by the resignation")
        .expect("task")
        .expect("lead");
    assert!(
        second.term() > now.term,
        "terms {} then {}",
        now.term,
        second.term()
    );
    seen(&mut leader, "the next leader", |l| {
        term(l) == Some(second.term())
    })
    .await;

    // Nobody waits: the resignation alone tells the observer.
    second.resign().await.expect("resign");
    seen(&mut leader, "the resignation", Option::is_none).await;
    assert_eq!(pttl(&server, name).await, -2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leader_is_seen_gone_when_its_lease_ends() {
    let server = RedisServer::start();
    let observer_server = RedisServer::start();
    let name = "e-dead";
    let ttl = Duration::from_millis(1500);
    let mut candidates = Candidates::start(1, &server.url(), &observer_server.url(), name, ttl);
    let (only, t) = candidates.next_leader().await;
    let watcher = connect(&server.url()).await;
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    seen(&mut leader, "the leader", |l| term(l) == Some(t)).await;
    candidates.kill(only).await;
    let killed_at = Instant::now();
    seen(&mut leader, "the dead leader gone", Option::is_none).await;
    // Its lease had at least two thirds of the ttl left (renewed every third): gone by its
    // expiry, not before.
    assert!(
        killed_at.elapsed() >= ttl / 3,
        "seen gone {:?} after the kill",
        killed_at.elapsed()
    );
    assert_eq!(pttl(&server, name).await, -2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_learns_of_its_loss_before_its_servers_lease_ends() {
    let mut server = RedisServer::start();
    let locks = connect(&server.url()).await;
    let name = "e-frozen";
    // The drift allowance is 1 % of the ttl + 2 ms: 202 ms between the leader's deadline and
    // the server's lease end, room for resuming the server and asking it on a loaded machine.
    let ttl = Duration::from_secs(20);
    let leadership = locks
        .election(name)
        .ttl(ttl)
        .campaign()
        .await
        .expect("lead");
    let mut raw = server.async_connection().await;
    server.pause();
    let lost = tokio::time::timeout(2 * ttl, leadership.lost())
        .await
        .expect("lost() fires while the server is silent");
    assert!(matches!(lost, Error::LeaseLost { .. }), "{lost}");
    assert!(!leadership.is_leader());
    server.resume();
    let left: i64 = redis::cmd("PTTL")
        .arg(lock_key(name))
        .query_async(&mut raw)
        .await
        .expect("PTTL");
    assert!(
        left > 0,
        "the server's lease had ended ({left}) when the leader learned of its loss"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_election_reports_the_quorums_term_and_outlives_a_frozen_node() {
    let mut servers = RedisServers::start(3);
    let url = servers.urls().join(",");
    let name = "e-quorum-events";
    let ttl = Duration::from_secs(30);
    let (a, b, watcher) = (
        connect(&url).await,
        connect(&url).await,
        connect(&url).await,
    );
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    let first = a.election(name).ttl(ttl).campaign().await.expect("lead");
    let t1 = first.term();
    seen(&mut leader, "the leader", |l| term(l) == Some(t1)).await;

    servers[2].pause();
    let candidate = {
        let b = b.clone();
        tokio::spawn(async move { b.election(name).ttl(ttl).campaign().await })
    };
    first.resign().await.expect("resign on a majority");
    let second = tokio::time::timeout(EVENT_LIMIT, candidate)
        .await
        .expect("the candidate was woken by the resignation")
        .expect("task")
        .expect("lead");
    assert!(second.term() > t1, "terms {t1} then {}", second.term());
    seen(&mut leader, "the next leader", |l| {
        term(l) == Some(second.term())
    })
    .await;
    second.resign().await.expect("resign");
    seen(&mut leader, "the resignation", Option::is_none).await;
    servers[2].resume();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_election_through_sentinel() {
    let deployment = RedisSentinel::start();
    let (urls, master) = (deployment.sentinel_urls(), deployment.master_name());
    let client = || async {
        Client::sentinel(urls.clone(), master)
            .await
            .expect("connect through the sentinels")
    };
    let (a, b, watcher) = (client().await, client().await, client().await);
    let name = "e-sentinel";
    let ttl = Duration::from_secs(30);
    let mut leader = watcher
        .election(name)
        .ttl(ttl)
        .observe()
        .await
        .expect("observe");
    let first = a.election(name).ttl(ttl).campaign().await.expect("lead");
    let t1 = first.term();
    seen(&mut leader, "the leader", |l| term(l) == Some(t1)).await;
    let candidate = {
        let b = b.clone();
        tokio::spawn(async move { b.election(name).ttl(ttl).campaign().await })
    };
    first.resign().await.expect("resign");
    let second = tokio::time::timeout(EVENT_LIMIT, candidate)
        .await
        .expect("the candidate leads after the resignation")
        .expect("task")
        .expect("lead");
    assert!(second.term() > t1, "terms {t1} then {}", second.term());
    seen(&mut leader, "the next leader", |l| {
        term(l) == Some(second.term())
    })
    .await;
    drop(second);
    seen(&mut leader, "the dropped leadership", Option::is_none).await;
}

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
