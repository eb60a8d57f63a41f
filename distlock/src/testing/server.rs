//! A throwaway `redis-server` (or `valkey-server`) on a free loopback port.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::binary::server_binary;
use super::process;
use super::ServerError;
use crate::client::{Client, ClientBuilder};
use crate::error::Error;

/// How long a server may take to answer after it was started.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Between two probes of a starting server. There is no event for "listening" short of
/// parsing its log; a probe is one loopback connection.
const PROBE_EVERY: Duration = Duration::from_millis(2);
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);
/// A port lost to another process is given up for a new one this many times.
const PORT_TRIES: usize = 5;
/// A restart waits this long at most for its port to be free again (there is no event for
/// another process letting go of a port), trying every [`REBIND_EVERY`].
const REBIND_TIMEOUT: Duration = Duration::from_secs(5);
const REBIND_EVERY: Duration = Duration::from_millis(20);
/// How long [`TestServer::stop`] waits for the server to exit on `SIGTERM`.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Log lines quoted when a server does not come up.
const LOG_LINES: usize = 5;

static SERVERS: AtomicU64 = AtomicU64::new(0);

/// Configures a [`TestServer`]; from [`TestServer::builder`].
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `start` is called"]
pub struct TestServerBuilder {
    binary: Option<PathBuf>,
    config_file: Option<PathBuf>,
    args: Vec<String>,
}

impl TestServerBuilder {
    /// Runs this executable instead of the one [`server_binary`] finds.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// A configuration file (an application's `redis.conf`, a sentinel's), read first: the
    /// defaults and [`arg`](Self::arg)s override it.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_file = Some(path.into());
        self
    }

    /// One more server argument, after the defaults (which it may override), e.g.
    /// `.arg("--maxmemory-policy").arg("allkeys-lru")`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Starts the server and returns once it answers.
    pub async fn start(self) -> Result<TestServer, ServerError> {
        let mut server = self.spawn()?;
        server.wait_ready(true).await?;
        Ok(server)
    }

    /// [`start`](Self::start) for a test without an async runtime (it blocks the thread
    /// while the server starts).
    pub fn start_blocking(self) -> Result<TestServer, ServerError> {
        let mut server = self.spawn()?;
        server.wait_ready_blocking(true)?;
        Ok(server)
    }

    fn spawn(self) -> Result<TestServer, ServerError> {
        let binary = match self.binary {
            Some(binary) => binary,
            None => server_binary()?,
        };
        let n = SERVERS.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("distlock-test-{}-{n}", std::process::id()));
        fs::create_dir_all(&dir)
            .map_err(|e| ServerError::new(format!("creating {}: {e}", dir.display())))?;
        let mut server = TestServer {
            binary,
            config_file: self.config_file,
            args: self.args,
            port: 0,
            child: None,
            pid: 0,
            paused: false,
            relaunch_at: Instant::now(),
            dir,
        };
        server.port = process::free_port(0).map_err(|e| server.error("finding a port", e))?;
        server.launch()?;
        Ok(server)
    }
}

/// A `redis-server` (or `valkey-server`) of the test's own, on a free port of `127.0.0.1`,
/// keeping nothing on disk; stopped (killed and reaped) when dropped. Each test starts its
/// own, so tests run in parallel, and nothing touches a server the user runs.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::testing::TestServer;
///
/// let mut server = TestServer::start().await?;
/// let locks = server.client().await?;
/// let guard = locks.lock("order:42").acquire().await?;
/// server.pause()?; // answers nothing, the connections stay open
/// server.resume()?;
/// # drop(guard); Ok(()) }
/// ```
#[derive(Debug)]
pub struct TestServer {
    binary: PathBuf,
    config_file: Option<PathBuf>,
    args: Vec<String>,
    port: u16,
    child: Option<Child>,
    pid: u32,
    paused: bool,
    /// When to start again on a port that was still taken (a restart).
    relaunch_at: Instant,
    /// Its working directory and log, removed on drop.
    dir: PathBuf,
}

impl TestServer {
    /// Starts a server with the default settings: the executable [`server_binary`] finds,
    /// no persistence (`--save "" --appendonly no`), bound to `127.0.0.1`.
    pub async fn start() -> Result<TestServer, ServerError> {
        Self::builder().start().await
    }

