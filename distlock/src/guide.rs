//! Guides: running distlock in a service, choosing a deployment, how it works and how it is
//! checked. The same texts are in the repository's `docs/` directory.
//!
//! * [`vocabulary`]: the primitives side by side (what each gives, its guard, how it waits,
//!   its single attempt, what dropping it does, its token), and the decisions behind the
//!   names.
//! * [`operations`]: configuring a client, traces, metrics, inspection, the `distlock`
//!   command, a least-privilege Redis user, the Redis keys and their lifetimes, scheduled jobs,
//!   shutting down.
//! * [`deployments`]: one node, Sentinel, Cluster and Redlock; replication, replica
//!   acknowledgement, fencing across failovers; the failure model and what each fault costs.
//! * [`design`]: what a lock promises and the protocol behind it; how each mode, the wake-ups,
//!   the local hand-off, the connections and the watchdog work; leader election; where a
//!   cycle's cost goes.
//! * [`verification`]: each property and where it is checked, the test suite, the protocol
//!   models, fuzzing, the examples.
//! * `testing` (feature `testing`): testing an application's locked code: a throwaway server
//!   per test, faults on demand (a lease lost mid-body, a silent or restarted server, lost
//!   replies), assertions about who holds a lock, an axum handler's tests worked through.
//! * [`fencing`]: refusing a stalled holder's late writes: the rule, the stores distlock
//!   fences (Redis, PostgreSQL), semaphore permits (a mark per permit slot), fencing any other
//!   store, a mark's lifetime.

// The guides link to each other with Markdown reference links whose targets are the `.md`
// files (right where the files are read); these definitions come first, so they win on
// docs.rs, where the guides are modules.
macro_rules! guide_links {
    () => {
        "[operations]: crate::guide::operations\n\
         [vocabulary]: crate::guide::vocabulary\n\
         [deployments]: crate::guide::deployments\n\
         [design]: crate::guide::design\n\
         [verification]: crate::guide::verification\n\
         [fencing]: crate::guide::fencing\n\
         [keys]: crate::guide::operations#keys\n\
         [least-privilege]: crate::guide::operations#least-privilege\n\
         [failure-model]: crate::guide::deployments#the-failure-model\n\
         [redlock]: crate::guide::deployments#redlock-quorum\n\
         [fencing-failover]: crate::guide::deployments#fencing-across-a-failover\n\
         [permits]: crate::guide::design#fenced-permits-one-mark-per-permit-slot\n"
    };
}

#[doc = guide_links!()]
#[doc = include_str!("../docs/vocabulary.md")]
pub mod vocabulary {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/operations.md")]
pub mod operations {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/deployments.md")]
pub mod deployments {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/design.md")]
pub mod design {}

#[doc = guide_links!()]
#[doc = include_str!("../docs/verification.md")]
pub mod verification {}

#[cfg(all(feature = "testing", unix))]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
#[doc = guide_links!()]
#[doc = include_str!("../docs/testing.md")]
pub mod testing {}
#[doc = guide_links!()]
#[doc = include_str!("../docs/fencing.md")]
pub mod fencing {}
