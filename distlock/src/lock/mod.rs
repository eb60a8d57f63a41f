//! Taking a lock: the request builder every mode shares (`request`), and the one acquire loop
//! every mode goes through (`attempt`).

mod attempt;
mod pending;
mod request;

pub use request::LockRequest;
pub(crate) use request::Settings;
