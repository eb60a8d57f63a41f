//! The reference state machine: generates the operations. It cannot know which acquisitions
//! succeed (that depends on time and faults), so it tracks every guard an acquisition *may*
//! have produced; an operation on a guard the run did not get is a no-op there.

use super::*;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Setnx,
    Reentrant,
    /// The read/write lock used only for writing.
    Write,
    /// The read/write lock, each acquisition a read or a write.
    ReadWrite,
    /// A semaphore of `PERMITS`: every acquisition, by any owner, one permit.
    Semaphore,
    /// A leader election: an acquisition is a campaign, a release a resignation.
    Election,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    None,
    /// The proxy of the acting client drops the next reply (and resets that connection).
    DropReply,
    /// The server is frozen for `PAUSE` while the operation runs.
    Pause,
}

#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// `try_acquire` by `owner` (of both names when `lock` is `BOTH`); `read` picks the side
    /// in `ReadWrite` mode; `short` means `SHORT_TTL` without watchdog (on an election, which
    /// is always renewed: a campaign with no wait rather than `CAMPAIGN_WAIT`). `id` names
    /// the guard (or leadership) for later operations.
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
    /// `extend` (a leadership has none: `is_leader()` against the model).
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
pub(crate) struct RefState {
    pub(crate) modes: [Mode; LOCKS],
    pub(crate) next_id: usize,
    /// Guards that may exist: id -> (owner, lock).
    pub(crate) guards: BTreeMap<usize, (usize, usize)>,
}

pub(crate) struct LockModel;

fn mode_strategy() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Setnx),
        Just(Mode::Reentrant),
        Just(Mode::Write),
        Just(Mode::ReadWrite),
        Just(Mode::Semaphore),
        Just(Mode::Election),
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
