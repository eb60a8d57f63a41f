//! A private PostgreSQL server for the examples' tests, started the way the kit starts Redis:
//! `initdb` into a temp dir, then the server as a foreground child on a free loopback port.
//!
//! The server runs as a foreground `postgres` child of this process rather than through
//! `pg_ctl start`, which daemonizes it: a daemon would outlive a test process killed with
//! SIGKILL, while a child gets `PR_SET_PDEATHSIG` like every `redis-server` of the kit.
//! `initdb` refuses to run as root; as root, both run as the `postgres` user (created by the
//! Debian package), or the user named by `DISTLOCK_PG_USER`.

use std::env;
use std::ffi::{CString, OsString};
use std::fs::{self, File};
use std::io;
use std::net::{Ipv4Addr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::procfs;
use super::server::free_ports;

/// Environment variable naming the directory that holds `initdb` and `postgres`; wins over
/// `PATH` and `/usr/lib/postgresql/*/bin`.
pub const PG_BINDIR_ENV: &str = "DISTLOCK_PG_BINDIR";
/// Environment variable naming the user PostgreSQL runs as when the tests run as root
/// (default `postgres`).
pub const PG_USER_ENV: &str = "DISTLOCK_PG_USER";

const PG_MISSING: &str = "PostgreSQL server not found (initdb, postgres): install it (Debian/Ubuntu: apt-get install postgresql, macOS: brew install postgresql) or set DISTLOCK_PG_BINDIR=/path/to/postgresql/bin";
const POLL_INTERVAL: Duration = Duration::from_millis(10);
const READY_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const PORT_ATTEMPTS: usize = 5;
const READY_LINE: &str = "database system is ready to accept connections";

/// The directory holding `initdb` and `postgres`, without panicking: `DISTLOCK_PG_BINDIR`,
/// else the directory `initdb` on `PATH` really lives in (symlinks resolved: Debian links
/// only some programs into `PATH`), else the newest `/usr/lib/postgresql/<version>/bin`. The
/// error is one line saying how to fix the setup.
pub fn ensure_postgres_available() -> Result<PathBuf, String> {
    if let Some(dir) = env::var_os(PG_BINDIR_ENV).filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        return if has_server(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "{PG_BINDIR_ENV}={} holds no initdb and postgres; {PG_MISSING}",
                dir.display()
            ))
        };
    }
    let on_path = env::var_os("PATH")
        .map(|path| env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("initdb"))
        .filter(|initdb| is_executable(initdb))
        .filter_map(|initdb| fs::canonicalize(initdb).ok()?.parent().map(Path::to_owned));
    let packaged = debian_bindirs();
    on_path
        .chain(packaged)
        .find(|dir| has_server(dir))
        .ok_or_else(|| PG_MISSING.to_owned())
}

/// `/usr/lib/postgresql/<version>/bin`, newest version first.
fn debian_bindirs() -> Vec<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

