//! Switches for distlock's own tests: **not an API**, no stability promise, hidden from the
//! docs. Compiled only with the `_test_hooks` feature, which only the project's test kit
//! (`tests/`, its dev-dependencies) turns on: a build without it has none of them, and none
//! of the checks they add to the runtime's paths.

/// For the wake-up tests (`tests/tests/rwlock_wakeups.rs`): with `on`, every waiter of this
/// process sleeps until a release wakes it or its whole wait is spent, never only until its
/// cap (the holder's lease, a writer's next renewal of its intent), so a wake-up that never
/// comes shows as [`Error::Timeout`](crate::Error::Timeout) instead of a pause.
/// Process-wide: meant for a test binary of its own.
pub fn wake_ups_only(on: bool) {
    crate::wait::WAKE_UPS_ONLY.store(on, std::sync::atomic::Ordering::Relaxed);
}
