//! Model-based random tests against a real `redis-server`.
//!
//! proptest-state-machine generates sequences of lock operations by four owners (two clients,
//! each behind its own fault proxy, times two explicit `LockContext`s) on two lock names whose
//! mode (setnx, reentrant, write-only, read/write, a semaphore of `PERMITS` or a leader
//! election) is part of the generated initial state; where both are setnx locks, also on the
//! two at once (`lock_many`, the "lock" `LOCKS`). On an election, acquiring is campaigning
//! (with no wait, or `CAMPAIGN_WAIT`), releasing is resigning, and after every step at most one
//! leadership reports `is_leader()`, each new term is above every term seen before, and an
//! observer (`Election::observe`) comes to show the leader the model knows, with its term, or
//! nobody.
//! Every step is run against the real server and its outcome is checked against a model that
//! knows, per hold, whether the server certainly still has it (`Live`: watchdog on), may have
//! it (`Maybe`: a 300 ms lease without watchdog, or a hold whose fate a lost reply hid) or
//! certainly no longer has it (`Gone`). Where the model is certain, the outcome is predicted
//! exactly (Busy, re-entry with the tenure's token, release Ok, ...); where it is not, every
//! possible outcome is accepted and the model resynchronises from what the call returned.
//! After every step the invariants are checked against the guards and the server's keys.
//!
//! Bounded for CI (16 cases of up to 30 steps); for a long run:
//! `DISTLOCK_MODEL_CASES=500 cargo test -p distlock-testkit --test suite model::`.
//! `DISTLOCK_MODEL_TRACE=1` prints the steps of every case.
//! Shrunk failures are saved in `tests/tests/suite/model.proptest-regressions` and replayed first.

mod acquire;
mod check;
mod ops;
mod reference;
mod sut;

use reference::{Fault, LockModel, Mode, Op, RefState};

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use distlock::{Client, Error, Guard, Leader, Leadership, LockContext};
use distlock_testkit::{FaultProxy, RedisServer};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::Union;
use proptest::test_runner::{Config, FileFailurePersistence};
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};

const CLIENTS: usize = 2;
const CONTEXTS_PER_CLIENT: usize = 2;
const OWNERS: usize = CLIENTS * CONTEXTS_PER_CLIENT;
const LOCKS: usize = 2;
/// A semaphore's permits: fewer than the owners, so that it fills up.
const PERMITS: usize = 2;
/// The lock index that stands for both names at once (`Client::lock_many`, only where both
/// are setnx locks): a hold on it is a hold on each.
const BOTH: usize = LOCKS;
/// A hold the watchdog renews: the model counts on it for as long as it is not released.
const LONG_TTL: Duration = Duration::from_secs(3);
/// A hold without watchdog: may end at any step, certainly ends soon (see `Op::Expire`).
const SHORT_TTL: Duration = Duration::from_millis(300);
/// The library's default: far above a paused server's delay (`PAUSE`), so a pause alone fails
/// nothing, and above the stalls of a loaded CI machine (250 ms timed out fault-free steps on
/// a shared 2-core box). Lost replies reset the connection, so they cost no timeout.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);
const PAUSE: Duration = Duration::from_millis(100);
/// Longest a hold nobody renews can outlive the step that made it (the long ttl of a ghost
/// acquisition or of a release that failed, a write intent), with room for scheduling.
const SETTLE: Duration = Duration::from_millis(4500);
/// How long a campaign that may wait waits to lead (`Op::Acquire`'s `short` picks no wait).
const CAMPAIGN_WAIT: Duration = Duration::from_millis(400);
/// How long a check waits for an election's observer to show what the model knows: it is told
/// within about a round trip, or re-reads within a ttl (`LONG_TTL`); only a broken observer
/// reaches this, and the test then fails instead of hanging.
const OBSERVER_LIMIT: Duration = Duration::from_secs(10);

