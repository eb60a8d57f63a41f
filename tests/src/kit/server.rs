//! One `redis-server` child process on a loopback port: the published
//! `distlock::testing::TestServer` (which starts, pauses, restarts and kills it), with what
//! only this project's tests use on top: TLS, raw probes, `INFO` readings, panicking
//! shorthands.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use distlock::testing::{TestServer, TestServerBuilder};
use redis::IntoConnectionInfo;

use super::binary::ensure_redis_available;
use super::procfs;
use super::wait::wait_until;

const SIGNAL_STATE_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a TLS listener may take to be up once the plain port answers.
const TLS_READY_TIMEOUT: Duration = Duration::from_secs(10);
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

    /// Starts the server and waits until it answers.
    ///
    /// # Panics
    /// If `redis-server` is missing or does not come up within 10 s; the
    /// message carries the tail of the server log.
    pub fn start(&self) -> RedisServer {
        self.try_start().unwrap_or_else(|msg| panic!("{msg}"))
    }

    /// Like [`start`](Self::start) but returns the failure instead of panicking.
    pub fn try_start(&self) -> Result<RedisServer, String> {
        let binary = ensure_redis_available()?;
        let tls_port = match &self.tls {
            Some(_) => Some(free_ports(1)?[0]),
            None => None,
        };
        let mut builder = TestServer::builder()
            .binary(binary)
            // `DEBUG` from loopback, for the tests that make the server sleep.
            .arg("--enable-debug-command")
            .arg("local");
        if let Some(config) = &self.config_file {
            builder = builder.config_file(config);
        }
        if let (Some(files), Some(port)) = (&self.tls, tls_port) {
            builder = tls_args(builder, files, port);
        }
        for arg in &self.args {
            builder = builder.arg(arg.clone());
        }
        let inner = builder.start_blocking().map_err(|e| e.to_string())?;
        let server = RedisServer {
            inner,
            password: requirepass(&self.args),
            tls_port,
        };
        server.wait_tls()?;
        Ok(server)
    }
}

fn tls_args(builder: TestServerBuilder, files: &TlsFiles, port: u16) -> TestServerBuilder {
    builder
        .arg("--tls-port")
        .arg(port.to_string())
        .arg("--tls-cert-file")
        .arg(files.cert.display().to_string())
        .arg("--tls-key-file")
        .arg(files.key.display().to_string())
        .arg("--tls-auth-clients")
        .arg("no")
}

/// A real `redis-server` run as a child process of this process: a
/// [`distlock::testing::TestServer`] (on `127.0.0.1`, a free port, nothing on
/// disk, killed and reaped on drop, also while unwinding from a failed test),
/// which also allows `DEBUG` from loopback here.
#[derive(Debug)]
pub struct RedisServer {
    inner: TestServer,
    password: Option<String>,
    /// The TLS listener's port, when started with [`RedisServerBuilder::tls`].
    tls_port: Option<u16>,
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

    /// The kit's handle on a server `distlock::testing` started (a cluster's node).
    pub(crate) fn from_test_server(inner: TestServer) -> Self {
        RedisServer {
            inner,
            password: None,
            tls_port: None,
        }
    }

    /// TCP port the server listens on (stable across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.inner.port()
    }

    /// `"127.0.0.1:<port>"`.
    pub fn addr(&self) -> String {
        self.inner.addr()
    }

    /// `"redis://127.0.0.1:<port>/"` (without credentials, even when
    /// `--requirepass` was given; see [`connection_info`](Self::connection_info)).
    pub fn url(&self) -> String {
        self.inner.url()
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
        self.inner.pid()
    }

    /// The server's log file (kept across restarts, removed on drop).
    pub fn log_path(&self) -> PathBuf {
        self.inner.log_path()
    }

    /// Whether the server process exists and has not exited (a paused
    /// server counts as running).
    pub fn is_running(&self) -> bool {
        self.inner.is_running()
    }

    /// Whether [`pause`](Self::pause) is in effect.
    pub fn is_paused(&self) -> bool {
        self.inner.is_paused()
    }

    /// Kills the server with SIGKILL and reaps it. Idempotent.
    pub fn kill(&mut self) {
        self.inner.kill();
    }

    /// Shuts the server down gracefully: SIGTERM, then wait for exit
    /// (SIGKILL after 10 s). No data is persisted. Idempotent.
    pub fn stop(&mut self) {
        self.inner.stop();
    }

    /// Freezes the server with SIGSTOP: connections stay open but nothing is
    /// answered. Returns once the kernel reports the process stopped.
    ///
    /// # Panics
    /// If the server is not running.
    pub fn pause(&mut self) {
        self.inner
            .pause()
            .unwrap_or_else(|e| panic!("pause(): {e}"));
        debug_assert!(procfs::is_stopped(self.pid()) || !self.is_running());
    }

    /// Bytes sent to this server and not yet read by it, over all its connections: while it
    /// is [`pause`](Self::pause)d, what reached it since (a request written, as an event).
    pub fn unread_bytes(&self) -> u64 {
        procfs::unread_bytes_at(self.port())
    }

    /// Undoes [`pause`](Self::pause) with SIGCONT. No-op if not paused.
    ///
    /// # Panics
    /// If the process cannot be continued.
    pub fn resume(&mut self) {
        self.inner
            .resume()
            .unwrap_or_else(|e| panic!("resume(): {e}"));
        let pid = self.pid();
        assert!(
            wait_until(SIGNAL_STATE_TIMEOUT, || !procfs::is_stopped(pid)),
            "redis-server pid {pid} did not continue after SIGCONT"
        );
    }

    /// Starts a fresh process on the same port after [`kill`](Self::kill) or
    /// [`stop`](Self::stop) (data is gone), waiting for the port to be free.
    ///
    /// # Panics
    /// If the server is still running or does not come back.
    pub fn restart(&mut self) {
        self.try_restart().unwrap_or_else(|msg| panic!("{msg}"));
    }

    /// Like [`restart`](Self::restart) but returns the failure instead of panicking.
    pub fn try_restart(&mut self) -> Result<(), String> {
        if self.is_running() {
            return Err(format!(
                "restart(): redis-server on port {} is still running; kill() or stop() it first",
                self.port()
            ));
        }
        self.inner.restart_blocking().map_err(|e| e.to_string())?;
        self.wait_tls()
    }

    /// Sends a raw `PING` over a fresh TCP connection; `Ok` on `+PONG` (or
    /// `-NOAUTH` from a password-protected server, which still proves it is up).
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
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, self.port()).into()
    }

    /// Waits for the TLS listener, when there is one (the plain port answered already).
    fn wait_tls(&self) -> Result<(), String> {
        let (pid, Some(port)) = (self.pid(), self.tls_port) else {
            return Ok(());
        };
        if wait_until(TLS_READY_TIMEOUT, || {
            procfs::owns_loopback_listener(pid, port)
        }) {
            Ok(())
        } else {
            Err(format!(
                "redis-server pid {pid} did not listen for TLS on port {port}"
            ))
        }
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
