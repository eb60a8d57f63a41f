//! One foreground `redis-server` child process on a loopback port.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redis::IntoConnectionInfo;

use super::binary::ensure_redis_available;
use super::procfs;
use super::servers::RedisServers;
use super::wait::wait_until;

const POLL_INTERVAL: Duration = Duration::from_millis(5);
const PROBE_TIMEOUT: Duration = Duration::from_millis(200);
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const SAME_PORT_REBIND_TIMEOUT: Duration = Duration::from_secs(5);
const SAME_PORT_REBIND_BACKOFF: Duration = Duration::from_millis(20);
const FRESH_PORT_ATTEMPTS: usize = 5;
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
const SIGNAL_STATE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
const LOG_TAIL_LINES: usize = 30;
/// Keeps `port + 10000` (the cluster bus port) a valid port number, so the
/// same picker serves `--cluster-enabled yes` servers.
const MAX_PORT: u16 = u16::MAX - 10_000;

/// Configures and starts a [`RedisServer`]; obtained from [`RedisServer::builder`].
///
/// ```no_run
/// let server = distlock_testkit::RedisServer::builder()
///     .arg("--requirepass")
///     .arg("secret")
///     .start();
/// ```
#[derive(Debug, Clone, Default)]
pub struct RedisServerBuilder {
    config_file: Option<PathBuf>,
    args: Vec<String>,
    tls: Option<TlsFiles>,
}

/// Certificate and key files of a TLS listener (see [`RedisServerBuilder::tls`]).
#[derive(Debug, Clone)]
struct TlsFiles {
    cert: PathBuf,
    key: PathBuf,
}

impl RedisServerBuilder {
    /// Appends one extra `redis-server` command-line argument.
    ///
    /// Extra arguments come after the kit's defaults, so they override them.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several extra `redis-server` command-line arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// A configuration file, passed as the first argument (before the kit's defaults and the
    /// extra arguments, which override it). Sentinels need one: they rewrite it.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.config_file = Some(path.into());
        self
    }

    /// Also listens for TLS on a second free loopback port ([`RedisServer::tls_url`]), with
    /// this PEM certificate chain and private key; clients need no certificate of their own
    /// (`--tls-auth-clients no`). The plain port stays open for the kit's own checks.
    pub fn tls(mut self, cert_pem: impl Into<PathBuf>, key_pem: impl Into<PathBuf>) -> Self {
        self.tls = Some(TlsFiles {
            cert: cert_pem.into(),
            key: key_pem.into(),
        });
        self
    }

    /// Starts the server and waits until it answers PING.
    ///
    /// # Panics
    /// If `redis-server` is missing or does not come up within 10 s; the
    /// message carries the tail of the server log.
    pub fn start(&self) -> RedisServer {
        self.try_start().unwrap_or_else(|msg| panic!("{msg}"))
    }

    /// Like [`start`](Self::start) but returns the failure instead of panicking.
    pub fn try_start(&self) -> Result<RedisServer, String> {
        let mut server = self.spawn(free_ports(1)?[0])?;
        server.wait_ready(PortConflict::PickNewPort)?;
        Ok(server)
    }

    /// Starts `n` independent servers with these arguments.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_many(&self, n: usize) -> RedisServers {
        self.try_start_many(n).unwrap_or_else(|msg| panic!("{msg}"))
    }

    /// Like [`start_many`](Self::start_many) but returns the failure instead of panicking.
    pub fn try_start_many(&self, n: usize) -> Result<RedisServers, String> {
        // All processes are spawned from this thread (PR_SET_PDEATHSIG is
        // tied to the spawning thread) and boot concurrently; only the
        // readiness checks are sequential.
        let mut servers = free_ports(n)?
            .into_iter()
            .map(|port| self.spawn(port))
            .collect::<Result<Vec<_>, _>>()?;
        for server in &mut servers {
            server.wait_ready(PortConflict::PickNewPort)?;
        }
        Ok(RedisServers::from_vec(servers))
    }

    fn spawn(&self, port: u16) -> Result<RedisServer, String> {
        let binary = ensure_redis_available()?;
        let dir = tempfile::Builder::new()
            .prefix("distlock-redis-")
            .tempdir()
            .map_err(|e| format!("creating a temp dir for redis-server: {e}"))?;
        let mut server = RedisServer {
            binary,
            config_file: self.config_file.clone(),
            password: requirepass(&self.args),
            args: self.args.clone(),
            port,
            tls: self.tls.clone(),
            tls_port: None,
            child: None,
            pid: 0,
            paused: false,
            log_mark: LogMark::default(),
            dir,
        };
        server.launch()?;
        Ok(server)
    }
}

