//! The proxy thread's side: the accept loop, and per connection the relay of
//! both directions chunk by chunk, with the faults applied, until it ends.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};

use super::frames::FrameScanner;
use super::state::{lock, Direction, Shared};

/// Bytes read per `read` call; one read is one chunk, the unit of every fault.
const CHUNK_SIZE: usize = 16 * 1024;
/// Chunks read but not yet written, per direction. Bounded so that a peer
/// that stops reading slows the other peer down, as it would without us.
const IN_FLIGHT_CHUNKS: usize = 64;
/// Pause after a failed `accept` (e.g. out of file descriptors), which would
/// otherwise fail again at once and spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(10);

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

pub(super) async fn accept_loop(
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
    // Before the address is read: a redirect from then on reaches this connection.
    let redirects = shared.redirects.subscribe();
    // `biased` everywhere below: a pending reset wins over bytes that
    // arrived at the same time, so nothing is forwarded after reset_all.
    let connected = tokio::select! {
        biased;
        _ = reset.changed() => None,
        upstream = connect(&shared) => Some(upstream),
    };
    let upstream = match connected {
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
    let upstream_fd = AtomicI32::new(upstream.as_raw_fd());

    let end = {
        let relay = relay(&shared, id, &mut client, upstream, redirects, &upstream_fd);
        tokio::pin!(relay);
        let end = loop {
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
        };
        if matches!(end, End::Reset) {
            // The relay, unfinished, still holds the upstream socket: closed with it, by a RST.
            zero_linger(upstream_fd.load(Ordering::SeqCst));
        }
        end
    };
    match end {
        End::Closed => {}
        End::Reset => {
            shared.count_reset();
            abort(client);
        }
        // Passes a peer's reset on instead of turning it into a clean close.
        End::Failed => abort(client),
    }
}

/// A connection to the upstream server of the moment.
async fn connect(shared: &Shared) -> std::io::Result<TcpStream> {
    let upstream = TcpStream::connect(shared.upstream()).await?;
    let _ = upstream.set_nodelay(true);
    Ok(upstream)
}

type Source<'a> = Box<dyn AsyncRead + Unpin + Send + 'a>;
type Sink<'a> = Box<dyn AsyncWrite + Unpin + Send + 'a>;

/// What a direction does when the proxy is redirected (`FaultProxy::redirect`): the requests'
/// writer opens the new upstream connection and hands its reading half to the replies' reader,
/// which takes it once the old one ended.
enum Redirect {
    /// The requests' writer: the redirects to watch, and where the new reading halves go.
    Writer(watch::Receiver<u64>, mpsc::UnboundedSender<OwnedReadHalf>),
    /// The replies' reader: the new reading halves.
    Reader(mpsc::UnboundedReceiver<OwnedReadHalf>),
}

async fn relay(
    shared: &Shared,
    id: u64,
    client: &mut TcpStream,
    upstream: TcpStream,
    redirects: watch::Receiver<u64>,
    upstream_fd: &AtomicI32,
) -> End {
    let (client_read, client_write) = client.split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let (handed, taken) = mpsc::unbounded_channel();
    let to_server = pipe(
        shared,
        id,
        Box::new(client_read),
        Box::new(upstream_write),
        Direction::ToServer,
        (Redirect::Writer(redirects, handed), upstream_fd),
    );
    let to_client = pipe(
        shared,
        id,
        Box::new(upstream_read),
        Box::new(client_write),
        Direction::ToClient,
        (Redirect::Reader(taken), upstream_fd),
    );
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
    mut from: Source<'_>,
    mut to: Sink<'_>,
    direction: Direction,
    (redirect, upstream_fd): (Redirect, &AtomicI32),
) -> Result<(), End> {
    let (queue, mut queued) =
        mpsc::channel::<(Vec<u8>, Instant, Option<Duration>)>(IN_FLIGHT_CHUNKS);
    let (mut redirects, mut taken) = match redirect {
        Redirect::Writer(redirects, handed) => (Some((redirects, handed)), None),
        Redirect::Reader(taken) => (None, Some(taken)),
    };
    let read = async move {
        let mut buf = vec![0; CHUNK_SIZE];
        let mut recent = Vec::new();
        loop {
            shared.while_frozen(id).await;
            let n = from.read(&mut buf).await.map_err(|_| End::Failed)?;
            let read_at = Instant::now();
            if n == 0 {
                // The old upstream's end after a redirect: its answers are all passed on,
                // the new one's come next.
                if let Some(next) = taken.as_mut().and_then(|t| t.try_recv().ok()) {
                    from = Box::new(next);
                    continue;
                }
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
            if let Some((redirects, handed)) = redirects.as_mut() {
                if redirects.has_changed().unwrap_or(false) {
                    redirects.mark_unchanged();
                    to = redirected(shared, to, handed, upstream_fd).await?;
                }
            }
            to.write_all(&chunk).await.map_err(|_| End::Failed)?;
        }
        shared.while_frozen(id).await;
        // A FIN for a FIN, so half-closes behave as without the proxy; the
        // peer may already be gone, which is no error worth reporting.
        let _ = to.shutdown().await;
        Ok(())
    };
    let ended = tokio::try_join!(read, write).map(|((), ())| ());
    if ended.is_err() {
        // The other direction still holds the upstream socket: it closes with a RST.
        zero_linger(upstream_fd.load(Ordering::SeqCst));
    }
    ended
}

/// Moves a connection's requests to the upstream server of the moment: opens a connection to
/// it, hands its reading half to the replies' reader, and ends the old one's requests (a FIN:
/// the old server answers what it got, then closes, which tells the reader to go on with
/// the new one). Returns the new writing half.
async fn redirected<'a>(
    shared: &Shared,
    mut old: Sink<'a>,
    handed: &mpsc::UnboundedSender<OwnedReadHalf>,
    upstream_fd: &AtomicI32,
) -> Result<Sink<'a>, End> {
    let upstream = connect(shared).await.map_err(|_| End::Failed)?;
    upstream_fd.store(upstream.as_raw_fd(), Ordering::SeqCst);
    let (read, write) = upstream.into_split();
    handed.send(read).map_err(|_| End::Failed)?;
    let _ = old.shutdown().await;
    Ok(Box::new(write))
}

/// Makes the socket `fd` close with a RST (instead of a FIN) when it is closed.
fn zero_linger(fd: RawFd) {
    // tokio's `set_linger` is deprecated and `set_zero_linger` needs a newer
    // tokio than the workspace asks for, hence the raw setsockopt.
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: the callers pass the fd of a socket still open, and the option value is a
    // valid `linger` of the size passed.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            std::ptr::from_ref(&linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Closes `stream` with a RST instead of a FIN, discarding unsent data.
fn abort(stream: TcpStream) {
    zero_linger(stream.as_raw_fd());
    drop(stream);
}