fn has_server(dir: &Path) -> bool {
    is_executable(&dir.join("initdb")) && is_executable(&dir.join("postgres"))
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// A private PostgreSQL server: a fresh cluster in a temp dir (user `postgres`, trust
/// authentication, database `postgres`), listening on `127.0.0.1` on a free port and on a
/// unix socket in the temp dir. Durability is off (`fsync`, `synchronous_commit`): it is for
/// tests. Dropping it shuts the server down (SIGKILL after 10 s) and removes the directory.
///
/// ```no_run
/// let pg = distlock_testkit::PostgresServer::start();
/// let conninfo = pg.conninfo(); // "host=127.0.0.1 port=... user=postgres dbname=postgres"
/// ```
///
/// As for [`RedisServer`](crate::RedisServer), start it from the test's own thread (the
/// server dies with the thread that spawned it).
#[derive(Debug)]
pub struct PostgresServer {
    port: u16,
    child: Option<Child>,
    pid: u32,
    /// `name=value` settings given to the server as `-c` (see [`try_start_with`](Self::try_start_with)).
    settings: Vec<String>,
    // Declared last: the directory must outlive the process writing into it.
    dir: tempfile::TempDir,
}

impl PostgresServer {
    /// Runs `initdb` and starts the server; returns once it accepts connections.
    ///
    /// # Panics
    /// If PostgreSQL is missing or does not come up; the message says why (with the tail of
    /// the server log).
    pub fn start() -> Self {
        Self::try_start().unwrap_or_else(|msg| panic!("{msg}"))
    }

    /// Like [`start`](Self::start) but returns the failure instead of panicking.
    pub fn try_start() -> Result<Self, String> {
        Self::try_start_with(&[])
    }

    /// Like [`try_start`](Self::try_start), with server settings of the caller's as
    /// `name=value` (each passed as `-c`), e.g. `shared_preload_libraries=pg_stat_statements`
    /// for a benchmark that counts the statements it runs.
    pub fn try_start_with(settings: &[&str]) -> Result<Self, String> {
        let bindir = ensure_postgres_available()?;
        let owner = server_user()?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-pg-")
            .tempdir()
            .map_err(|e| format!("creating a temp dir for PostgreSQL: {e}"))?;
        if let Some(user) = &owner {
            std::os::unix::fs::chown(dir.path(), Some(user.uid), Some(user.gid))
                .map_err(|e| format!("handing {} to {}: {e}", dir.path().display(), user.name))?;
        }
        let mut server = PostgresServer {
            port: 0,
            child: None,
            pid: 0,
            settings: settings.iter().map(|s| (*s).to_owned()).collect(),
            dir,
        };
        server.initdb(&bindir, owner.as_ref())?;
        for _ in 0..PORT_ATTEMPTS {
            server.port = free_ports(1)?[0];
            match server.launch(&bindir, owner.as_ref())? {
                Launch::Ready => return Ok(server),
                Launch::AddrInUse => continue,
            }
        }
        Err(format!(
            "PostgreSQL found no free port in {PORT_ATTEMPTS} attempts\n{}",
            server.log_tail()
        ))
    }

    /// TCP port on `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// libpq key/value connection string for the superuser `postgres` and database
    /// `postgres` over TCP (no password: trust authentication).
    pub fn conninfo(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The directory holding the unix socket (`.s.PGSQL.<port>`).
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// OS process id of the postmaster.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's log (stderr of `initdb` and `postgres`; removed on drop).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// Whether the postmaster is running.
    pub fn is_running(&self) -> bool {
        self.child.is_some() && !matches!(procfs::process_state(self.pid), None | Some('Z' | 'X'))
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, program: PathBuf, owner: Option<&User>) -> Result<Command, String> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("opening {}: {e}", self.log_path().display()))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("duplicating the log handle: {e}"))?;
        let mut command = Command::new(program);
        command
            .current_dir(self.dir.path())
            .env("LC_ALL", "C")
            .env_remove("PGDATA")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        if let Some(user) = owner {
            command
                .uid(user.uid)
                .gid(user.gid)
                .env("HOME", self.dir.path());
        }
        Ok(command)
    }

    fn initdb(&mut self, bindir: &Path, owner: Option<&User>) -> Result<(), String> {
        let status = self
            .command(bindir.join("initdb"), owner)?
            .arg("-D")
            .arg(self.data_dir())
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"])
            .args(["--no-sync", "--no-instructions"])
            .status()
            .map_err(|e| format!("running {}: {e}", bindir.join("initdb").display()))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!("initdb failed ({status})\n{}", self.log_tail()))
        }
    }

    fn launch(&mut self, bindir: &Path, owner: Option<&User>) -> Result<Launch, String> {
        let mark = fs::metadata(self.log_path()).map(|m| m.len()).unwrap_or(0);
        let mut command = self.command(bindir.join("postgres"), owner)?;
        command
            .arg("-D")
            .arg(self.data_dir())
            .args(["-p", &self.port.to_string(), "-h", "127.0.0.1", "-k"])
            .arg(self.dir.path())
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "logging_collector=off"]);
        for setting in &self.settings {
            command.arg("-c").arg(setting);
        }
        // Never outlives the test process, as the Redis servers do.
        let child = distlock::testing::spawn_process(command)
            .map_err(|e| format!("spawning {}: {e}", bindir.join("postgres").display()))?;
        self.pid = child.id();
        self.child = Some(child);

        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let since_launch = read_from(&self.log_path(), mark);
            let child = self.child.as_mut().expect("just spawned");
            match child.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    self.child = None;
                    if since_launch.contains("Address already in use") {
                        return Ok(Launch::AddrInUse);
                    }
                    return Err(format!(
                        "postgres on port {} exited ({status}) before accepting connections\n{}",
                        self.port,
                        self.log_tail()
                    ));
                }
                Err(e) => return Err(format!("waiting for postgres pid {}: {e}", self.pid)),
            }
            if since_launch.contains(READY_LINE)
                && procfs::owns_loopback_listener(self.pid, self.port)
                && TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok()
            {
                return Ok(Launch::Ready);
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "postgres pid {} did not accept connections on port {} within {READY_TIMEOUT:?}\n{}",
                    self.pid,
                    self.port,
                    self.log_tail()
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn log_tail(&self) -> String {
        let log = read_from(&self.log_path(), 0);
        let lines: Vec<&str> = log.lines().collect();
        let shown = &lines[lines.len().saturating_sub(30)..];
        format!("--- PostgreSQL log tail ---\n{}", shown.join("\n"))
    }

    /// Fast shutdown (SIGINT: backends are ended, nothing waits for clients), SIGKILL if it
    /// takes over 10 s. Never panics: it runs from `Drop`.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = send_signal(self.pid, libc::SIGINT);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match child.try_wait() {
                Ok(None) if Instant::now() < deadline => thread::sleep(POLL_INTERVAL),
                Ok(Some(_)) => return,
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
    }
}