    /// Other settings: another executable, more arguments.
    pub fn builder() -> TestServerBuilder {
        TestServerBuilder::default()
    }

    /// `redis://127.0.0.1:<port>/`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr())
    }

    /// `127.0.0.1:<port>`.
    #[must_use]
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port; the same across [`restart`](Self::restart).
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server process's id (the last one's, once killed).
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// A lock client on this server ([`Client::connect`] of [`url`](Self::url)).
    pub async fn client(&self) -> Result<Client, Error> {
        Client::connect(&self.url()).await
    }

    /// A builder for a client on this server with settings of the test's own (a shorter
    /// `response_timeout` for a test that silences the server, `restart_delay(ZERO)` for one
    /// that restarts it).
    pub fn client_builder(&self) -> ClientBuilder {
        Client::builder(&self.url())
    }

    /// Whether the process is alive (a paused one is; one that exited is not, reaped or not).
    #[must_use]
    pub fn is_running(&self) -> bool {
        self.child.is_some() && !process::has_exited(self.pid)
    }

    /// The server's log file (its own `--logfile`), kept until the server is dropped.
    #[must_use]
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// Whether [`pause`](Self::pause) is in effect.
    #[must_use]
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Makes the server stop answering without closing anything (`SIGSTOP`): connections
    /// stay open, requests are accepted by the kernel and go unanswered, as with a frozen VM
    /// or a partitioned host. Returns once the process is stopped.
    pub fn pause(&mut self) -> Result<(), ServerError> {
        if self.paused {
            return Ok(());
        }
        if !self.is_running() {
            return Err(ServerError::new(format!(
                "{}: the server is not running",
                self.addr()
            )));
        }
        process::signal(self.pid, libc::SIGSTOP).map_err(|e| self.error("SIGSTOP", e))?;
        process::wait_for(self.pid, libc::WUNTRACED)
            .map_err(|e| self.error("waiting for the stop", e))?;
        self.paused = true;
        Ok(())
    }

    /// Undoes [`pause`](Self::pause) (`SIGCONT`): the server answers what it was sent
    /// meanwhile, and from then on. Returns once the process runs again.
    pub fn resume(&mut self) -> Result<(), ServerError> {
        if !self.paused {
            return Ok(());
        }
        self.paused = false;
        process::signal(self.pid, libc::SIGCONT).map_err(|e| self.error("SIGCONT", e))?;
        process::wait_for(self.pid, libc::WCONTINUED)
            .map_err(|e| self.error("waiting for the continue", e))
    }

    /// Kills the server (`SIGKILL`) and reaps it: connections are reset, the data is gone.
    /// Nothing happens if it is not running.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if self.paused {
                let _ = process::signal(self.pid, libc::SIGCONT);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    /// Shuts the server down as an operator would (`SIGTERM`: it closes its connections
    /// and exits; `SIGKILL` if it has not after 10 s), and reaps it. Nothing is kept.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if self.paused {
            let _ = process::signal(self.pid, libc::SIGCONT);
            self.paused = false;
        }
        if process::signal(self.pid, libc::SIGTERM).is_ok()
            && process::exits_within(self.pid, STOP_TIMEOUT)
        {
            let _ = child.wait();
            return;
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Kills the server and starts a new, empty one on the same port (a restart without
    /// persistence: every lock is gone). Returns once it answers.
    pub async fn restart(&mut self) -> Result<(), ServerError> {
        self.kill();
        self.launch()?;
        self.wait_ready(false).await
    }

    /// Runs `binary` from the next [`restart`](Self::restart) on: another server on the same
    /// port, as an upgrade, a downgrade or a failover to a server of another version looks to
    /// a client.
    pub fn set_binary(&mut self, binary: impl Into<PathBuf>) {
        self.binary = binary.into();
    }

    /// [`restart`](Self::restart) without an async runtime.
    pub fn restart_blocking(&mut self) -> Result<(), ServerError> {
        self.kill();
        self.launch()?;
        self.wait_ready_blocking(false)
    }

    fn launch(&mut self) -> Result<(), ServerError> {
        let log = self.log_path();
        // What the server prints before its log is open (a bad argument) goes here.
        let stdio = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("server.stdio"))
            .and_then(|out| Ok((out.try_clone()?, out)))
            .map_err(|e| self.error("opening the server's output file", e))?;
        let mut command = Command::new(&self.binary);
        if let Some(config) = &self.config_file {
            command.arg(config);
        }
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(stdio.0)
            .stderr(stdio.1);
        let child = process::spawn_process(command)
            .map_err(|e| self.error(&format!("running {}", self.binary.display()), e))?;
        self.pid = child.id();
        self.child = Some(child);
        Ok(())
    }

    /// One look at a starting server (`answered`: a probe found it up): `Some` once it is up
    /// or cannot come up.
    fn check(
        &mut self,
        started: Instant,
        new_port: bool,
        answered: bool,
    ) -> Option<Result<(), ServerError>> {
        if self.child.is_none() {
            // Waiting for the port to be free again (see `rebind`).
            if Instant::now() < self.relaunch_at {
                return None;
            }
            return self.launch().err().map(Err);
        }
        let exited = match self.child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => None,
            Some(Ok(Some(status))) => Some(status.to_string()),
            Some(Err(e)) => Some(e.to_string()),
            None => None,
        };
        if let Some(status) = exited {
            self.child = None;
            let log = self.log_tail();
            if log.contains("Address already in use") {
                return self.rebind(started, new_port);
            }
            return Some(Err(ServerError::new(format!(
                "{} on port {} exited ({status}) before answering: {log}",
                self.binary.display(),
                self.port
            ))));
        }
        if answered {
            return Some(Ok(()));
        }
        if started.elapsed() > READY_TIMEOUT {
            self.kill();
            return Some(Err(ServerError::new(format!(
                "{} on port {} did not answer within {READY_TIMEOUT:?}: {}",
                self.binary.display(),
                self.port,
                self.log_tail()
            ))));
        }
        None
    }

    /// The port was taken: a new one (first start), or the same again (restart) until the
    /// other process lets go of it.
    fn rebind(&mut self, started: Instant, new_port: bool) -> Option<Result<(), ServerError>> {
        if new_port {
            self.port = match process::free_port(self.port) {
                Ok(port) => port,
                Err(e) => return Some(Err(self.error("finding a port", e))),
            };
            return self.launch().err().map(Err);
        }
        if started.elapsed() > REBIND_TIMEOUT {
            return Some(Err(ServerError::new(format!(
                "port {} stayed in use for {REBIND_TIMEOUT:?} after the restart",
                self.port
            ))));
        }
        self.relaunch_at = Instant::now() + REBIND_EVERY;
        None
    }

    async fn wait_ready(&mut self, new_port: bool) -> Result<(), ServerError> {
        let started = Instant::now();
        let mut tries = 0;
        loop {
            let port = self.port;
            let answered = self.child.is_some()
                && process::probe_async(self.port, self.pid, PROBE_TIMEOUT).await;
            if let Some(done) = self.check(started, new_port && tries < PORT_TRIES, answered) {
                return done;
            }
            tries += usize::from(port != self.port);
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }

    fn wait_ready_blocking(&mut self, new_port: bool) -> Result<(), ServerError> {
        let started = Instant::now();
        let mut tries = 0;
        loop {
            let port = self.port;
            let answered =
                self.child.is_some() && process::probe(self.port, self.pid, PROBE_TIMEOUT);
            if let Some(done) = self.check(started, new_port && tries < PORT_TRIES, answered) {
                return done;
            }
            tries += usize::from(port != self.port);
            std::thread::sleep(PROBE_EVERY);
        }
    }

    /// The last lines the server printed and logged (its output and log files grow across
    /// restarts: the last lines are the last start's).
    fn log_tail(&self) -> String {
        let printed = fs::read_to_string(self.dir.join("server.stdio")).unwrap_or_default();
        let log = fs::read_to_string(self.log_path()).unwrap_or_default();
        let both = format!("{printed}{log}");
        let lines: Vec<&str> = both.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(LOG_LINES)..].join(" | ");
        if tail.is_empty() {
            "(its log is empty)".to_owned()
        } else {
            tail
        }
    }

    fn error(&self, what: &str, e: std::io::Error) -> ServerError {
        ServerError::new(format!("{what} (server on port {}): {e}", self.port))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}
