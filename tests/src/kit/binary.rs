//! Locating the `redis-server` and `redis-cli` executables.

use std::env;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Environment variable that overrides the `redis-server` lookup on `PATH` (the published
/// `distlock::testing`'s).
pub const REDIS_SERVER_ENV: &str = distlock::testing::SERVER_ENV;
/// Environment variable that overrides the `redis-cli` lookup on `PATH`.
pub const REDIS_CLI_ENV: &str = "DISTLOCK_REDIS_CLI";

const CLI_MISSING: &str = "redis-cli not found: install it (Debian/Ubuntu: apt-get install redis-tools) or set DISTLOCK_REDIS_CLI=/path/to/redis-cli";

/// Finds `redis-server` (or `valkey-server`) without panicking, as
/// `distlock::testing::server_binary` does: `DISTLOCK_REDIS_SERVER` wins over `PATH`; the
/// error is a single line that says how to fix the setup.
pub fn ensure_redis_available() -> Result<PathBuf, String> {
    distlock::testing::server_binary().map_err(|e| e.to_string())
}

/// Finds `redis-cli` without panicking (`DISTLOCK_REDIS_CLI` wins over `PATH`).
pub fn ensure_redis_cli_available() -> Result<PathBuf, String> {
    locate("redis-cli", REDIS_CLI_ENV, CLI_MISSING)
}

/// Path of the `redis-server` executable.
///
/// # Panics
/// With a one-line install hint if it cannot be found.
pub fn redis_server_path() -> PathBuf {
    ensure_redis_available().unwrap_or_else(|msg| panic!("{msg}"))
}

/// Path of the `redis-cli` executable.
///
/// # Panics
/// With a one-line install hint if it cannot be found.
pub fn redis_cli_path() -> PathBuf {
    ensure_redis_cli_available().unwrap_or_else(|msg| panic!("{msg}"))
}

fn locate(program: &str, env_var: &str, missing: &str) -> Result<PathBuf, String> {
    if let Some(explicit) = env::var_os(env_var).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&explicit);
        return if is_executable(&path) {
            Ok(path)
        } else {
            // A set-but-wrong override must not silently fall back to PATH:
            // the user asked for a specific build.
            Err(format!(
                "{env_var}={} is not an executable file; {missing}",
                path.display()
            ))
        };
    }
    search_path(program, env::var_os("PATH")).ok_or_else(|| missing.to_owned())
}

fn search_path(program: &str, path: Option<OsString>) -> Option<PathBuf> {
    env::split_paths(&path?)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_search_skips_missing_dirs() {
        let path = env::join_paths(["/nonexistent-distlock-dir", "/usr/bin", "/bin"])
            .expect("joinable PATH");
        assert!(search_path("sh", Some(path)).is_some());
        assert!(search_path("definitely-not-a-program-xyz", env::var_os("PATH")).is_none());
        assert!(search_path("sh", None).is_none());
    }
}