fn cases() -> u32 {
    std::env::var("DISTLOCK_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}

fn lock_name(lock: usize) -> String {
    format!("m{lock}")
}

/// Whether a hold on `held` (a name, or `BOTH`) is a hold on the name `lock`.
fn covers(held: usize, lock: usize) -> bool {
    held == lock || held == BOTH
}

/// The names a hold on `held` holds.
fn names(held: usize) -> Vec<usize> {
    (0..LOCKS).filter(|&l| covers(held, l)).collect()
}

fn lock_key(lock: usize) -> String {
    format!("distlock:{{{}}}", lock_name(lock))
}

// ---------------------------------------------------------------------------------------
// The system under test and the model that predicts it.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// setnx or reentrant.
    Exclusive,
    Read,
    Write,
    /// One permit of a semaphore.
    Permit,
    /// A leadership of an election (the setnx lock of its name, fenced, always renewed).
    Leader,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// The server certainly has this hold (watchdog on, not released).
    Live,
    /// The server may or may not have it.
    Maybe,
    /// The server certainly no longer has it.
    Gone,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Ok,
    Busy,
    Reentrant,
    Upgrade,
    NotOwner,
    LeaseLost,
    /// A campaign that waited and did not lead in time.
    Timeout,
    /// A retryable transport error: only after an injected fault.
    Transport,
}

fn classify(e: &Error) -> Outcome {
    match e {
        Error::Busy { .. } => Outcome::Busy,
        Error::Reentrant { .. } => Outcome::Reentrant,
        Error::Upgrade { .. } => Outcome::Upgrade,
        Error::NotOwner { .. } => Outcome::NotOwner,
        Error::LeaseLost { .. } => Outcome::LeaseLost,
        Error::Timeout { .. } => Outcome::Timeout,
        Error::Redis { .. } if e.is_retryable() => Outcome::Transport,
        other => panic!("unexpected error: {other:?}"),
    }
}

/// One hold the model tracks: a guard, or (guard `None`) an orphan whose fate a fault hid or
/// whose background release has not been confirmed.
struct Hold {
    owner: usize,
    lock: usize,
    kind: Kind,
    short: bool,
    fence: Option<u64>,
    guard: Option<Handle>,
    status: Status,
}

/// What an acquisition returned: a lock's guard, or an election's leadership.
enum Handle {
    Lock(Guard),
    Lead(Leadership),
}

impl Handle {
    /// `is_held()`, or `is_leader()`.
    fn is_held(&self) -> bool {
        match self {
            Handle::Lock(g) => g.is_held(),
            Handle::Lead(l) => l.is_leader(),
        }
    }

    /// The fencing token, or the term.
    fn fence(&self) -> Option<u64> {
        match self {
            Handle::Lock(g) => g.fencing_token().map(distlock::FencingToken::get),
            Handle::Lead(l) => Some(l.term().get()),
        }
    }

    /// `release()`, or `resign()`.
    async fn release(self) -> Result<(), Error> {
        match self {
            Handle::Lock(g) => g.release().await,
            Handle::Lead(l) => l.resign().await,
        }
    }
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "owner {} lock {} {:?}{} fence {:?} {:?}{}",
            self.owner,
            self.lock,
            self.kind,
            if self.short { " short" } else { "" },
            self.fence,
            self.status,
            match &self.guard {
                Some(g) => format!(" is_held={}", g.is_held()),
                None => " (orphan)".to_owned(),
            }
        )
    }
}

struct Sut {
    rt: tokio::runtime::Runtime,
    modes: [Mode; LOCKS],
    clients: Vec<Client>,
    proxies: Vec<FaultProxy>,
    contexts: Vec<LockContext>,
    holds: BTreeMap<usize, Hold>,
    next_orphan: usize,
    /// Largest fencing token (or counter value, for reads) seen per lock.
    max_fence: [u64; LOCKS],
    /// An acquisition whose answer was lost may have drawn a token nobody saw.
    unseen_fence: [bool; LOCKS],
    /// Write intents (owner, lock, certainly gone after): they keep new readers out.
    intents: Vec<(usize, usize, Instant)>,
    /// Per election: an observer on the first client.
    observers: [Option<Observer>; LOCKS],
    /// What happened so far, for the failure message.
    log: Vec<String>,
}