/// A real `redis-server` run as a foreground child process of this process.
///
/// The server listens on `127.0.0.1` on a free port, keeps no data on disk
/// (`--save ""`, `--appendonly no`, a private temp dir) and allows `DEBUG`
/// from loopback. Dropping it (also while unwinding from a failed test)
/// kills and reaps the process.
///
/// # Process lifetime caveat
/// The child is spawned with `PR_SET_PDEATHSIG = SIGKILL`, so it dies even if
/// this process is killed with SIGKILL. Linux delivers that signal when the
/// *thread* that spawned the child exits, not the process. Start servers
/// (including [`restart`](Self::restart)) from the test's own thread or the
/// thread that owns the Tokio runtime — never from `spawn_blocking` or a
/// short-lived helper thread, or the server dies when that thread ends.
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    config_file: Option<PathBuf>,
    args: Vec<String>,
    password: Option<String>,
    port: u16,
    tls: Option<TlsFiles>,
    /// The TLS listener's port, when started with [`RedisServerBuilder::tls`].
    tls_port: Option<u16>,
    child: Option<Child>,
    pid: u32,
    paused: bool,
    log_mark: LogMark,
    // Declared last: the directory must outlive the process writing into it.
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server with the default arguments.
    ///
    /// # Panics
    /// See [`RedisServerBuilder::start`].
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// Starts a server with extra command-line arguments, e.g.
    /// `&["--maxmemory", "10mb"]`.
    ///
    /// # Panics
    /// See [`RedisServerBuilder::start`].
    pub fn start_with(args: &[&str]) -> Self {
        Self::builder().args(args.iter().copied()).start()
    }

    /// A builder for servers with extra arguments.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// TCP port the server listens on (stable across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `"127.0.0.1:<port>"`.
    pub fn addr(&self) -> String {
        self.socket_addr().to_string()
    }

    /// `"redis://127.0.0.1:<port>/"` (without credentials, even when
    /// `--requirepass` was given; see [`connection_info`](Self::connection_info)).
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr())
    }

    /// `"rediss://127.0.0.1:<tls port>/"` for a server started with
    /// [`RedisServerBuilder::tls`], else `None`.
    pub fn tls_url(&self) -> Option<String> {
        self.tls_port
            .map(|port| format!("rediss://127.0.0.1:{port}/"))
    }

    /// Connection parameters, including the password if the server was
    /// started with `--requirepass`.
    pub fn connection_info(&self) -> redis::ConnectionInfo {
        let info = self
            .url()
            .into_connection_info()
            .expect("a loopback redis:// URL is always valid");
        match &self.password {
            Some(password) => {
                let settings = info.redis_settings().clone().set_password(password);
                info.set_redis_settings(settings)
            }
            None => info,
        }
    }

    /// OS process id of the current (or, after [`kill`](Self::kill), the last) server process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's log file (kept across restarts, removed on drop).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// Whether the server process exists and has not exited (a paused
    /// server counts as running).
    pub fn is_running(&self) -> bool {
        self.child.is_some() && !matches!(procfs::process_state(self.pid), None | Some('Z' | 'X'))
    }

    /// Whether [`pause`](Self::pause) is in effect.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Kills the server with SIGKILL and reaps it. Idempotent.
    pub fn kill(&mut self) {
        self.reap();
    }

    /// Shuts the server down gracefully: SIGTERM, then wait for exit
    /// (SIGKILL after 10 s). No data is persisted. Idempotent.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // A stopped process would only act on SIGTERM once continued.
        self.continue_if_paused();
        let _ = send_signal(self.pid, libc::SIGTERM);
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

    /// Freezes the server with SIGSTOP: connections stay open but nothing is
    /// answered. Returns once the kernel reports the process stopped.
    ///
    /// # Panics
    /// If the server is not running.
    pub fn pause(&mut self) {
        assert!(
            self.is_running(),
            "pause(): redis-server on port {} is not running",
            self.port
        );
        if self.paused {
            return;
        }
        send_signal(self.pid, libc::SIGSTOP)
            .unwrap_or_else(|e| panic!("SIGSTOP to redis-server pid {}: {e}", self.pid));
        self.paused = true;
        let pid = self.pid;
        assert!(
            wait_until(SIGNAL_STATE_TIMEOUT, || procfs::is_stopped(pid)),
            "redis-server pid {pid} did not stop after SIGSTOP"
        );
    }

    /// Bytes sent to this server and not yet read by it, over all its connections: while it
    /// is [`pause`](Self::pause)d, what reached it since (a request written, as an event).
    pub fn unread_bytes(&self) -> u64 {
        procfs::unread_bytes_at(self.port)
    }

    /// Undoes [`pause`](Self::pause) with SIGCONT. No-op if not paused.
    pub fn resume(&mut self) {
        if !self.paused {
            return;
        }
        self.continue_if_paused();
        let pid = self.pid;
        assert!(
            wait_until(SIGNAL_STATE_TIMEOUT, || !procfs::is_stopped(pid)),
            "redis-server pid {pid} did not continue after SIGCONT"
        );
    }

    /// Starts a fresh, empty server on the same port with the same
    /// arguments after [`kill`](Self::kill)/[`stop`](Self::stop) (or after
    /// the server exited by itself), and waits until it answers PING.
    ///
    /// # Panics
    /// If the server is still running, or the port could not be bound again
    /// within ~5 s, or the new server does not come up.
    pub fn restart(&mut self) {
        self.try_restart().unwrap_or_else(|msg| panic!("{msg}"));
    }

    /// Like [`restart`](Self::restart) but returns the failure instead of panicking.
    pub fn try_restart(&mut self) -> Result<(), String> {
        if let Some(child) = self.child.as_mut() {
            match child.try_wait() {
                // It exited on its own (SHUTDOWN, DEBUG SEGFAULT, ...).
                Ok(Some(_)) => self.child = None,
                _ => {
                    return Err(format!(
                        "restart(): redis-server on port {} is still running; call kill() or stop() first",
                        self.port
                    ))
                }
            }
        }
        self.paused = false;
        self.launch()?;
        self.wait_ready(PortConflict::RetrySamePort)
    }

    /// Sends a raw RESP `PING` and waits up to `timeout` (for connect, write
    /// and read each) for `+PONG`, or `-NOAUTH` from a password-protected server.
    pub fn ping(&self, timeout: Duration) -> io::Result<()> {
        raw_ping(self.socket_addr(), timeout)
    }

    /// A new synchronous connection (authenticated if `--requirepass` was
    /// given), with 5 s connect, read and write timeouts.
    ///
    /// # Panics
    /// If the connection cannot be established.
    pub fn connection(&self) -> redis::Connection {
        self.try_connection()
            .unwrap_or_else(|e| panic!("connecting to redis-server at {}: {e}", self.addr()))
    }

    /// Like [`connection`](Self::connection) but returns the failure instead of panicking.
    pub fn try_connection(&self) -> redis::RedisResult<redis::Connection> {
        let client = redis::Client::open(self.connection_info())?;
        let conn = client.get_connection_with_timeout(CONNECTION_TIMEOUT)?;
        conn.set_read_timeout(Some(CONNECTION_TIMEOUT))?;
        conn.set_write_timeout(Some(CONNECTION_TIMEOUT))?;
        Ok(conn)
    }

    /// A new multiplexed async connection (authenticated if `--requirepass`
    /// was given) with 5 s connect and response timeouts. Needs a Tokio runtime.
    ///
    /// # Panics
    /// If the connection cannot be established.
    pub async fn async_connection(&self) -> redis::aio::MultiplexedConnection {
        let result = async {
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(CONNECTION_TIMEOUT))
                .set_response_timeout(Some(CONNECTION_TIMEOUT));
            redis::Client::open(self.connection_info())?
                .get_multiplexed_async_connection_with_config(&config)
                .await
        }
        .await;
        result
            .unwrap_or_else(|e| panic!("async connection to redis-server at {}: {e}", self.addr()))
    }

    /// Raw `INFO <section>` output.
    ///
    /// # Panics
    /// If the server cannot be queried.
    pub fn info(&self, section: &str) -> String {
        redis::cmd("INFO")
            .arg(section)
            .query(&mut self.connection())
            .unwrap_or_else(|e| panic!("INFO {section} on {}: {e}", self.addr()))
    }

    /// Calls per command from `INFO commandstats`, e.g. `{"set": 12}`.
    /// Subcommands keep Redis' naming (`"client|setinfo"`).
    pub fn commandstats(&self) -> BTreeMap<String, u64> {
        parse_commandstats(&self.info("commandstats"))
    }

    /// The server's `run_id`, which changes on every (re)start.
    pub fn run_id(&self) -> String {
        let info = self.info("server");
        info_field(&info, "run_id")
            .unwrap_or_else(|| panic!("no run_id in INFO server of {}", self.addr()))
            .to_owned()
    }

    fn socket_addr(&self) -> SocketAddr {
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port).into()
    }

    fn stdio_path(&self) -> PathBuf {
        self.dir.path().join("redis.stdio")
    }

    fn launch(&mut self) -> Result<(), String> {
        debug_assert!(self.child.is_none(), "launch() over a live child");
        let stdio_path = self.stdio_path();
        let stdout = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&stdio_path)
            .map_err(|e| format!("opening {}: {e}", stdio_path.display()))?;
        let stderr = stdout
            .try_clone()
            .map_err(|e| format!("duplicating {}: {e}", stdio_path.display()))?;
        self.log_mark = LogMark::at_end_of(&self.log_path(), &stdio_path);
        if self.tls.is_some() && self.tls_port.is_none() {
            self.tls_port = Some(free_ports_except(1, self.port)?[0]);
        }

        let mut command = Command::new(&self.binary);
        if let Some(config) = &self.config_file {
            command.arg(config);
        }
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(self.log_path())
            .args(["--enable-debug-command", "local", "--protected-mode", "no"])
            .args(self.tls_args())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        die_with_spawning_thread(&mut command);
        let child = command
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", self.binary.display()))?;
        self.pid = child.id();
        self.child = Some(child);
        Ok(())
    }

    fn wait_ready(&mut self, on_conflict: PortConflict) -> Result<(), String> {
        let first_launch = Instant::now();
        let mut ports_tried = 1;
        loop {
            match self.await_current_launch() {
                Launch::Ready => return Ok(()),
                Launch::Failed(msg) => return Err(msg),
                Launch::AddrInUse => match on_conflict {
                    PortConflict::PickNewPort if ports_tried < FRESH_PORT_ATTEMPTS => {
                        ports_tried += 1;
                        self.port = free_ports(1)?[0];
                        // Either listener may have lost its port: pick both again.
                        self.tls_port = None;
                    }
                    // Backoff, not synchronisation: there is no event for
                    // "another process released the port".
                    PortConflict::RetrySamePort
                        if first_launch.elapsed() < SAME_PORT_REBIND_TIMEOUT =>
                    {
                        thread::sleep(SAME_PORT_REBIND_BACKOFF);
                    }
                    _ => {
                        return Err(format!(
                        "redis-server could not bind 127.0.0.1:{} (address in use), giving up\n{}",
                        self.port,
                        self.log_tail()
                    ))
                    }
                },
            }
            self.launch()?;
        }
    }

    fn await_current_launch(&mut self) -> Launch {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let Some(child) = self.child.as_mut() else {
                return Launch::Failed("internal error: no redis-server child to wait for".into());
            };
            match child.try_wait() {
                Ok(None) => {}
                Ok(Some(status)) => {
                    self.child = None;
                    let output = self.output_since_launch();
                    if output.contains("Address already in use") {
                        return Launch::AddrInUse;
                    }
                    return Launch::Failed(format!(
                        "redis-server for port {} exited ({status}) before answering PING\n{}",
                        self.port,
                        tail(&output)
                    ));
                }
                Err(e) => {
                    return Launch::Failed(format!(
                        "waiting for redis-server pid {}: {e}",
                        self.pid
                    ))
                }
            }
            if self.ping(PROBE_TIMEOUT).is_ok()
                && procfs::owns_loopback_listener(self.pid, self.port)
                && self
                    .tls_port
                    .is_none_or(|port| procfs::owns_loopback_listener(self.pid, port))
            {
                return Launch::Ready;
            }
            if Instant::now() >= deadline {
                return Launch::Failed(format!(
                    "redis-server pid {} did not answer PING on {} within {READY_TIMEOUT:?}\n{}",
                    self.pid,
                    self.addr(),
                    self.log_tail()
                ));
            }
            thread::sleep(POLL_INTERVAL);
        }
    }

    fn tls_args(&self) -> Vec<String> {
        match (&self.tls, self.tls_port) {
            (Some(files), Some(port)) => vec![
                "--tls-port".into(),
                port.to_string(),
                "--tls-cert-file".into(),
                files.cert.display().to_string(),
                "--tls-key-file".into(),
                files.key.display().to_string(),
                "--tls-auth-clients".into(),
                "no".into(),
            ],
            _ => Vec::new(),
        }
    }

    fn continue_if_paused(&mut self) {
        if self.paused {
            let _ = send_signal(self.pid, libc::SIGCONT);
            self.paused = false;
        }
    }

    /// SIGKILL + wait; never panics because it also runs from `Drop`.
    fn reap(&mut self) {
        if let Some(mut child) = self.child.take() {
            self.continue_if_paused();
            let _ = child.kill();
            let _ = child.wait();
        }
        self.paused = false;
    }

    fn output_since_launch(&self) -> String {
        let log = read_from(&self.log_path(), self.log_mark.log);
        let stdio = read_from(&self.stdio_path(), self.log_mark.stdio);
        format!("{stdio}{log}")
    }

    fn log_tail(&self) -> String {
        tail(&self.output_since_launch())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.reap();
    }
}

