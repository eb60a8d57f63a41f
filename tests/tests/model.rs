//! Model-based random tests against a real `redis-server`.
//!
//! proptest-state-machine generates sequences of lock operations by four owners (two clients,
//! each behind its own fault proxy, times two explicit `LockContext`s) on two lock names whose
//! mode (setnx, reentrant, write-only, read/write or a semaphore of `PERMITS`) is part of the
//! generated initial state; where both are setnx locks, also on the two at once (`lock_many`,
//! the "lock" `LOCKS`).
//! Every step is run against the real server and its outcome is checked against a model that
//! knows, per hold, whether the server certainly still has it (`Live`: watchdog on), may have
//! it (`Maybe`: a 300 ms lease without watchdog, or a hold whose fate a lost reply hid) or
//! certainly no longer has it (`Gone`). Where the model is certain, the outcome is predicted
//! exactly (Busy, re-entry with the tenure's token, release Ok, ...); where it is not, every
//! possible outcome is accepted and the model resynchronises from what the call returned.
//! After every step the invariants are checked against the guards and the server's keys.
//!
//! Bounded for CI (16 cases of up to 30 steps); for a long run:
//! `DISTLOCK_MODEL_CASES=500 cargo test -p distlock-testkit --test model`.
//! `DISTLOCK_MODEL_TRACE=1` prints the steps of every case.
//! Shrunk failures are saved in `tests/tests/model.proptest-regressions` and replayed first.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use distlock::{Client, Error, Guard, LockContext};
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
// The reference state machine: generates the operations. It cannot know which acquisitions
// succeed (that depends on time and faults), so it tracks every guard an acquisition *may*
// have produced; an operation on a guard the run did not get is a no-op there.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Setnx,
    Reentrant,
    /// The read/write lock used only for writing.
    Write,
    /// The read/write lock, each acquisition a read or a write.
    ReadWrite,
    /// A semaphore of `PERMITS`: every acquisition, by any owner, one permit.
    Semaphore,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    None,
    /// The proxy of the acting client drops the next reply (and resets that connection).
    DropReply,
    /// The server is frozen for `PAUSE` while the operation runs.
    Pause,
}

#[derive(Clone, Debug)]
enum Op {
    /// `try_acquire` by `owner` (of both names when `lock` is `BOTH`); `read` picks the side
    /// in `ReadWrite` mode; `short` means `SHORT_TTL` without watchdog. `id` names the guard
    /// for later operations.
    Acquire {
        id: usize,
        owner: usize,
        lock: usize,
        read: bool,
        short: bool,
        fault: Fault,
    },
    Release {
        id: usize,
        fault: Fault,
    },
    Extend {
        id: usize,
        fault: Fault,
    },
    /// Drops the guard: the release goes on in the background.
    Drop {
        id: usize,
    },
    /// Waits until the lock's key is gone, when nothing the model counts on holds it.
    Expire {
        lock: usize,
    },
}

#[derive(Clone, Debug)]
struct RefState {
    modes: [Mode; LOCKS],
    next_id: usize,
    /// Guards that may exist: id -> (owner, lock).
    guards: BTreeMap<usize, (usize, usize)>,
}

struct LockModel;

fn mode_strategy() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Setnx),
        Just(Mode::Reentrant),
        Just(Mode::Write),
        Just(Mode::ReadWrite),
        Just(Mode::Semaphore),
    ]
}

fn fault_strategy() -> impl Strategy<Value = Fault> + Clone {
    prop_oneof![
        8 => Just(Fault::None),
        1 => Just(Fault::DropReply),
        1 => Just(Fault::Pause),
    ]
}

impl ReferenceStateMachine for LockModel {
    type State = RefState;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<RefState> {
        // Both setnx a quarter of the time more, for the cases that take both names at once.
        let modes = prop_oneof![
            3 => (mode_strategy(), mode_strategy()),
            1 => Just((Mode::Setnx, Mode::Setnx)),
        ];
        modes
            .prop_map(|(a, b)| RefState {
                modes: [a, b],
                next_id: 0,
                guards: BTreeMap::new(),
            })
            .boxed()
    }