/// What an election's observer shows, and the last term it showed.
type Observer = (tokio::sync::watch::Receiver<Option<Leader>>, Cell<u64>);

/// One server for the whole test process; cases flush it.
fn server() -> MutexGuard<'static, RedisServer> {
    static SERVER: OnceLock<Mutex<RedisServer>> = OnceLock::new();
    SERVER
        .get_or_init(|| Mutex::new(RedisServer::start()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn admin() -> redis::Connection {
    server().connection()
}

/// The lock key's type (`none` when absent) and its hash fields, or a semaphore's members.
/// A read/write lock keeps its acquisitions' nonces in lists (`r:<owner>`, `writer-holds`):
/// each nonce counts as a field of its own, `r:<nonce>` or `w:<nonce>`, as in the reentrant
/// lock's `h:<nonce>`.
fn key_state(lock: usize) -> (String, Vec<String>) {
    let mut con = admin();
    let kind: String = redis::cmd("TYPE")
        .arg(lock_key(lock))
        .query(&mut con)
        .expect("TYPE");
    let fields = match kind.as_str() {
        "hash" => {
            let all: Vec<(String, String)> = redis::cmd("HGETALL")
                .arg(lock_key(lock))
                .query(&mut con)
                .expect("HGETALL");
            let mut fields = Vec::new();
            for (field, value) in all {
                let per_nonce = if field.starts_with("r:") {
                    "r:"
                } else if field == "writer-holds" {
                    "w:"
                } else {
                    fields.push(field);
                    continue;
                };
                fields.extend(value.split_whitespace().map(|n| format!("{per_nonce}{n}")));
            }
            fields
        }
        "zset" => redis::cmd("ZRANGE")
            .arg(lock_key(lock))
            .arg(0)
            .arg(-1)
            .query(&mut con)
            .expect("ZRANGE"),
        _ => Vec::new(),
    };
    (kind, fields)
}

/// A semaphore's permits on the server: its members but the recorded limit (expired ones
/// included until a script drops them).
fn permits_held(fields: &[String]) -> usize {
    fields.iter().filter(|f| *f != "permits").count()
}

fn get_string(lock: usize) -> Option<String> {
    redis::cmd("GET")
        .arg(lock_key(lock))
        .query(&mut admin())
        .expect("GET")
}

fn count_prefix(fields: &[String], prefix: &str) -> usize {
    fields.iter().filter(|f| f.starts_with(prefix)).count()
}

/// Polls `done` every 10 ms for up to `limit`.
fn poll(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

struct ModelTest;

impl StateMachineTest for ModelTest {
    type SystemUnderTest = Sut;
    type Reference = LockModel;

    fn init_test(state: &RefState) -> Sut {
        Sut::new(state.modes)
    }

    fn apply(mut sut: Sut, _state: &RefState, op: Op) -> Sut {
        match op {
            Op::Acquire {
                id,
                owner,
                lock,
                read,
                short,
                fault,
            } => sut.acquire(id, owner, lock, read, short, fault),
            Op::Release { id, fault } => sut.release(id, fault),
            Op::Extend { id, fault } => sut.extend(id, fault),
            Op::Drop { id } => sut.drop_guard(id),
            Op::Expire { lock } => sut.expire(lock),
        }
        sut
    }

    fn check_invariants(sut: &Sut, _state: &RefState) {
        sut.check();
    }

    fn teardown(sut: Sut, _state: RefState) {
        sut.finish();
    }
}

fn config() -> Config {
    Config {
        cases: cases(),
        // Each shrink step replays a case against the server: bound the total.
        max_shrink_iters: 200,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

prop_state_machine! {
    #![proptest_config(config())]

    /// Random sequences of lock operations, faults included, against the model.
    #[test]
    fn locks_follow_the_model(sequential 1..30 => ModelTest);
}
