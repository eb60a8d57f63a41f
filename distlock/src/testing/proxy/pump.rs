//! The proxy thread's side: the accept loop, and per connection the relay of
//! both directions chunk by chunk, with the faults applied, until it ends.

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
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