#[derive(Debug, Clone, Copy)]
enum PortConflict {
    PickNewPort,
    RetrySamePort,
}

enum Launch {
    Ready,
    AddrInUse,
    Failed(String),
}

/// Where the current launch's output starts in the (append-only) log files.
#[derive(Debug, Default, Clone, Copy)]
struct LogMark {
    log: u64,
    stdio: u64,
}

impl LogMark {
    fn at_end_of(log: &Path, stdio: &Path) -> Self {
        let len = |p: &Path| fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        Self {
            log: len(log),
            stdio: len(stdio),
        }
    }
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

fn tail(output: &str) -> String {
    let lines: Vec<&str> = output.lines().collect();
    let shown = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
    if shown.is_empty() {
        "--- server log is empty ---".to_owned()
    } else {
        format!("--- server log tail ---\n{}", shown.join("\n"))
    }
}

/// `n` distinct free loopback ports. The listeners are held until all are
/// picked so one batch never gets the same port twice.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    free_ports_except(n, 0)
}

/// Like [`free_ports`], never returning `taken` (a port this server already uses).
fn free_ports_except(n: usize, taken: u16) -> Result<Vec<u16>, String> {
    let mut held = Vec::with_capacity(n);
    let mut ports = Vec::with_capacity(n);
    let mut attempts = 0;
    while ports.len() < n {
        attempts += 1;
        if attempts > 100 + 10 * n {
            return Err(format!(
                "could not find {n} free loopback ports below {MAX_PORT}"
            ));
        }
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| format!("binding 127.0.0.1:0 to find a free port: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("reading the bound port: {e}"))?
            .port();
        if port <= MAX_PORT && port != taken {
            ports.push(port);
        }
        held.push(listener);
    }
    Ok(ports)
}

fn raw_ping(addr: SocketAddr, timeout: Duration) -> io::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut reply = Vec::with_capacity(64);
    let mut buf = [0u8; 64];
    while !reply.windows(2).any(|w| w == b"\r\n") && reply.len() < 1024 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        reply.extend_from_slice(&buf[..n]);
    }
    if reply.starts_with(b"+PONG") || reply.starts_with(b"-NOAUTH") {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "unexpected reply to PING: {:?}",
            String::from_utf8_lossy(&reply)
        )))
    }
}

