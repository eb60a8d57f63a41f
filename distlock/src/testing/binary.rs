//! Finding the server executable: `DISTLOCK_REDIS_SERVER`, else `redis-server` or
//! `valkey-server` on `PATH`.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::ServerError;

/// The environment variable naming the server executable to run (a `redis-server` or a
/// `valkey-server`); when set, `PATH` is not searched.
pub const SERVER_ENV: &str = "DISTLOCK_REDIS_SERVER";

/// The executables looked for on `PATH`, in this order.
const PROGRAMS: [&str; 2] = ["redis-server", "valkey-server"];

const MISSING: &str = "no redis-server or valkey-server on PATH: install one (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or set DISTLOCK_REDIS_SERVER=/path/to/redis-server";

/// The server executable the throwaway servers run: the file `DISTLOCK_REDIS_SERVER` names,
/// else the first `redis-server` or `valkey-server` on `PATH`. The error is one line saying
/// what to install or which variable to set.
///
/// ```no_run
/// match distlock::testing::server_binary() {
///     Ok(path) => println!("tests will run {}", path.display()),
///     Err(e) => eprintln!("{e}"),
/// }
/// ```
pub fn server_binary() -> Result<PathBuf, ServerError> {
    locate(std::env::var_os(SERVER_ENV), std::env::var_os("PATH"))
}

/// [`server_binary`] with the variable's value and `PATH` given (testable without touching
/// the process environment).
pub(super) fn locate(
    explicit: Option<OsString>,
    path: Option<OsString>,
) -> Result<PathBuf, ServerError> {
    if let Some(explicit) = explicit.filter(|v| !v.is_empty()) {
        let file = PathBuf::from(&explicit);
        // A variable set to a wrong path must not fall back to PATH: the user asked for a
        // particular build.
        return if is_executable(&file) {
            Ok(file)
        } else {
            Err(ServerError::new(format!(
                "{SERVER_ENV}={} is not an executable file: point it at a redis-server or valkey-server",
                file.display()
            )))
        };
    }
    PROGRAMS
        .iter()
        .find_map(|program| search(program, path.as_deref()))
        .ok_or_else(|| ServerError::new(MISSING))
}

fn search(program: &str, path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(path?)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_is_one_line_saying_what_to_do() {
        let e = locate(None, Some("/nonexistent-distlock-dir".into())).unwrap_err();
        let text = e.to_string();
        assert!(!text.contains('\n'), "{text}");
        assert!(text.contains("apt-get install redis-server"), "{text}");
        assert!(text.contains(SERVER_ENV), "{text}");
        assert!(locate(None, None).is_err());
    }

    #[test]
    fn the_variable_wins_and_a_wrong_one_is_reported() {
        let e = locate(
            Some("/nonexistent/redis-server".into()),
            std::env::var_os("PATH"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("DISTLOCK_REDIS_SERVER=/nonexistent/redis-server"),
            "{e}"
        );
        assert!(!e.contains('\n'));
        assert_eq!(
            locate(Some("/bin/sh".into()), None).unwrap(),
            PathBuf::from("/bin/sh")
        );
    }

    #[test]
    fn path_is_searched_in_order_skipping_missing_dirs() {
        let dir = std::env::temp_dir().join(format!("distlock-binary-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let valkey = dir.join("valkey-server");
        std::fs::write(&valkey, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&valkey, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([Path::new("/nonexistent-distlock-dir"), &dir]).unwrap();
        assert_eq!(locate(None, Some(path)).unwrap(), valkey);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
