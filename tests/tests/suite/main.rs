//! The integration tests, one module per concern, in one test binary: each binary of its own
//! linked the runtime, the kit and every dev-dependency again, and a rebuild after a change to
//! the runtime cost twice the CPU (docs/verification.md, "One test binary or many", which gives each one's reason).
//!
//! A test file needs a process of its own, and stays a binary beside this one, when it
//! installs something once per process or disturbs a deployment the process shares:
//! `operations/` (a global metrics recorder), `rwlock_wakeups.rs` (the process-wide test
//! hook `__test_hooks::wake_ups_only`), `cluster_failover.rs` and `sentinel.rs` (they kill and pause
//! the servers of their shared deployment), `election/` (it starts its candidates with
//! `tokio::process`, whose `SIGCHLD` handler interrupts other tests' timed socket reads),
//! `scale.rs` and `rwlock_crowd.rs`
//! (ignored tiers that run alone, `.ci/run`) and `lost_replies.rs` (its own tier, run with its
//! figures shown). A new file here is a `mod` line below; the helpers every test binary shares
//! are the kit's (`distlock_testkit::common`), `use crate::common;` in a module here.

use distlock_testkit::common;

mod acl;
mod bad_input;
mod cluster;
mod connections;
mod edges;
mod faults;
mod fenced;
mod fenced_postgres;
mod grant_time;
mod handoff;
mod inspect_nodes;
mod keys;
mod leader_loop;
mod liveness;
mod macros;
mod many;
mod model;
mod native;
mod redlock;
mod reentrant;
mod rwlock;
mod scripts;
mod semaphore;
mod semaphore_fencing;
mod servers;
mod setnx;
mod shutdown;
mod silence;
mod structure;
mod tls;
mod vocabulary;
mod wakeup;
mod watchdog;
mod wire;
mod write_many;
