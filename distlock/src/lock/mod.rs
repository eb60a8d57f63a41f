//! Taking a lock: the request builder every mode shares (`request`), and the one acquire loop
//! every mode goes through (`attempt`).

mod attempt;
mod pending;
mod request;

/// What a request is made of, for the primitives built on one (an election keeps it).
pub(crate) use crate::config::Settings;
pub use request::LockRequest;