enum Launch {
    Ready,
    AddrInUse,
}

/// The account PostgreSQL runs as.
#[derive(Debug)]
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

/// `None` when not root (the server runs as us); as root, the `postgres` user (or the one in
/// `DISTLOCK_PG_USER`), since `initdb` refuses to run as root.
fn server_user() -> Result<Option<User>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = env::var_os(PG_USER_ENV)
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| OsString::from("postgres"))
        .into_string()
        .map_err(|_| format!("{PG_USER_ENV} is not UTF-8"))?;
    lookup_user(&name)
        .map_err(|e| format!("looking up user {name}: {e}"))?
        .map(Some)
        .ok_or_else(|| {
            format!(
                "running as root, and initdb refuses root: no user `{name}` to run PostgreSQL as (the Debian package postgresql creates `postgres`; or set {PG_USER_ENV})"
            )
        })
}

fn lookup_user(name: &str) -> io::Result<Option<User>> {
    let c_name = CString::new(name).map_err(io::Error::other)?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: an all-zero passwd is a valid value to be overwritten by getpwnam_r.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call and `buf.len()` is the buffer's size.
    let rc = unsafe {
        libc::getpwnam_r(
            c_name.as_ptr(),
            &mut entry,
            buf.as_mut_ptr(),
            buf.len(),
            &mut found,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok((!found.is_null()).then(|| User {
        name: name.to_owned(),
        uid: entry.pw_uid,
        gid: entry.pw_gid,
    }))
}

fn read_from(path: &Path, offset: u64) -> String {
    let Ok(bytes) = fs::read(path) else {
        return String::new();
    };
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// Only ever called with the pid of an unreaped child of ours, so the pid
/// cannot have been recycled for somebody else's process.
fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
