//! The one way this crate takes a `std::sync::Mutex`.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, carrying on past a poisoned lock: every mutex here guards plain tables and
/// timestamps that a panicking holder cannot leave half-written in a way that matters more
/// than the client going on (and a panic inside a lock's critical section is a bug anyway).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
