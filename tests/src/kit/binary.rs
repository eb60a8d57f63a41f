//! Locating the `redis-server` executable: the published `distlock::testing::server_binary`,
//! with the kit's panicking shorthand.

use std::path::PathBuf;

/// Environment variable that overrides the `redis-server` lookup on `PATH` (the published
/// `distlock::testing`'s).
pub const REDIS_SERVER_ENV: &str = distlock::testing::SERVER_ENV;

/// Finds `redis-server` (or `valkey-server`) without panicking, as
/// `distlock::testing::server_binary` does: `DISTLOCK_REDIS_SERVER` wins over `PATH`; the
/// error is a single line that says how to fix the setup.
pub fn ensure_redis_available() -> Result<PathBuf, String> {
    distlock::testing::server_binary().map_err(|e| e.to_string())
}

/// Path of the `redis-server` executable.
///
/// # Panics
/// With a one-line install hint if it cannot be found.
pub fn redis_server_path() -> PathBuf {
    ensure_redis_available().unwrap_or_else(|msg| panic!("{msg}"))
}
