//! A fault-injecting TCP proxy between Redis clients and one server.

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

use super::server::RedisServer;

/// Bytes read per `read` call; one read is one chunk, the unit of every fault.
const CHUNK_SIZE: usize = 16 * 1024;
/// Chunks read but not yet written, per direction. Bounded so that a peer
/// that stops reading slows the other peer down, as it would without us.
const IN_FLIGHT_CHUNKS: usize = 64;
/// Default RNG seed: fixed, so a run without [`FaultProxy::seed`] is as
/// replayable as one with it.
const DEFAULT_SEED: u64 = 0x5EED_D157_10C4_F00D;
/// Upper bound for [`FaultProxy::reset_all`] waiting on the proxy thread.
const RESET_ALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause after a failed `accept` (e.g. out of file descriptors), which would
/// otherwise fail again at once and spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

/// A TCP proxy on `127.0.0.1` in front of one Redis server that injects real
/// network faults: lost replies with connection resets, a black hole,
/// latency with jitter, refused connections and resets on demand.
///
/// Put one proxy in front of each node and point the client under test at
/// [`url`](Self::url):
///
/// ```no_run
/// use distlock_testkit::{FaultProxy, RedisServer};
///
/// let server = RedisServer::start();
/// let proxy = FaultProxy::start_for(&server);
/// let mut conn = redis::Client::open(proxy.url())?.get_connection()?;
/// // The SET reaches the server, but its reply is lost and the client sees a reset.
/// proxy.drop_next_reply();
/// assert!(redis::cmd("SET").arg("k").arg("v").exec(&mut conn).is_err());
/// # Ok::<(), redis::RedisError>(())
/// ```
///
/// Every accepted client connection gets its own upstream connection, and
/// bytes are forwarded chunk by chunk (a chunk is what one `read` returned,
/// up to 16 KiB, possibly several pipelined replies), in order. Faults can be
/// changed at any time from any thread and act on existing and new
/// connections alike: latency on chunks read from then on, drops and the
/// black hole on every chunk not yet forwarded.
///
/// The proxy runs on its own thread with its own single-threaded Tokio
/// runtime, so it keeps forwarding while the test's runtime is blocked, and
/// works from synchronous tests. The handle is `Send + Sync`; share it through
/// an `Arc`. Dropping it stops the thread and closes every connection.
///
/// # Randomness
/// Reply drops ([`drop_replies`](Self::drop_replies)) and jitter
/// ([`latency`](Self::latency)) draw from one SplitMix64 generator, seeded
/// with a fixed constant unless [`seed`](Self::seed) is called. The draws
/// replay exactly when they happen in the same order, e.g. with one client
/// issuing commands sequentially; concurrent connections interleave their
/// draws as the scheduler decides.
pub struct FaultProxy {
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// Dropped to stop the accept loop.
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (`"127.0.0.1:PORT"`, e.g.
    /// [`RedisServer::addr`]) on a free loopback port. The upstream address is
    /// resolved once, here; nothing connects to it until a client connects.
    ///
    /// # Panics
    /// If `upstream` does not resolve, or the listener or thread cannot be set up.
    pub fn start(upstream: &str) -> Self {
        Self::try_start(upstream)
            .unwrap_or_else(|e| panic!("starting a fault proxy to {upstream}: {e}"))
    }

    /// Starts a proxy in front of `server`. It follows the server across
    /// [`RedisServer::restart`], which keeps the port.
    ///
    /// # Panics
    /// As [`start`](Self::start).
    pub fn start_for(server: &RedisServer) -> Self {
        Self::start(&server.addr())
    }

    /// Like [`start`](Self::start) but returns the failure instead of panicking.
    pub fn try_start(upstream: &str) -> io::Result<Self> {
        let upstream = upstream.to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "upstream resolves to nothing")
        })?;
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::new(upstream));
        let (shutdown, shutdown_rx) = oneshot::channel();
        let (ready_tx, ready_rx) = std_mpsc::sync_channel(1);

        let thread_shared = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name(format!("fault-proxy-{}", addr.port()))
            .spawn(move || {
                // Built and dropped on this thread: dropping a runtime inside
                // the caller's async context would panic.
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .enable_time()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                runtime.block_on(async move {
                    let listener = match TcpListener::from_std(listener) {
                        Ok(listener) => listener,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    accept_loop(thread_shared, listener, shutdown_rx).await;
                });
                // Dropping the runtime drops every connection task and with
                // it every socket.
            })?;
        ready_rx.recv().unwrap_or_else(|_| {
            Err(io::Error::other("fault proxy thread exited during startup"))
        })?;
        Ok(Self {
            shared,
            addr,
            shutdown: Some(shutdown),
            thread: Some(thread),
        })
    }

    /// `"127.0.0.1:<port>"` the proxy listens on.
    pub fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `"redis://127.0.0.1:<port>/"`, the URL to give the client under test.
    pub fn url(&self) -> String {
        format!("redis://{}/", self.addr())
    }

    /// The upstream server's address, as resolved at start.
    pub fn upstream(&self) -> String {
        self.shared.upstream.to_string()
    }

    /// Loses each server-to-client chunk with `probability`: the chunk is
    /// discarded and both sockets of its connection are reset (RST). The
    /// request reached and changed the server; the client sees a reset
    /// instead of the answer. `0.0` turns it off.
    ///
    /// # Panics
    /// If `probability` is not within `0.0..=1.0`.
    pub fn drop_replies(&self, probability: f64) {
        assert!(
            (0.0..=1.0).contains(&probability),
            "drop_replies({probability}): the probability must be within 0.0..=1.0"
        );
        self.shared
            .drop_probability
            .store(probability.to_bits(), Ordering::SeqCst);
    }

    /// Loses the next server-to-client chunk on any connection and resets
    /// that connection, like [`drop_replies`](Self::drop_replies) but exactly
    /// once. Calling it again before a chunk went by still drops one chunk.
    pub fn drop_next_reply(&self) {
        self.shared.drop_next.store(true, Ordering::SeqCst);
    }

    /// While on, bytes in both directions are read and discarded, including
    /// chunks delayed by [`latency`](Self::latency) that come due meanwhile.
    /// Connections stay open; nothing arrives. Turning it off forwards bytes
    /// read from then on; what was discarded stays lost.
    pub fn blackhole(&self, on: bool) {
        self.shared.blackhole.store(on, Ordering::SeqCst);
    }

    /// Delays every chunk in each direction by `base` plus a uniformly random
    /// extra in `[0, jitter]`, counted from when the proxy read it. A chunk
    /// never overtakes an earlier one in the same direction, so one that
    /// drew a short delay may wait longer behind its predecessor.
    /// `latency(Duration::ZERO, Duration::ZERO)` turns it off (chunks already
    /// delayed keep their delay).
    pub fn latency(&self, base: Duration, jitter: Duration) {
        *lock(&self.shared.latency) = (base, jitter);
    }

    /// Delays every server-to-client chunk by `delay` (on top of
    /// [`latency`](Self::latency)), requests not at all: a request reaches and
    /// changes the server at once, and its answer comes late, after the
    /// client's response timeout if `delay` exceeds it. Ordered like
    /// `latency`; `Duration::ZERO` turns it off (chunks already delayed keep
    /// their delay).
    pub fn reply_latency(&self, delay: Duration) {
        *lock(&self.shared.reply_latency) = delay;
    }

    /// While on, new connections are accepted and immediately reset (RST)
    /// instead of forwarded. Established connections are not affected.
    pub fn refuse_new(&self, on: bool) {
        self.shared.refuse_new.store(on, Ordering::SeqCst);
    }

    /// Resets (RST) every connection the proxy has accepted so far, both the
    /// client and the upstream socket, and returns once they are closed (or
    /// after 5 s should the proxy thread not get to it). A connection whose
    /// client already sent its next command sees that command go unanswered.
    pub fn reset_all(&self) {
        self.reset_where(&self.shared.reset_all, |_| true);
    }

    /// Bumps `signal`, which the connections chosen by `chosen` (among the open ones) answer
    /// by resetting themselves, and waits until those are closed (or 5 s passed).
    fn reset_where(&self, signal: &watch::Sender<u64>, chosen: impl Fn(u64) -> bool) {
        let mut open = lock(&self.shared.open);
        let targets: Vec<u64> = open.iter().copied().filter(|&id| chosen(id)).collect();
        signal.send_modify(|generation| *generation += 1);
        let deadline = Instant::now() + RESET_ALL_TIMEOUT;
        while targets.iter().any(|id| open.contains(id)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            open = self
                .shared
                .closed
                .wait_timeout(open, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// From now on, notes every connection whose client sends `pattern` (for instance
    /// `b"SUBSCRIBE"`, to find the one connection of a client that carries its
    /// subscriptions), so that [`reset_noted`](Self::reset_noted) can cut that
    /// connection alone while the client's others go on. Only bytes read after this call
    /// count; a pattern split across two reads is found all the same.
    ///
    /// # Panics
    /// If `pattern` is empty.
    pub fn note_sending(&self, pattern: &[u8]) {
        assert!(!pattern.is_empty(), "note_sending: the pattern is empty");
        let mut patterns = lock(&self.shared.patterns);
        patterns.push(pattern.to_vec());
        self.shared.noting.store(true, Ordering::SeqCst);
    }

    /// How many open connections are noted (see [`note_sending`](Self::note_sending)).
    pub fn noted(&self) -> usize {
        let open = lock(&self.shared.open);
        lock(&self.shared.noted)
            .iter()
            .filter(|id| open.contains(id))
            .count()
    }

    /// Resets (RST) the open connections noted by [`note_sending`](Self::note_sending), both
    /// the client and the upstream socket, and returns once they are closed (or after 5 s).
    /// The others are untouched. Connections accepted later are not noted until they send
    /// a pattern themselves.
    pub fn reset_noted(&self) {
        let noted = lock(&self.shared.noted).clone();
        self.reset_where(&self.shared.reset_noted, |id| noted.contains(&id));
    }

    /// Freezes every connection open now: from now on they pass no byte in either direction
    /// (what was read is held, nothing more is read, so the peers' writes back up), and they
    /// stay open, as a frozen proxy, a NAT or firewall that dropped their state, or a
    /// partitioned host would leave them. Connections accepted later pass as usual.
    /// [`thaw`](Self::thaw) (or [`clear`](Self::clear)) lets the frozen ones go on with the
    /// bytes held.
    pub fn freeze(&self) {
        let open = lock(&self.shared.open).clone();
        self.freeze_ids(open);
    }

    /// [`freeze`](Self::freeze), for the open connections noted by
    /// [`note_sending`](Self::note_sending) only.
    pub fn freeze_noted(&self) {
        let open = lock(&self.shared.open).clone();
        let noted = lock(&self.shared.noted).clone();
        self.freeze_ids(open.intersection(&noted).copied().collect());
    }

    fn freeze_ids(&self, ids: HashSet<u64>) {
        lock(&self.shared.frozen).extend(ids);
        self.shared
            .freezes
            .send_modify(|generation| *generation += 1);
    }

    /// Lets the connections frozen by [`freeze`](Self::freeze) pass bytes again.
    pub fn thaw(&self) {
        lock(&self.shared.frozen).clear();
        self.shared
            .freezes
            .send_modify(|generation| *generation += 1);
    }

    /// How many open connections are frozen.
    pub fn frozen(&self) -> usize {
        let open = lock(&self.shared.open);
        lock(&self.shared.frozen)
            .iter()
            .filter(|id| open.contains(id))
            .count()
    }

    /// Inserts `frame` (a RESP3 push, e.g. `>2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n`) into
    /// the server-to-client stream of the next connection that gets a reply, right before
    /// that reply: at a frame boundary, where a server may put a push of its own. Called
    /// several times, each frame goes before a reply of its own, in order.
    ///
    /// # Panics
    /// If `frame` is empty.
    pub fn inject_push(&self, frame: &[u8]) {
        assert!(!frame.is_empty(), "inject_push: the frame is empty");
        lock(&self.shared.injections).push_back(frame.to_vec());
    }

    /// While `Some(frame)`, inserts `frame` before every reply on every connection (see
    /// [`inject_push`](Self::inject_push)); `None` turns it off.
    pub fn push_before_replies(&self, frame: Option<&[u8]>) {
        *lock(&self.shared.standing_push) = frame.map(<[u8]>::to_vec);
    }

    /// Pushes inserted so far by [`inject_push`](Self::inject_push) and
    /// [`push_before_replies`](Self::push_before_replies).
    pub fn pushes_injected(&self) -> u64 {
        self.shared.pushes_injected.load(Ordering::SeqCst)
    }

    /// Loses the next server-to-client chunk, on any connection, that contains `pattern`
    /// (e.g. `b"$9\r\nsubscribe\r\n"`, a RESP3 `SUBSCRIBE` confirmation), and resets that
    /// connection, as [`drop_next_reply`](Self::drop_next_reply) does; chunks without it pass.
    /// Called again before such a chunk went by, the new pattern replaces the old.
    ///
    /// # Panics
    /// If `pattern` is empty.
    pub fn drop_next_reply_containing(&self, pattern: &[u8]) {
        assert!(
            !pattern.is_empty(),
            "drop_next_reply_containing: the pattern is empty"
        );
        *lock(&self.shared.drop_containing) = Some((pattern.to_vec(), None));
    }

    /// Loses each server-to-client chunk that contains `pattern` with `probability` (drawn
    /// from the generator of [`drop_replies`](Self::drop_replies)), resetting its connection;
    /// chunks without it pass. `drop_replies_containing(p, 0.0)` (or [`clear`](Self::clear))
    /// turns it off.
    ///
    /// # Panics
    /// If `pattern` is empty or `probability` not within `0.0..=1.0`.
    pub fn drop_replies_containing(&self, pattern: &[u8], probability: f64) {
        assert!(
            !pattern.is_empty() && (0.0..=1.0).contains(&probability),
            "drop_replies_containing: an empty pattern, or {probability} outside 0.0..=1.0"
        );
        *lock(&self.shared.drop_containing) =
            (probability > 0.0).then(|| (pattern.to_vec(), Some(probability)));
    }

    /// Turns every fault off: no drops (including a pending
    /// [`drop_next_reply`](Self::drop_next_reply) or
    /// [`drop_next_reply_containing`](Self::drop_next_reply_containing)), no black hole, no
    /// latency, new connections accepted, nothing frozen, no push to inject. Counters and the RNG are left as they are.
    pub fn clear(&self) {
        self.drop_replies(0.0);
        self.shared.drop_next.store(false, Ordering::SeqCst);
        self.blackhole(false);
        self.latency(Duration::ZERO, Duration::ZERO);
        self.reply_latency(Duration::ZERO);
        self.refuse_new(false);
        self.thaw();
        lock(&self.shared.injections).clear();
        self.push_before_replies(None);
        *lock(&self.shared.drop_containing) = None;
    }

    /// Reseeds the generator behind reply drops and jitter, so that a failing
    /// run can be replayed (see [Randomness](Self#randomness)).
    pub fn seed(&self, seed: u64) {
        *lock(&self.shared.rng) = SplitMix64(seed);
    }

    /// Client connections accepted so far, refused ones included.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Client connections currently being forwarded.
    pub fn open_connections(&self) -> usize {
        lock(&self.shared.open).len()
    }

    /// Server-to-client chunks lost through [`drop_replies`](Self::drop_replies)
    /// or [`drop_next_reply`](Self::drop_next_reply). Counted before the
    /// connection is reset, so a client that saw the reset sees the count.
    pub fn replies_dropped(&self) -> u64 {
        self.shared.replies_dropped.load(Ordering::SeqCst)
    }

    /// Connections the proxy reset as a fault: lost replies,
    /// [`reset_all`](Self::reset_all) and [`refuse_new`](Self::refuse_new).
    /// Resets passed on from a peer, or after the upstream refused a
    /// connection, are not counted. Counted before the reset is sent.
    pub fn resets(&self) -> u64 {
        self.shared.resets.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        drop(self.shutdown.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("addr", &self.addr)
            .field("upstream", &self.shared.upstream)
            .field("connections", &self.connections())
            .field("open_connections", &self.open_connections())
            .field("replies_dropped", &self.replies_dropped())
            .field("resets", &self.resets())
            .finish_non_exhaustive()
    }
}

/// State shared between the handle and the proxy thread.
struct Shared {
    upstream: SocketAddr,
    /// An `f64` as bits.
    drop_probability: AtomicU64,
    drop_next: AtomicBool,
    blackhole: AtomicBool,
    refuse_new: AtomicBool,
    /// `(base, jitter)`.
    latency: Mutex<(Duration, Duration)>,
    /// Added to server-to-client chunks only.
    reply_latency: Mutex<Duration>,
    rng: Mutex<SplitMix64>,
    /// Bumped by `reset_all`; every connection task watches it.
    reset_all: watch::Sender<u64>,
    /// Ids of the connections being forwarded; `closed` is signalled when
    /// one leaves, which `reset_all` waits for.
    open: Mutex<HashSet<u64>>,
    closed: Condvar,
    connections: AtomicU64,
    replies_dropped: AtomicU64,
    resets: AtomicU64,
    /// Client-to-server chunks read; lets tests wait until a write was read
    /// as a chunk of its own.
    requests_read: AtomicU64,
    /// Patterns given to `note_sending`; `noting` is set once there is one, so
    /// that connections scan their requests only then.
    patterns: Mutex<Vec<Vec<u8>>>,
    noting: AtomicBool,
    /// Connections whose client sent one of `patterns`.
    noted: Mutex<HashSet<u64>>,
    /// Bumped by `reset_noted`; every connection watches it and resets itself
    /// if noted.
    reset_noted: watch::Sender<u64>,
    /// Connections frozen by `freeze`; `freezes` is bumped whenever the set changes, and
    /// frozen pipes wait for it.
    frozen: Mutex<HashSet<u64>>,
    freezes: watch::Sender<u64>,
    /// Push frames `inject_push` asked for, in order, and the one `push_before_replies` puts
    /// before every reply.
    injections: Mutex<std::collections::VecDeque<Vec<u8>>>,
    standing_push: Mutex<Option<Vec<u8>>>,
    pushes_injected: AtomicU64,
    /// The pattern of `drop_next_reply_containing` (until a chunk with it was dropped) or
    /// `drop_replies_containing` (with its probability).
    drop_containing: Mutex<Option<(Vec<u8>, Option<f64>)>>,
}

impl Shared {
    fn new(upstream: SocketAddr) -> Self {
        Self {
            upstream,
            drop_probability: AtomicU64::new(0.0_f64.to_bits()),
            drop_next: AtomicBool::new(false),
            blackhole: AtomicBool::new(false),
            refuse_new: AtomicBool::new(false),
            latency: Mutex::new((Duration::ZERO, Duration::ZERO)),
            reply_latency: Mutex::new(Duration::ZERO),
            rng: Mutex::new(SplitMix64(DEFAULT_SEED)),
            reset_all: watch::Sender::new(0),
            open: Mutex::new(HashSet::new()),
            closed: Condvar::new(),
            connections: AtomicU64::new(0),
            replies_dropped: AtomicU64::new(0),
            resets: AtomicU64::new(0),
            requests_read: AtomicU64::new(0),
            patterns: Mutex::new(Vec::new()),
            noting: AtomicBool::new(false),
            noted: Mutex::new(HashSet::new()),
            reset_noted: watch::Sender::new(0),
            frozen: Mutex::new(HashSet::new()),
            freezes: watch::Sender::new(0),
            injections: Mutex::new(std::collections::VecDeque::new()),
            standing_push: Mutex::new(None),
            pushes_injected: AtomicU64::new(0),
            drop_containing: Mutex::new(None),
        }
    }

    /// Waits while connection `id` is frozen.
    async fn while_frozen(&self, id: u64) {
        let mut freezes = self.freezes.subscribe();
        while lock(&self.frozen).contains(&id) {
            if freezes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Whether the server-to-client `chunk` about to be written is lost because it contains
    /// the pattern of `drop_next_reply_containing`.
    fn lose_reply_containing(&self, chunk: &[u8]) -> bool {
        let mut pattern = lock(&self.drop_containing);
        let Some((p, probability)) = pattern.as_ref() else {
            return false;
        };
        if !chunk.windows(p.len()).any(|w| w == p.as_slice()) {
            return false;
        }
        let lose = match probability {
            None => {
                *pattern = None;
                true
            }
            Some(probability) => lock(&self.rng).next_f64() < *probability,
        };
        if lose {
            self.replies_dropped.fetch_add(1, Ordering::SeqCst);
        }
        lose
    }

    /// `chunk` with the pushes to inject inserted at the frame boundaries `scanner` finds in
    /// it (one per boundary).
    fn inject(&self, scanner: &mut FrameScanner, chunk: Vec<u8>) -> Vec<u8> {
        let boundaries = scanner.boundaries(&chunk);
        let standing = lock(&self.standing_push).clone();
        let mut injections = lock(&self.injections);
        if boundaries.is_empty() || (standing.is_none() && injections.is_empty()) {
            return chunk;
        }
        let mut out = Vec::with_capacity(chunk.len() + 64);
        let mut from = 0;
        for at in boundaries {
            let Some(push) = injections.pop_front().or_else(|| standing.clone()) else {
                break;
            };
            out.extend_from_slice(&chunk[from..at]);
            out.extend_from_slice(&push);
            from = at;
            self.pushes_injected.fetch_add(1, Ordering::SeqCst);
        }
        out.extend_from_slice(&chunk[from..]);
        out
    }

    fn blackholed(&self) -> bool {
        self.blackhole.load(Ordering::SeqCst)
    }

    /// Decides whether the server-to-client chunk about to be written is lost.
    fn lose_reply(&self) -> bool {
        let lose = self.drop_next.swap(false, Ordering::SeqCst) || {
            let probability = f64::from_bits(self.drop_probability.load(Ordering::SeqCst));
            probability > 0.0 && lock(&self.rng).next_f64() < probability
        };
        if lose {
            self.replies_dropped.fetch_add(1, Ordering::SeqCst);
        }
        lose
    }

    /// The delay for a chunk just read in `direction`, if latency is on.
    fn delay(&self, direction: Direction) -> Option<Duration> {
        let (mut base, jitter) = *lock(&self.latency);
        if direction == Direction::ToClient {
            base = base.saturating_add(*lock(&self.reply_latency));
        }
        if base.is_zero() && jitter.is_zero() {
            return None;
        }
        let jitter = u64::try_from(jitter.as_nanos()).unwrap_or(u64::MAX);
        let extra = if jitter == 0 {
            0
        } else {
            lock(&self.rng).up_to(jitter)
        };
        Some(base.saturating_add(Duration::from_nanos(extra)))
    }

    fn count_reset(&self) {
        self.resets.fetch_add(1, Ordering::SeqCst);
    }

    /// Notes connection `id` if `recent` (the end of what its client sent before this
    /// chunk) followed by `chunk` holds a pattern; keeps the end of both in `recent`.
    fn scan_request(&self, id: u64, recent: &mut Vec<u8>, chunk: &[u8]) {
        if !self.noting.load(Ordering::SeqCst) {
            return;
        }
        let patterns = lock(&self.patterns);
        let longest = patterns.iter().map(Vec::len).max().unwrap_or(0);
        recent.extend_from_slice(chunk);
        if patterns
            .iter()
            .any(|p| recent.windows(p.len()).any(|w| w == p.as_slice()))
        {
            lock(&self.noted).insert(id);
        }
        // Enough to find a pattern that starts in this chunk and ends in the next.
        let keep = longest.saturating_sub(1).min(recent.len());
        recent.drain(..recent.len() - keep);
    }
}

/// Locks without propagating poison: no code panics while holding these
/// locks, and the proxy must not start panicking because a test did.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// SplitMix64: tiny, fast and good enough for fault injection; saves a
/// dependency on `rand`.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1_u64 << 53) as f64
    }

    /// Uniform in `[0, max]`, without the bias of a modulo.
    fn up_to(&mut self, max: u64) -> u64 {
        ((u128::from(self.next_u64()) * (u128::from(max) + 1)) >> 64) as u64
    }
}

/// Keeps a connection listed in [`Shared::open`] for exactly as long as its
/// task (or the task's unpolled future) exists.
struct OpenGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl OpenGuard {
    fn register(shared: &Arc<Shared>, id: u64) -> Self {
        lock(&shared.open).insert(id);
        Self {
            shared: Arc::clone(shared),
            id,
        }
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        lock(&self.shared.open).remove(&self.id);
        self.shared.closed.notify_all();
    }
}

async fn accept_loop(
    shared: Arc<Shared>,
    listener: TcpListener,
    mut shutdown: oneshot::Receiver<()>,
) {
    let mut next_id = 0_u64;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let client = match accepted {
            Ok((client, _)) => client,
            Err(_) => {
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        shared.connections.fetch_add(1, Ordering::SeqCst);
        if shared.refuse_new.load(Ordering::SeqCst) {
            shared.count_reset();
            abort(client);
            continue;
        }
        // Subscribed before the id is listed: a reset_all that waits for
        // this connection has bumped the generation after the subscription,
        // so the task is bound to see it.
        let reset = shared.reset_all.subscribe();
        let targeted = shared.reset_noted.subscribe();
        let guard = OpenGuard::register(&shared, next_id);
        next_id += 1;
        tokio::spawn(serve(Arc::clone(&shared), client, reset, targeted, guard));
    }
}

/// How a connection's relay ended.
enum End {
    /// Both directions reached end of stream.
    Closed,
    /// A fault: a lost reply or `reset_all`.
    Reset,
    /// An I/O error on either side.
    Failed,
}

async fn serve(
    shared: Arc<Shared>,
    mut client: TcpStream,
    mut reset: watch::Receiver<u64>,
    mut targeted: watch::Receiver<u64>,
    guard: OpenGuard,
) {
    let id = guard.id;
    let _ = client.set_nodelay(true);
    // `biased` everywhere below: a pending reset wins over bytes that
    // arrived at the same time, so nothing is forwarded after reset_all.
    let connected = tokio::select! {
        biased;
        _ = reset.changed() => None,
        upstream = TcpStream::connect(shared.upstream) => Some(upstream),
    };
    let mut upstream = match connected {
        None => {
            shared.count_reset();
            abort(client);
            return;
        }
        Some(Ok(upstream)) => upstream,
        // The client sees what it would see connecting to a dead server
        // directly, as closely as an already accepted connection allows.
        Some(Err(_)) => {
            abort(client);
            return;
        }
    };
    let _ = upstream.set_nodelay(true);

    let end = {
        let relay = relay(&shared, id, &mut client, &mut upstream);
        tokio::pin!(relay);
        loop {
            tokio::select! {
                biased;
                _ = reset.changed() => break End::Reset,
                changed = targeted.changed() => {
                    if changed.is_ok() && lock(&shared.noted).contains(&id) {
                        break End::Reset;
                    }
                }
                end = &mut relay => break end,
            }
        }
    };
    match end {
        End::Closed => {}
        End::Reset => {
            shared.count_reset();
            abort(client);
            abort(upstream);
        }
        // Passes a peer's reset on instead of turning it into a clean close.
        End::Failed => {
            abort(client);
            abort(upstream);
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    ToServer,
    ToClient,
}

async fn relay(shared: &Shared, id: u64, client: &mut TcpStream, upstream: &mut TcpStream) -> End {
    let (client_read, client_write) = client.split();
    let (upstream_read, upstream_write) = upstream.split();
    let to_server = pipe(shared, id, client_read, upstream_write, Direction::ToServer);
    let to_client = pipe(shared, id, upstream_read, client_write, Direction::ToClient);
    match tokio::try_join!(to_server, to_client) {
        Ok(((), ())) => End::Closed,
        Err(end) => end,
    }
}

/// Forwards one direction until end of stream. Reading and writing are
/// separate halves joined by a queue so that delayed chunks do not hold up
/// reading: each chunk's delay runs from when it was read, not from when its
/// predecessor was written.
async fn pipe(
    shared: &Shared,
    id: u64,
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    direction: Direction,
) -> Result<(), End> {
    let (queue, mut queued) =
        mpsc::channel::<(Vec<u8>, Instant, Option<Duration>)>(IN_FLIGHT_CHUNKS);
    let read = async move {
        let mut buf = vec![0; CHUNK_SIZE];
        let mut recent = Vec::new();
        loop {
            shared.while_frozen(id).await;
            let n = from.read(&mut buf).await.map_err(|_| End::Failed)?;
            let read_at = Instant::now();
            if n == 0 {
                // Dropping the queue tells the writer to pass the EOF on.
                return Ok(());
            }
            if direction == Direction::ToServer {
                shared.requests_read.fetch_add(1, Ordering::SeqCst);
                shared.scan_request(id, &mut recent, &buf[..n]);
            }
            if shared.blackholed() {
                continue;
            }
            if queue
                .send((buf[..n].to_vec(), read_at, shared.delay(direction)))
                .await
                .is_err()
            {
                return Ok(());
            }
        }
    };
    let write = async move {
        // Where the replies start, to put injected pushes in front of them.
        let mut scanner = FrameScanner::default();
        while let Some((mut chunk, read_at, delay)) = queued.recv().await {
            if let Some(delay) = delay {
                // `sleep` (unlike `sleep_until`) copes with absurd delays.
                tokio::time::sleep(delay.saturating_sub(read_at.elapsed())).await;
            }
            shared.while_frozen(id).await;
            if shared.blackholed() {
                continue;
            }
            if direction == Direction::ToClient {
                if shared.lose_reply() || shared.lose_reply_containing(&chunk) {
                    return Err(End::Reset);
                }
                chunk = shared.inject(&mut scanner, chunk);
            }
            to.write_all(&chunk).await.map_err(|_| End::Failed)?;
        }
        shared.while_frozen(id).await;
        // A FIN for a FIN, so half-closes behave as without the proxy; the
        // peer may already be gone, which is no error worth reporting.
        let _ = to.shutdown().await;
        Ok(())
    };
    tokio::try_join!(read, write).map(|((), ())| ())
}

/// Follows the RESP2/RESP3 frames of a server-to-client stream, to tell where each top-level
/// frame (a reply, or a push) starts.
#[derive(Default)]
struct FrameScanner {
    /// Elements still to come in the current top-level frame (0: between two frames).
    left: u64,
    /// Bytes of a bulk payload, with its CRLF, still to pass.
    skip: u64,
    /// The header line read so far, while it is split over chunks.
    line: Vec<u8>,
    /// Set once the stream is no RESP: no boundary is known any more.
    lost: bool,
}

impl FrameScanner {
    /// The offsets in `chunk` (the stream's next bytes) where a top-level frame starts.
    fn boundaries(&mut self, chunk: &[u8]) -> Vec<usize> {
        let mut starts = Vec::new();
        let mut i = 0;
        while i < chunk.len() && !self.lost {
            if self.skip > 0 {
                let n = self.skip.min((chunk.len() - i) as u64);
                i += n as usize;
                self.skip -= n;
                continue;
            }
            if self.left == 0 && self.line.is_empty() {
                starts.push(i);
                self.left = 1;
            }
            match chunk[i..].iter().position(|&b| b == b'\n') {
                Some(end) => {
                    self.line.extend_from_slice(&chunk[i..=i + end]);
                    i += end + 1;
                    let line = std::mem::take(&mut self.line);
                    self.header(&line);
                }
                None => {
                    self.line.extend_from_slice(&chunk[i..]);
                    i = chunk.len();
                }
            }
        }
        starts
    }

    /// One header line, `\r\n` included.
    fn header(&mut self, line: &[u8]) {
        self.left -= 1;
        let n = line
            .get(1..line.len().saturating_sub(2))
            .and_then(|b| std::str::from_utf8(b).ok())
            .and_then(|b| b.trim().parse::<i64>().ok());
        // Negative lengths are nulls: no payload, no elements.
        let count =
            |per: u64, extra: u64| n.map(|n| u64::try_from(n).map_or(0, |n| n * per + extra));
        let added = match line.first() {
            Some(b'$' | b'!' | b'=') => count(1, 0).map(|len| {
                self.skip = if n.is_some_and(|n| n >= 0) {
                    len + 2
                } else {
                    0
                };
                0
            }),
            Some(b'*' | b'~' | b'>') => count(1, 0),
            Some(b'%') => count(2, 0),
            Some(b'|') => count(2, 1),
            Some(b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(') => Some(0),
            _ => None,
        };
        match added {
            Some(added) => self.left += added,
            None => self.lost = true,
        }
    }
}

/// Closes `stream` with a RST instead of a FIN, discarding unsent data.
fn abort(stream: TcpStream) {
    // tokio's `set_linger` is deprecated and `set_zero_linger` needs a newer
    // tokio than the workspace asks for, hence the raw setsockopt.
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the fd is open for the lifetime of `stream`, and the option
    // value is a valid `linger` of the size passed.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::from_ref(&linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(stream);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait_until;
    use redis::IntoConnectionInfo;

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// A connection without the `CLIENT SETINFO` handshake, so connecting
    /// is a bare TCP connect and every reply on the wire answers one of the
    /// test's commands.
    fn connect(url: &str) -> redis::RedisResult<redis::Connection> {
        let info = url.into_connection_info()?;
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let client = redis::Client::open(info.set_redis_settings(settings))?;
        let conn = client.get_connection_with_timeout(TIMEOUT)?;
        conn.set_read_timeout(Some(TIMEOUT))?;
        conn.set_write_timeout(Some(TIMEOUT))?;
        Ok(conn)
    }

    fn ping(conn: &mut redis::Connection) -> redis::RedisResult<String> {
        redis::cmd("PING").query(conn)
    }

    fn connect_and_ping(url: &str) -> redis::RedisResult<String> {
        ping(&mut connect(url)?)
    }

    /// A raw PING on `stream`; returns the reply's size.
    fn raw_ping(stream: &mut std::net::TcpStream) -> io::Result<usize> {
        use std::io::{Read, Write};
        stream.set_read_timeout(Some(TIMEOUT))?;
        stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
        stream.read(&mut [0; 64])
    }

    fn get(server: &RedisServer, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut server.connection())
            .expect("GET on the server")
    }

    /// Sequential `INCR`s through the proxy, reconnecting after each
    /// failure; returns the indices of the failed ones.
    fn incr_through(proxy: &FaultProxy, key: &str, count: usize) -> Vec<usize> {
        let mut conn = None;
        let mut failed = Vec::new();
        for i in 0..count {
            let c = match conn.as_mut() {
                Some(c) => c,
                None => conn.insert(connect(&proxy.url()).expect("connect through the proxy")),
            };
            if redis::cmd("INCR").arg(key).query::<u64>(c).is_err() {
                failed.push(i);
                conn = None;
            }
        }
        failed
    }

    #[test]
    fn handle_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<FaultProxy>();
    }

    #[test]
    fn forwards_commands_both_ways() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        assert_eq!(proxy.addr(), format!("127.0.0.1:{}", proxy.port()));
        assert_eq!(proxy.url(), format!("redis://127.0.0.1:{}/", proxy.port()));
        assert_eq!(proxy.upstream(), server.addr());
        assert_ne!(proxy.port(), server.port());

        let mut conn = connect(&proxy.url()).expect("connect");
        assert_eq!(ping(&mut conn).expect("PING"), "PONG");
        redis::cmd("SET")
            .arg("k")
            .arg("v")
            .exec(&mut conn)
            .expect("SET");
        assert_eq!(get(&server, "k").as_deref(), Some("v"));
        // Larger than a chunk in both directions.
        let big = "x".repeat(1 << 20);
        redis::cmd("SET")
            .arg("big")
            .arg(&big)
            .exec(&mut conn)
            .expect("SET big");
        let back: String = redis::cmd("GET").arg("big").query(&mut conn).expect("GET");
        assert!(back == big, "a 1 MiB value came back altered");

        assert_eq!(proxy.connections(), 1);
        assert_eq!(proxy.open_connections(), 1);
        drop(conn);
        assert!(
            wait_until(TIMEOUT, || proxy.open_connections() == 0),
            "the client's close did not end the proxied connection"
        );
        assert_eq!((proxy.replies_dropped(), proxy.resets()), (0, 0));
    }

    #[test]
    fn drop_next_reply_loses_the_reply_but_not_the_write() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        let mut conn = connect(&proxy.url()).expect("connect");
        ping(&mut conn).expect("PING");

        proxy.drop_next_reply();
        let err = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .exec(&mut conn)
            .expect_err("the SET reply must be lost");
        assert!(err.is_connection_dropped(), "{err:?}");
        assert_eq!(get(&server, "k").as_deref(), Some("v"));
        assert_eq!(proxy.replies_dropped(), 1);
        assert_eq!(proxy.resets(), 1);

        // One-shot: the next connection gets all its replies.
        let mut conn = connect(&proxy.url()).expect("reconnect");
        let value: String = redis::cmd("GET").arg("k").query(&mut conn).expect("GET");
        assert_eq!(value, "v");
        assert_eq!(proxy.replies_dropped(), 1);
    }

    #[test]
    fn blackhole_swallows_requests_until_turned_off() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        let mut conn = connect(&proxy.url()).expect("connect");
        ping(&mut conn).expect("PING");

        proxy.blackhole(true);
        conn.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("read timeout");
        let err = redis::cmd("SET")
            .arg("k")
            .arg("v")
            .exec(&mut conn)
            .expect_err("no reply through a black hole");
        assert!(err.is_timeout(), "{err:?}");
        assert_eq!(get(&server, "k"), None, "the request reached the server");
        assert_eq!(proxy.open_connections(), 1);

        proxy.blackhole(false);
        assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
        assert_eq!(proxy.resets(), 0);
    }

    /// Reads from `stream` until `want` bytes came (or the read timeout struck).
    fn read_exactly(stream: &mut std::net::TcpStream, want: usize) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let mut got = vec![0; want];
        stream.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn freeze_stops_open_connections_and_lets_new_ones_pass() {
        use std::io::Write;
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        let mut frozen = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
        assert!(raw_ping(&mut frozen).expect("raw PING") > 0);

        proxy.freeze();
        assert_eq!(proxy.frozen(), 1);
        frozen
            .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n")
            .expect("write");
        frozen
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("read timeout");
        let err = read_exactly(&mut frozen, 5).expect_err("no reply while frozen");
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
            "{err}"
        );
        assert_eq!(get(&server, "k"), None, "the request passed the freeze");
        assert_eq!(
            proxy.open_connections(),
            1,
            "a frozen connection stays open"
        );
        // A new connection passes, and is not frozen.
        assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
        assert_eq!(proxy.frozen(), 1);

        proxy.thaw();
        frozen
            .set_read_timeout(Some(TIMEOUT))
            .expect("read timeout");
        assert_eq!(
            read_exactly(&mut frozen, 5).expect("the held SET's reply"),
            b"+OK\r\n"
        );
        assert_eq!(get(&server, "k").as_deref(), Some("v"));
        assert_eq!((proxy.frozen(), proxy.resets()), (0, 0));
    }

    #[test]
    fn freeze_noted_stops_only_the_noted_connections() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        proxy.note_sending(b"marked-connection");
        let mut marked = connect(&proxy.url()).expect("connect marked");
        let mut other = connect(&proxy.url()).expect("connect other");
        let _: String = redis::cmd("ECHO")
            .arg("marked-connection")
            .query(&mut marked)
            .expect("ECHO");
        proxy.freeze_noted();
        assert_eq!(proxy.frozen(), 1);
        marked
            .set_read_timeout(Some(Duration::from_millis(300)))
            .expect("read timeout");
        assert!(ping(&mut marked).expect_err("frozen").is_timeout());
        assert_eq!(ping(&mut other).expect("the other goes on"), "PONG");
    }

    const PUSH: &[u8] = b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n";

    #[test]
    fn an_injected_push_goes_before_the_next_reply() {
        use std::io::Write;
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        let mut raw = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
        raw.set_read_timeout(Some(TIMEOUT)).expect("read timeout");
        proxy.inject_push(PUSH);
        proxy.inject_push(PUSH);
        // Two replies in one chunk (pipelined), a push before each.
        raw.write_all(b"PING\r\nPING\r\n").expect("write");
        let mut want = Vec::new();
        for _ in 0..2 {
            want.extend_from_slice(PUSH);
            want.extend_from_slice(b"+PONG\r\n");
        }
        assert_eq!(read_exactly(&mut raw, want.len()).expect("replies"), want);
        assert_eq!(proxy.pushes_injected(), 2);
        // Nothing left to inject: the next reply comes alone.
        assert_eq!(raw_ping(&mut raw).expect("PING"), 7);

        proxy.push_before_replies(Some(PUSH));
        raw.write_all(b"PING\r\n").expect("write");
        let mut want = PUSH.to_vec();
        want.extend_from_slice(b"+PONG\r\n");
        assert_eq!(read_exactly(&mut raw, want.len()).expect("reply"), want);
        proxy.clear();
        assert_eq!(raw_ping(&mut raw).expect("PING"), 7);
    }

    #[test]
    fn the_frame_scanner_finds_every_frame_start_at_every_split() {
        let frames: &[&[u8]] = &[
            b"+OK\r\n",
            b"$5\r\nhe\r\no\r\n",
            b"$-1\r\n",
            b"*2\r\n:1\r\n$3\r\nabc\r\n",
            b"*-1\r\n",
            b"%1\r\n+a\r\n*1\r\n:2\r\n",
            b"|1\r\n+k\r\n+v\r\n:7\r\n",
            b"-ERR no\r\n",
            b">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n",
            b"*0\r\n",
            b"=7\r\ntxt:abc\r\n",
        ];
        let stream: Vec<u8> = frames.concat();
        let mut starts = Vec::new();
        let mut at = 0;
        for frame in frames {
            starts.push(at);
            at += frame.len();
        }
        for a in 0..=stream.len() {
            for b in a..=stream.len() {
                let mut scanner = FrameScanner::default();
                let mut found = Vec::new();
                for (from, to) in [(0, a), (a, b), (b, stream.len())] {
                    found.extend(
                        scanner
                            .boundaries(&stream[from..to])
                            .iter()
                            .map(|i| i + from),
                    );
                }
                assert_eq!(found, starts, "split at {a} and {b}");
            }
        }
    }

    #[test]
    fn drop_next_reply_containing_drops_only_that_reply() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        let mut conn = connect(&proxy.url()).expect("connect");
        proxy.drop_next_reply_containing(b"marker");
        assert_eq!(
            ping(&mut conn).expect("a reply without the pattern"),
            "PONG"
        );
        let lost: redis::RedisResult<String> = redis::cmd("ECHO").arg("a marker").query(&mut conn);
        assert!(lost.expect_err("dropped").is_connection_dropped());
        assert_eq!((proxy.replies_dropped(), proxy.resets()), (1, 1));
        let mut conn = connect(&proxy.url()).expect("connect again");
        let echoed: String = redis::cmd("ECHO")
            .arg("a marker")
            .query(&mut conn)
            .expect("once only");
        assert_eq!(echoed, "a marker");
    }

    #[test]
    fn latency_delays_each_direction() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        let mut conn = connect(&proxy.url()).expect("connect");
        ping(&mut conn).expect("PING");

        let base = Duration::from_millis(100);
        proxy.latency(base, Duration::ZERO);
        let started = Instant::now();
        ping(&mut conn).expect("PING with latency");
        let round_trip = started.elapsed();
        assert!(
            round_trip >= 2 * base,
            "round trip {round_trip:?} shorter than the request's and the reply's delay"
        );

        proxy.latency(Duration::ZERO, Duration::ZERO);
        ping(&mut conn).expect("PING without latency");
    }

    #[test]
    fn jitter_never_reorders_chunks() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        proxy.seed(3);
        proxy.latency(Duration::from_millis(1), Duration::from_millis(20));
        let mut conn = connect(&proxy.url()).expect("connect");

        // Each command is read as a chunk of its own, with its own delay,
        // while earlier ones are still delayed: without the ordering,
        // requests and replies would overtake each other.
        let mut expected = String::new();
        for i in 0..100 {
            let cmd = redis::cmd("APPEND")
                .arg("k")
                .arg(format!("{i},"))
                .get_packed_command();
            conn.send_packed_command(&cmd).expect("send APPEND");
            assert!(
                wait_until(TIMEOUT, || {
                    proxy.shared.requests_read.load(Ordering::SeqCst) == i + 1
                }),
                "the proxy did not read APPEND #{i}"
            );
            expected.push_str(&format!("{i},"));
        }
        let mut lengths = Vec::new();
        for _ in 0..100 {
            match conn.recv_response().expect("APPEND reply") {
                redis::Value::Int(len) => lengths.push(len),
                other => panic!("unexpected APPEND reply {other:?}"),
            }
        }
        assert!(
            lengths.windows(2).all(|w| w[0] < w[1]),
            "replies out of order: {lengths:?}"
        );
        assert_eq!(get(&server, "k").as_deref(), Some(expected.as_str()));
    }

    #[test]
    fn refuse_new_resets_new_connections_only() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        let mut established = connect(&proxy.url()).expect("connect");
        ping(&mut established).expect("PING");

        proxy.refuse_new(true);
        assert!(connect_and_ping(&proxy.url()).is_err());
        // A reset, not a clean close.
        let mut raw = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
        let err = raw_ping(&mut raw).expect_err("PING on a refused connection");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
        assert_eq!(proxy.resets(), 2);
        assert_eq!(proxy.connections(), 3);
        ping(&mut established).expect("an established connection keeps working");

        proxy.refuse_new(false);
        assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
    }

    #[test]
    fn reset_all_breaks_open_connections() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        let mut a = connect(&proxy.url()).expect("connect a");
        let mut b = connect(&proxy.url()).expect("connect b");
        ping(&mut a).expect("PING a");
        ping(&mut b).expect("PING b");
        let mut raw = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
        assert!(raw_ping(&mut raw).expect("raw PING") > 0);
        assert_eq!(proxy.open_connections(), 3);

        proxy.reset_all();
        // reset_all returns once the connections are gone.
        assert_eq!(proxy.open_connections(), 0);
        assert_eq!(proxy.resets(), 3);
        let err = raw_ping(&mut raw).expect_err("PING on a reset connection");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
        for conn in [&mut a, &mut b] {
            let err = ping(conn).expect_err("PING on a reset connection");
            assert!(err.is_connection_dropped(), "{err:?}");
        }
        assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
    }

    #[test]
    fn reset_noted_breaks_only_the_connections_that_sent_the_pattern() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        proxy.note_sending(b"marked-connection");
        let mut marked = connect(&proxy.url()).expect("connect marked");
        let mut other = connect(&proxy.url()).expect("connect other");
        let mut split = std::net::TcpStream::connect(proxy.addr()).expect("TCP connect");
        let _: String = redis::cmd("ECHO")
            .arg("marked-connection")
            .query(&mut marked)
            .expect("ECHO");
        ping(&mut other).expect("PING other");
        {
            // The pattern split over two writes, read as two chunks.
            use std::io::{Read, Write};
            split.set_read_timeout(Some(TIMEOUT)).expect("timeout");
            let before = proxy.shared.requests_read.load(Ordering::SeqCst);
            split
                .write_all(b"*2\r\n$4\r\nECHO\r\n$17\r\nmarked-")
                .expect("write");
            assert!(wait_until(TIMEOUT, || {
                proxy.shared.requests_read.load(Ordering::SeqCst) > before
            }));
            split.write_all(b"connection\r\n").expect("write");
            assert!(split.read(&mut [0; 64]).expect("ECHO reply") > 0);
        }
        assert_eq!(proxy.noted(), 2);

        proxy.reset_noted();
        assert_eq!(proxy.open_connections(), 1);
        let err = ping(&mut marked).expect_err("PING on a reset connection");
        assert!(err.is_connection_dropped(), "{err:?}");
        let err = raw_ping(&mut split).expect_err("PING on a reset connection");
        assert_eq!(err.kind(), io::ErrorKind::ConnectionReset, "{err}");
        assert_eq!(
            ping(&mut other).expect("the other connection goes on"),
            "PONG"
        );
        // A new connection is not noted until it sends the pattern itself.
        assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
        assert_eq!(proxy.noted(), 0);
    }

    #[test]
    fn random_reply_drops_still_apply_the_writes() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        proxy.seed(7);
        proxy.drop_replies(0.2);
        let attempts = 200;
        let failed = incr_through(&proxy, "n", attempts).len();
        proxy.drop_replies(0.0);

        let acked = attempts - failed;
        let counter: usize = get(&server, "n").map_or(0, |n| n.parse().expect("a number"));
        assert!(failed > 0, "no reply was dropped");
        assert!(proxy.replies_dropped() > 0);
        assert!(counter >= acked, "counter {counter} < acknowledged {acked}");
        // Each reply is one chunk, so every failure is a lost reply to an
        // INCR that was applied.
        assert_eq!(counter, attempts, "{failed} failed, {acked} acknowledged");
        assert_eq!(proxy.replies_dropped(), failed as u64);
        assert_eq!(proxy.resets(), failed as u64);
    }

    #[test]
    fn seed_replays_the_same_drops() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        proxy.drop_replies(0.3);
        proxy.seed(11);
        let first = incr_through(&proxy, "a", 50);
        proxy.seed(11);
        let second = incr_through(&proxy, "b", 50);
        assert!(!first.is_empty());
        assert_eq!(first, second);
    }

    #[test]
    fn clear_turns_every_fault_off() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        proxy.drop_replies(1.0);
        proxy.drop_next_reply();
        proxy.blackhole(true);
        proxy.latency(Duration::from_secs(60), Duration::ZERO);
        proxy.refuse_new(true);
        proxy.clear();
        let mut conn = connect(&proxy.url()).expect("connect");
        for _ in 0..10 {
            assert_eq!(ping(&mut conn).expect("PING"), "PONG");
        }
        assert_eq!((proxy.replies_dropped(), proxy.resets()), (0, 0));
    }

    #[test]
    fn dropping_the_proxy_closes_its_connections() {
        let server = RedisServer::start();
        let proxy = FaultProxy::start_for(&server);
        let url = proxy.url();
        let mut conn = connect(&url).expect("connect");
        ping(&mut conn).expect("PING");
        drop(proxy);
        assert!(ping(&mut conn).is_err());
        assert!(connect_and_ping(&url).is_err());
    }

    #[test]
    fn keeps_forwarding_while_the_callers_runtime_is_blocked() {
        let server = RedisServer::start();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        runtime.block_on(async {
            let proxy = FaultProxy::start_for(&server);
            // Blocking calls on the only thread of this runtime.
            assert_eq!(connect_and_ping(&proxy.url()).expect("PING"), "PONG");
            // Dropping inside an async context must not panic.
            drop(proxy);
        });
    }
}