/// Makes the child get SIGKILL when the spawning thread exits, so servers
/// never outlive a test process that was itself SIGKILLed.
pub(crate) fn die_with_spawning_thread(command: &mut Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and only calls the
    // async-signal-safe prctl, getppid and raise; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect, in which
            // case no death signal will ever come.
            if libc::getppid() as u32 != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// Only ever called with the pid of an unreaped child of ours, so the pid
/// cannot have been recycled for somebody else's process.
pub(crate) fn send_signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn requirepass(args: &[String]) -> Option<String> {
    // Redis applies options in order, so the last occurrence wins.
    args.windows(2)
        .rev()
        .find(|pair| pair[0].eq_ignore_ascii_case("--requirepass"))
        .map(|pair| pair[1].clone())
        .filter(|password| !password.is_empty())
}

fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == field).then(|| value.trim())
    })
}

fn parse_commandstats(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (command, stats) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((command.to_owned(), calls))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commandstats() {
        let info = "# Commandstats\r\n\
            cmdstat_set:calls=12,usec=40,usec_per_call=3.33,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setinfo:calls=2,usec=1,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\n";
        let stats = parse_commandstats(info);
        assert_eq!(stats.get("set"), Some(&12));
        assert_eq!(stats.get("client|setinfo"), Some(&2));
        assert_eq!(stats.len(), 2);
    }

    #[test]
    fn finds_requirepass() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            requirepass(&args(&["--requirepass", "x"])).as_deref(),
            Some("x")
        );
        assert_eq!(
            requirepass(&args(&["--requirepass", "a", "--requirepass", "b"])).as_deref(),
            Some("b")
        );
        assert_eq!(requirepass(&args(&["--maxmemory", "1mb"])), None);
    }

    #[test]
    fn free_ports_are_distinct_and_bus_safe() {
        let ports = free_ports(20).expect("free ports");
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), 20);
        assert!(ports.iter().all(|&p| p <= MAX_PORT));
    }
}