    fn transitions(state: &RefState) -> BoxedStrategy<Op> {
        let id = state.next_id;
        let short = prop::bool::weighted(0.35);
        // Both names at once where both are setnx locks (a set's names are setnx locks).
        let locks = if state.modes == [Mode::Setnx; LOCKS] {
            0..BOTH + 1
        } else {
            0..LOCKS
        };
        let acquire = (0..OWNERS, locks, any::<bool>(), short, fault_strategy()).prop_map(
            move |(owner, lock, read, short, fault)| Op::Acquire {
                id,
                owner,
                lock,
                read,
                short,
                fault,
            },
        );
        let mut options: Vec<(u32, BoxedStrategy<Op>)> = vec![
            (4, acquire.boxed()),
            (1, (0..LOCKS).prop_map(|lock| Op::Expire { lock }).boxed()),
        ];
        if !state.guards.is_empty() {
            let ids: Vec<usize> = state.guards.keys().copied().collect();
            let holders: Vec<(usize, usize)> = state.guards.values().copied().collect();
            // Re-entry: an owner asks again for a lock it (may) hold.
            options.push((
                2,
                (select(holders), any::<bool>(), short, fault_strategy())
                    .prop_map(move |((owner, lock), read, short, fault)| Op::Acquire {
                        id,
                        owner,
                        lock,
                        read,
                        short,
                        fault,
                    })
                    .boxed(),
            ));
            options.push((
                3,
                (select(ids.clone()), fault_strategy())
                    .prop_map(|(id, fault)| Op::Release { id, fault })
                    .boxed(),
            ));
            options.push((
                1,
                (select(ids.clone()), fault_strategy())
                    .prop_map(|(id, fault)| Op::Extend { id, fault })
                    .boxed(),
            ));
            options.push((1, select(ids).prop_map(|id| Op::Drop { id }).boxed()));
        }
        Union::new_weighted(options).boxed()
    }

    fn apply(mut state: RefState, op: &Op) -> RefState {
        match *op {
            Op::Acquire {
                id, owner, lock, ..
            } => {
                state.guards.insert(id, (owner, lock));
                state.next_id = state.next_id.max(id + 1);
            }
            Op::Release { id, .. } | Op::Drop { id } => {
                state.guards.remove(&id);
            }
            Op::Extend { .. } | Op::Expire { .. } => {}
        }
        state
    }

