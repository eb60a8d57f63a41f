//! A fault-injecting TCP proxy between Redis clients and one server.
//!
//! The handle ([`FaultProxy`]) is here; the state it shares with the proxy
//! thread is in `state`, the accept loop and the forwarding of each
//! connection's two directions in `pump`, and the RESP frame scanning that
//! finds where injected pushes go in `frames`.

mod frames;
mod pump;
#[cfg(test)]
mod redirect_tests;
mod state;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::Ordering;
use std::sync::{mpsc as std_mpsc, Arc, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};

use super::TestServer;
use pump::accept_loop;
use state::{lock, Shared, SplitMix64};

/// Upper bound for [`FaultProxy::reset_all`] waiting on the proxy thread.
const RESET_ALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A TCP proxy on `127.0.0.1` in front of one Redis server that injects real
/// network faults: lost replies with connection resets, a black hole,
/// latency with jitter, refused connections and resets on demand.
///
/// Put one proxy in front of each node and point the client under test at
/// [`url`](Self::url):
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use distlock::testing::{FaultProxy, TestServer};
///
/// let server = TestServer::start().await?;
/// let proxy = FaultProxy::in_front_of(&server)?;
/// let locks = distlock::Client::connect(&proxy.url()).await?;
/// // The acquire reaches the server, but its reply is lost and the connection reset:
/// // the client sends it again on a new connection, and takes the lock once.
/// proxy.drop_next_replies(1);
/// let guard = locks.lock("job:1").acquire().await?;
/// assert_eq!(proxy.replies_dropped(), 1);
/// # drop(guard); Ok(()) }
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
    /// Starts a proxy in front of `server` on a free loopback port. It follows the server
    /// across [`TestServer::restart`], which keeps the port.
    pub fn in_front_of(server: &TestServer) -> io::Result<Self> {
        Self::start(&server.addr())
    }

    /// Starts a proxy to `upstream` (`"127.0.0.1:PORT"`, e.g. [`TestServer::addr`]) on a
    /// free loopback port. The upstream address is resolved once, here; nothing connects to
    /// it until a client connects.
    pub fn start(upstream: &str) -> io::Result<Self> {
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

    /// The upstream server's address: as resolved at start, or the last
    /// [`redirect`](Self::redirect)'s.
    pub fn upstream(&self) -> String {
        self.shared.upstream().to_string()
    }

    /// Sends every connection's requests from now on to another server, `upstream`
    /// (`"127.0.0.1:PORT"`), as if the server behind the address had been replaced while the
    /// clients' connections stayed open: an open connection's next request goes to `upstream`
    /// on a new connection of its own, and the answers the old server still owes come first;
    /// new connections go there too. The new server knows nothing of the connection's past
    /// (its `HELLO` protocol, `SELECT`ed database, name, subscriptions): it speaks RESP2
    /// until told otherwise. A connection with nothing more to send stays on the old server.
    /// The old connection is ended with a FIN once the next request went to the new server:
    /// a server answers what it read before, except a command that blocks (`BLPOP`), which
    /// it drops unanswered; the client then takes the next answer for it.
    ///
    /// ```no_run
    /// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    /// use distlock::testing::{FaultProxy, TestServer};
    ///
    /// let (old, new) = (TestServer::start().await?, TestServer::start().await?);
    /// let proxy = FaultProxy::in_front_of(&old)?;
    /// let locks = distlock::Client::connect(&proxy.url()).await?;
    /// // The lock is taken on `old`; from here on the same connection reaches `new`.
    /// let guard = locks.lock("job:1").acquire().await?;
    /// proxy.redirect(&new.addr())?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn redirect(&self, upstream: &str) -> io::Result<()> {
        let upstream = upstream.to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "upstream resolves to nothing")
        })?;
        self.shared.redirect(upstream);
        Ok(())
    }

    /// Loses each server-to-client chunk with `probability`: the chunk is
    /// discarded and both sockets of its connection are reset (RST). The
    /// request reached and changed the server; the client sees a reset
    /// instead of the answer. `0.0` turns it off; a value outside `0.0..=1.0` is taken as
    /// the nearest bound (NaN as `0.0`).
    pub fn drop_replies(&self, probability: f64) {
        let probability = clamp_probability(probability);
        self.shared
            .drop_probability
            .store(probability.to_bits(), Ordering::SeqCst);
    }

    /// Loses the next server-to-client chunk on any connection and resets
    /// that connection, like [`drop_replies`](Self::drop_replies) but exactly
    /// once. Calling it again before a chunk went by still drops one chunk.
    pub fn drop_next_reply(&self) {
        self.drop_next_replies(1);
    }

    /// Loses the next `n` server-to-client chunks, each resetting its connection (as
    /// [`drop_next_reply`](Self::drop_next_reply) does, `n` times over): a client that
    /// retries on a new connection loses its next replies too. Replaces an earlier count;
    /// `0` turns it off.
    pub fn drop_next_replies(&self, n: u64) {
        self.shared.drop_next.store(n, Ordering::SeqCst);
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
    /// count; a pattern split across two reads is found all the same. An empty pattern
    /// notes nothing.
    pub fn note_sending(&self, pattern: &[u8]) {
        if pattern.is_empty() {
            return;
        }
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
    /// several times, each frame goes before a reply of its own, in order. An empty frame
    /// is nothing to inject.
    pub fn inject_push(&self, frame: &[u8]) {
        if frame.is_empty() {
            return;
        }
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
    /// Called again before such a chunk went by, the new pattern replaces the old. An
    /// empty pattern turns it off.
    pub fn drop_next_reply_containing(&self, pattern: &[u8]) {
        if pattern.is_empty() {
            *lock(&self.shared.drop_containing) = None;
            return;
        }
        *lock(&self.shared.drop_containing) = Some((pattern.to_vec(), None));
    }

    /// Loses each server-to-client chunk that contains `pattern` with `probability` (drawn
    /// from the generator of [`drop_replies`](Self::drop_replies)), resetting its connection;
    /// chunks without it pass. `drop_replies_containing(p, 0.0)` (or [`clear`](Self::clear))
    /// turns it off, as does an empty pattern; a probability outside `0.0..=1.0` is taken
    /// as the nearest bound.
    pub fn drop_replies_containing(&self, pattern: &[u8], probability: f64) {
        let probability = clamp_probability(probability);
        *lock(&self.shared.drop_containing) = (probability > 0.0 && !pattern.is_empty())
            .then(|| (pattern.to_vec(), Some(probability)));
    }

    /// Turns every fault off: no drops (including a pending
    /// [`drop_next_reply`](Self::drop_next_reply) or
    /// [`drop_next_reply_containing`](Self::drop_next_reply_containing)), no black hole, no
    /// latency, new connections accepted, nothing frozen, no push to inject. Counters and the RNG are left as they are.
    pub fn clear(&self) {
        self.drop_replies(0.0);
        self.shared.drop_next.store(0, Ordering::SeqCst);
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

    /// Client-to-server chunks read so far (a request, or several pipelined, each).
    pub fn requests_read(&self) -> u64 {
        self.shared.requests_read.load(Ordering::SeqCst)
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
            .field("upstream", &self.shared.upstream())
            .field("connections", &self.connections())
            .field("open_connections", &self.open_connections())
            .field("replies_dropped", &self.replies_dropped())
            .field("resets", &self.resets())
            .finish_non_exhaustive()
    }
}

/// A probability within `0.0..=1.0` (NaN: `0.0`).
fn clamp_probability(p: f64) -> f64 {
    if p.is_nan() {
        0.0
    } else {
        p.clamp(0.0, 1.0)
    }
}