    // Shrinking removes operations: one naming a guard whose acquisition was removed goes too.
    fn preconditions(state: &RefState, op: &Op) -> bool {
        match *op {
            Op::Acquire { id, .. } => !state.guards.contains_key(&id),
            Op::Release { id, .. } | Op::Extend { id, .. } | Op::Drop { id } => {
                state.guards.contains_key(&id)
            }
            Op::Expire { .. } => true,
        }
    }
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
    guard: Option<Guard>,
    status: Status,
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
    /// What happened so far, for the failure message.
    log: Vec<String>,
}

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
fn key_state(lock: usize) -> (String, Vec<String>) {
    let mut con = admin();
    let kind: String = redis::cmd("TYPE")
        .arg(lock_key(lock))
        .query(&mut con)
        .expect("TYPE");
    let fields = match kind.as_str() {
        "hash" => redis::cmd("HKEYS")
            .arg(lock_key(lock))
            .query(&mut con)
            .expect("HKEYS"),
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

impl Sut {
    fn new(modes: [Mode; LOCKS]) -> Sut {
        redis::cmd("FLUSHALL").exec(&mut admin()).expect("FLUSHALL");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let proxies: Vec<FaultProxy> = (0..CLIENTS)
            .map(|_| FaultProxy::start_for(&server()))
            .collect();
        let clients = proxies
            .iter()
            .map(|p| {
                rt.block_on(
                    Client::builder(&p.url())
                        .response_timeout(RESPONSE_TIMEOUT)
                        .connect(),
                )
                .expect("connect")
            })
            .collect();
        Sut {
            rt,
            modes,
            clients,
            proxies,
            contexts: (0..OWNERS).map(|_| LockContext::new()).collect(),
            holds: BTreeMap::new(),
            next_orphan: 1 << 32,
            max_fence: [0; LOCKS],
            unseen_fence: [false; LOCKS],
            intents: Vec::new(),
            log: Vec::new(),
        }
    }

    fn client_of(owner: usize) -> usize {
        owner / CONTEXTS_PER_CLIENT
    }

    fn fail(&self, what: impl std::fmt::Display) -> ! {
        panic!(
            "{what}\nmodes: {:?}\nsteps:\n  {}\nholds:\n{:#?}",
            self.modes,
            self.log.join("\n  "),
            self.holds
        );
    }

    fn orphan(&mut self, hold: Hold) {
        let id = self.next_orphan;
        self.next_orphan += 1;
        self.holds.insert(
            id,
            Hold {
                guard: None,
                ..hold
            },
        );
    }

    /// Runs `f` (a future made by `make`) under `fault` on behalf of `owner`.
    fn run<T>(&self, owner: usize, fault: Fault, f: impl std::future::Future<Output = T>) -> T {
        let proxy = &self.proxies[Self::client_of(owner)];
        let scoped = self.contexts[owner].scope(f);
        match fault {
            Fault::None => self.rt.block_on(scoped),
            Fault::DropReply => {
                proxy.drop_next_reply();
                let out = self.rt.block_on(scoped);
                // A drop the operation did not use must not hit the next step.
                proxy.clear();
                self.heal(owner);
                out
            }
            Fault::Pause => {
                server().pause();
                let resumer = std::thread::spawn(|| {
                    std::thread::sleep(PAUSE);
                    server().resume();
                });
                let out = self.rt.block_on(scoped);
                resumer.join().expect("resume");
                out
            }
        }
    }

    /// After a reset connection, waits until the client answers again, so that the next
    /// step's outcome does not depend on how fast it reconnects.
    fn heal(&self, owner: usize) {
        let client = &self.clients[Self::client_of(owner)];
        let healed = poll(Duration::from_secs(3), || {
            self.rt.block_on(async {
                match client
                    .lock("model-probe")
                    .ttl(LONG_TTL)
                    .watchdog(false)
                    .try_acquire()
                    .await
                {
                    Ok(g) => g.release().await.is_ok(),
                    Err(_) => false,
                }
            })
        });
        if !healed {
            self.fail("client did not reconnect within 3 s");
        }
    }

    /// The mode of `lock` (`BOTH`: setnx, as each of its names is).
    fn mode(&self, lock: usize) -> Mode {
        self.modes.get(lock).copied().unwrap_or(Mode::Setnx)
    }

    fn kind(&self, lock: usize, read: bool) -> Kind {
        match self.mode(lock) {
            Mode::Setnx | Mode::Reentrant => Kind::Exclusive,
            Mode::Write => Kind::Write,
            Mode::ReadWrite if read => Kind::Read,
            Mode::ReadWrite => Kind::Write,
            Mode::Semaphore => Kind::Permit,
        }
    }

    /// The holds that may be on `lock` (a name, or `BOTH`: on either name).
    fn on_lock(&self, lock: usize) -> impl Iterator<Item = &Hold> {
        self.holds.values().filter(move |h| {
            names(lock).iter().any(|&l| covers(h.lock, l)) && h.status != Status::Gone
        })
    }

    /// Marks every hold on `lock` (a name, or `BOTH`: either) matching `which` as gone
    /// (orphans are forgotten).
    fn gone(&mut self, lock: usize, which: impl Fn(&Hold) -> bool) {
        for hold in self.holds.values_mut() {
            if names(lock).iter().any(|&l| covers(hold.lock, l)) && which(hold) {
                hold.status = Status::Gone;
            }
        }
        self.holds
            .retain(|_, h| h.guard.is_some() || h.status != Status::Gone);
    }

    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &mut self,
        id: usize,
        owner: usize,
        lock: usize,
        read: bool,
        short: bool,
        fault: Fault,
    ) {
        let kind = self.kind(lock, read);
        let now = Instant::now();
        // What the model knows about the holds on this lock, mine (this owner's) or others'.
        let (mut mine_live, mut mine_maybe, mut theirs_live, mut theirs_maybe) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for h in self.on_lock(lock) {
            let list = match (h.owner == owner, h.status) {
                (true, Status::Live) => &mut mine_live,
                (true, _) => &mut mine_maybe,
                (false, Status::Live) => &mut theirs_live,
                (false, _) => &mut theirs_maybe,
            };
            list.push((h.kind, h.fence));
        }
        let excl = |list: &Vec<(Kind, Option<u64>)>| {
            list.iter()
                .filter(|(k, _)| *k != Kind::Read)
                .map(|(_, f)| *f)
                .collect::<Vec<_>>()
        };
        let reads = |list: &Vec<(Kind, Option<u64>)>| list.iter().any(|(k, _)| *k == Kind::Read);
        let intents = self
            .intents
            .iter()
            .any(|&(o, l, until)| o != owner && l == lock && until > now);
        let mut allowed = BTreeSet::new();
        // Tokens an Ok may carry: a tenure's own (None: unknown), or a new, larger one.
        let mut same: Vec<Option<u64>> = Vec::new();
        let mut new_ok = false;
        match (self.mode(lock), kind) {
            (_, Kind::Permit) => {
                // Any owner may hold several permits; only the count of holds decides.
                let live = mine_live.len() + theirs_live.len();
                let maybe = mine_maybe.len() + theirs_maybe.len();
                if live + maybe >= PERMITS {
                    allowed.insert(Outcome::Busy);
                }
                if live < PERMITS {
                    new_ok = true;
                    allowed.insert(Outcome::Ok);
                }
            }
            (Mode::Setnx, _) => {
                if !mine_live.is_empty() {
                    allowed.insert(Outcome::Reentrant);
                } else {
                    if !mine_maybe.is_empty() {
                        // Refused locally while its lease seems valid, else asked for anew.
                        allowed.insert(Outcome::Reentrant);
                    }
                    if !theirs_live.is_empty() {
                        allowed.insert(Outcome::Busy);
                    } else {
                        if !theirs_maybe.is_empty() || !mine_maybe.is_empty() {
                            allowed.insert(Outcome::Busy);
                        }
                        new_ok = true;
                    }
                }
            }
            (_, Kind::Exclusive | Kind::Write) => {
                if !excl(&mine_live).is_empty() {
                    // Re-entry of a tenure the owner certainly holds.
                    same = excl(&mine_live);
                } else {
                    // Re-entry, if its own tenure is still there.
                    same = excl(&mine_maybe);
                    // Holding only the read side refuses the upgrade before anything else.
                    let upgrade_certain = kind == Kind::Write && reads(&mine_live);
                    if kind == Kind::Write && (upgrade_certain || reads(&mine_maybe)) {
                        allowed.insert(Outcome::Upgrade);
                    }
                    if !upgrade_certain {
                        if !theirs_live.is_empty() {
                            allowed.insert(Outcome::Busy);
                        } else {
                            if !theirs_maybe.is_empty() {
                                allowed.insert(Outcome::Busy);
                            }
                            new_ok = true;
                        }
                    }
                }
                if !same.is_empty() || new_ok {
                    allowed.insert(Outcome::Ok);
                }
            }
            (_, Kind::Read) => {
                let writer =
                    |list: &Vec<(Kind, Option<u64>)>| list.iter().any(|(k, _)| *k == Kind::Write);
                if !mine_live.is_empty() {
                    // Re-entry, or the writer reading (downgrade): never kept out.
                    allowed.insert(Outcome::Ok);
                } else {
                    if !mine_maybe.is_empty() {
                        allowed.insert(Outcome::Ok);
                    }
                    if writer(&theirs_live) {
                        allowed.insert(Outcome::Busy);
                    } else {
                        // A writer that may have gone, or a waiting writer's intent that may
                        // have ended.
                        if writer(&theirs_maybe) || intents {
                            allowed.insert(Outcome::Busy);
                        }
                        allowed.insert(Outcome::Ok);
                    }
                }
            }
        }
        if self.mode(lock) == Mode::Setnx && new_ok {
            allowed.insert(Outcome::Ok);
        }
        if fault != Fault::None {
            allowed.insert(Outcome::Transport);
        }

        let client = &self.clients[Self::client_of(owner)];
        let name = lock_name(lock);
        let ttl = if short { SHORT_TTL } else { LONG_TTL };
        let request = match self.mode(lock) {
            Mode::Setnx if lock == BOTH => client.lock_many([lock_name(0), lock_name(1)]),
            Mode::Setnx => client.lock(&name),
            Mode::Reentrant => client.reentrant(&name),
            Mode::Write | Mode::ReadWrite if kind == Kind::Read => client.read(&name),
            Mode::Write | Mode::ReadWrite => client.write(&name),
            Mode::Semaphore => client.semaphore(&name, PERMITS as u32),
        }
        .ttl(ttl)
        .watchdog(!short)
        // The model tells tenures apart by their tokens.
        .fencing(true);
        let result = self.run(owner, fault, request.try_acquire());
        let after = Instant::now();
        let outcome = match &result {
            Ok(_) => Outcome::Ok,
            Err(e) => classify(e),
        };
        self.log.push(format!(
            "#{id} owner {owner} acquire {kind:?} of {}{} [{fault:?}] -> {}",
            if lock == BOTH {
                "m0+m1".to_owned()
            } else {
                lock_name(lock)
            },
            if short { " short" } else { "" },
            match &result {
                Ok(g) => format!("Ok(fence {:?})", g.fencing_token()),
                Err(e) => format!("{e}"),
            }
        ));
        if !allowed.contains(&outcome) {
            self.fail(format!(
                "acquire: got {outcome:?}, model allows {allowed:?}"
            ));
        }
        match result {
            Ok(guard) => {
                let Some(fence) = guard.fencing_token() else {
                    self.fail("no fencing token, though fencing(true) asked for one");
                };
                // A set's token is above each name's earlier tokens.
                let max = names(lock)
                    .iter()
                    .map(|&l| self.max_fence[l])
                    .max()
                    .unwrap_or(0);
                if kind == Kind::Read {
                    // Readers get the latest write tenure's token.
                    let ok = if self.unseen_fence[lock] {
                        fence >= max
                    } else {
                        fence == max
                    };
                    if !ok {
                        self.fail(format!("read token {fence}, latest write token {max}"));
                    }
                    self.max_fence[lock] = max.max(fence);
                    // A reader got in: no other owner's write hold is left.
                    self.gone(lock, |h| h.owner != owner && h.kind == Kind::Write);
                } else if kind == Kind::Permit {
                    // A permit of its own: every token is new, and the other permits stay.
                    if fence <= max {
                        self.fail(format!("permit token {fence}, not above {max}"));
                    }
                    self.max_fence[lock] = fence;
                } else if same.iter().any(|f| f.is_none_or(|f| f == fence)) && fence <= max {
                    // Re-entry of a tenure: nothing else changed.
                } else if new_ok && fence > max {
                    // A new tenure: every earlier hold on this lock must have ended (each name
                    // of a set's counter was raised to its token).
                    for l in names(lock) {
                        self.max_fence[l] = fence;
                    }
                    self.gone(lock, |_| true);
                    self.intents.retain(|&(o, l, _)| !(o == owner && l == lock));
                } else {
                    self.fail(format!(
                        "token {fence}: expected one of {same:?} (re-entry) or, new tenure \
                         allowed: {new_ok}, above {max}"
                    ));
                }
                self.holds.insert(
                    id,
                    Hold {
                        owner,
                        lock,
                        kind,
                        short,
                        fence: Some(fence),
                        guard: Some(guard),
                        status: if short { Status::Maybe } else { Status::Live },
                    },
                );
            }
            Err(e) => {
                let outcome = classify(&e);
                if kind == Kind::Write && matches!(outcome, Outcome::Busy | Outcome::Transport) {
                    // A waiting writer's intent keeps new readers out for up to its ttl.
                    self.intents
                        .push((owner, lock, after + ttl + Duration::from_millis(100)));
                }
                if outcome == Outcome::Transport {
                    // The request may have taken the lock; the give-back runs in the
                    // background.
                    if kind != Kind::Read {
                        for l in names(lock) {
                            self.unseen_fence[l] = true;
                        }
                    }
                    self.orphan(Hold {
                        owner,
                        lock,
                        kind,
                        short: true,
                        fence: None,
                        guard: None,
                        status: Status::Maybe,
                    });
                }
            }
        }
    }

    fn release(&mut self, id: usize, fault: Fault) {
        let Some(hold) = self.holds.get_mut(&id) else {
            self.log.push(format!("#{id} release: no such guard"));
            return;
        };
        let guard = hold.guard.take().expect("guards keep their guard");
        let status = hold.status;
        let owner = hold.owner;
        let mut allowed = BTreeSet::new();
        match status {
            Status::Live => {
                allowed.insert(Outcome::Ok);
            }
            Status::Maybe => {
                allowed.extend([Outcome::Ok, Outcome::NotOwner]);
            }
            Status::Gone => {
                allowed.insert(Outcome::NotOwner);
            }
        }
        if fault != Fault::None {
            // A retry after a lost reply counts a hold it no longer finds as released.
            allowed.extend([Outcome::Transport, Outcome::Ok]);
        }
        let result = self.run(owner, fault, guard.release());
        let outcome = result.as_ref().map_or_else(classify, |_| Outcome::Ok);
        self.log
            .push(format!("#{id} release [{fault:?}] -> {outcome:?}"));
        if !allowed.contains(&outcome) {
            self.fail(format!(
                "release of a {status:?} hold: got {outcome:?}, model allows {allowed:?}"
            ));
        }
        let hold = self.holds.remove(&id).expect("hold");
        if outcome == Outcome::Transport {
            // The guard's drop finishes the release in the background.
            self.orphan(Hold {
                status: Status::Maybe,
                ..hold
            });
        }
    }

    fn extend(&mut self, id: usize, fault: Fault) {
        let Some(hold) = self.holds.get_mut(&id) else {
            self.log.push(format!("#{id} extend: no such guard"));
            return;
        };
        let mut guard = hold.guard.take().expect("guards keep their guard");
        let (status, owner, short) = (hold.status, hold.owner, hold.short);
        let mut allowed = BTreeSet::new();
        match status {
            Status::Live => allowed.insert(Outcome::Ok),
            Status::Maybe => {
                allowed.insert(Outcome::Ok);
                allowed.insert(Outcome::LeaseLost)
            }
            Status::Gone => allowed.insert(Outcome::LeaseLost),
        };
        if fault != Fault::None {
            allowed.insert(Outcome::Transport);
        }
        let ttl = if short { SHORT_TTL } else { LONG_TTL };
        let result = self.run(owner, fault, guard.extend(ttl));
        let outcome = result.as_ref().map_or_else(classify, |_| Outcome::Ok);
        self.log
            .push(format!("#{id} extend [{fault:?}] -> {outcome:?}"));
        self.holds.get_mut(&id).expect("hold").guard = Some(guard);
        if !allowed.contains(&outcome) {
            self.fail(format!(
                "extend of a {status:?} hold: got {outcome:?}, model allows {allowed:?}"
            ));
        }
    }

    fn drop_guard(&mut self, id: usize) {
        let Some(hold) = self.holds.get_mut(&id) else {
            self.log.push(format!("#{id} drop: no such guard"));
            return;
        };
        let guard = hold.guard.take().expect("guards keep their guard");
        let (status, lock, kind) = (hold.status, hold.lock, hold.kind);
        self.log.push(format!("#{id} drop ({status:?})"));
        if status != Status::Live {
            // Nothing to wait for that the model could recognise: an orphan until the key
            // expires.
            let _in_runtime = self.rt.enter();
            drop(guard);
            if status == Status::Gone {
                self.holds.remove(&id);
            }
            return;
        }
        // The hold is certainly on the server: wait for the background release to remove
        // exactly that (its field, its permit, or the setnx key holding its token).
        let held = |fields: &[String]| match kind {
            Kind::Exclusive => count_prefix(fields, "h:"),
            Kind::Read => count_prefix(fields, "r:"),
            Kind::Write => count_prefix(fields, "w:"),
            Kind::Permit => permits_held(fields),
        };
        let setnx = self.mode(lock) == Mode::Setnx;
        let values = || names(lock).into_iter().map(get_string).collect::<Vec<_>>();
        let before_values = if setnx { values() } else { Vec::new() };
        let before = if setnx { 0 } else { held(&key_state(lock).1) };
        {
            let _in_runtime = self.rt.enter();
            drop(guard);
        }
        let released = poll(Duration::from_secs(2), || {
            if setnx {
                // Every name's value changed: a set's names go together.
                values()
                    .iter()
                    .zip(&before_values)
                    .all(|(now, before)| now != before)
            } else {
                held(&key_state(lock).1) < before
            }
        });
        if !released {
            self.fail("a dropped guard's hold was still on the server 2 s later");
        }
        self.holds.remove(&id);
    }

    fn expire(&mut self, lock: usize) {
        if self.on_lock(lock).any(|h| h.status == Status::Live) {
            self.log
                .push(format!("expire m{lock}: skipped, a renewed hold is live"));
            return;
        }
        let started = Instant::now();
        let gone = poll(SETTLE, || key_state(lock).0 == "none");
        self.log.push(format!(
            "expire m{lock}: key gone after {:?}",
            started.elapsed()
        ));
        if !gone {
            self.fail(format!(
                "m{lock}: no renewed hold, yet its key outlived {SETTLE:?}: {:?}",
                key_state(lock)
            ));
        }
        self.gone(lock, |_| true);
        self.intents.retain(|&(_, l, _)| l != lock);
    }

    fn check(&self) {
        for lock in 0..LOCKS {
            // Exclusion as the guards report it.
            let mut holders: Vec<(usize, Kind)> = Vec::new();
            for h in self.holds.values().filter(|h| covers(h.lock, lock)) {
                let Some(guard) = &h.guard else { continue };
                let held = guard.is_held();
                if h.status == Status::Live && !held {
                    self.fail(format!("a renewed hold reports is_held() false: {h:?}"));
                }
                if h.status == Status::Gone && held {
                    self.fail(format!(
                        "a guard whose hold the server no longer has reports is_held(): {h:?}"
                    ));
                }
                if held {
                    holders.push((h.owner, h.kind));
                }
            }
            let owners: BTreeSet<usize> = holders.iter().map(|(o, _)| *o).collect();
            if self.mode(lock) == Mode::Semaphore {
                if holders.len() > PERMITS {
                    self.fail(format!(
                        "m{lock}: more than {PERMITS} permits held: {holders:?}"
                    ));
                }
            } else if holders.iter().any(|(_, k)| *k != Kind::Read) && owners.len() > 1 {
                self.fail(format!("m{lock}: several owners hold it: {holders:?}"));
            }
            // The server's key against the model.
            let (key_type, fields) = key_state(lock);
            let count = |kind: Kind, status: Status| {
                self.on_lock(lock)
                    .filter(|h| h.kind == kind && h.status == status)
                    .count()
            };
            let live = self.on_lock(lock).any(|h| h.status == Status::Live);
            let anything = self.on_lock(lock).next().is_some()
                || self
                    .intents
                    .iter()
                    .any(|&(_, l, until)| l == lock && until > Instant::now());
            if live && key_type == "none" {
                self.fail(format!(
                    "m{lock}: a renewed hold is live but the key is gone"
                ));
            }
            if !anything && key_type != "none" {
                self.fail(format!(
                    "m{lock}: nothing holds it but the key is there: {key_type} {fields:?}"
                ));
            }
            let expected_type = match self.mode(lock) {
                Mode::Setnx => "string",
                Mode::Semaphore => "zset",
                _ => "hash",
            };
            if self.mode(lock) == Mode::Semaphore && key_type != "none" {
                let n = permits_held(&fields);
                let live = count(Kind::Permit, Status::Live);
                let maybe = count(Kind::Permit, Status::Maybe);
                if n < live || n > live + maybe {
                    self.fail(format!(
                        "m{lock}: {n} permits on the server, model expects {live}..={}: {fields:?}",
                        live + maybe
                    ));
                }
            }
            if key_type != "none" && key_type != expected_type {
                self.fail(format!("m{lock}: key of type {key_type}"));
            }
            let per_acquisition = [
                (Kind::Exclusive, "h:"),
                (Kind::Read, "r:"),
                (Kind::Write, "w:"),
            ];
            for (kind, prefix) in per_acquisition {
                if matches!(self.mode(lock), Mode::Setnx | Mode::Semaphore) {
                    break;
                }
                let n = count_prefix(&fields, prefix);
                let (low, high) = (
                    count(kind, Status::Live),
                    count(kind, Status::Live) + count(kind, Status::Maybe),
                );
                if n < low || n > high {
                    self.fail(format!(
                        "m{lock}: {n} `{prefix}` fields, model expects {low}..={high}: {fields:?}"
                    ));
                }
            }
        }
    }

    /// Releases everything still held, then every lock key must vanish.
    fn finish(mut self) {
        // `DISTLOCK_MODEL_TRACE=1` prints every case's steps, to see what the runs exercise.
        if std::env::var_os("DISTLOCK_MODEL_TRACE").is_some() {
            eprintln!("case, modes {:?}:\n  {}", self.modes, self.log.join("\n  "));
        }
        let ids: Vec<usize> = self
            .holds
            .iter()
            .filter(|(_, h)| h.guard.is_some())
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.release(id, Fault::None);
        }
        let left = || {
            (0..LOCKS)
                .filter(|&l| key_state(l).0 != "none")
                .collect::<Vec<_>>()
        };
        // Renewed holds were released just now; what may remain (orphans, intents) expires
        // within SETTLE, and 1 s is enough when the model knows of nothing.
        let uncertain =
            self.holds.values().any(|h| h.status != Status::Gone) || !self.intents.is_empty();
        let limit = if uncertain {
            SETTLE
        } else {
            Duration::from_secs(1)
        };
        if !poll(limit, || left().is_empty()) {
            self.fail(format!(
                "lock keys left {limit:?} after everything was released: {:?}",
                left()
                    .into_iter()
                    .map(|l| (lock_key(l), key_state(l)))
                    .collect::<Vec<_>>()
            ));
        }
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
