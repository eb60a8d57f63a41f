//! The acquisition lanes' connection to a single node: one TCP connection that the calling
//! tasks write to and read from themselves.
//!
//! redis-rs's `MultiplexedConnection` (inside `ConnectionManager`) runs a driver task that
//! owns the socket: every request is handed to it through a channel and every answer handed
//! back, so each round trip wakes two tasks, often on two threads. On loopback that hand-off
//! costs about as much as the network (PING p50 47 µs through it, 32 µs on the bare socket,
//! on the bench's VM), and an uncontended lock cycle is two round trips. Here a caller
//! queues its request and writes it itself, together with whatever other callers queued
//! meanwhile (one write for many requests under load), and a caller that finds no one
//! reading reads the answers itself, handing each to its caller in the order the requests
//! went out (Redis answers in order). A lone caller writes its request and reads its own
//! answer: no hand-off at all.
//!
//! Cancellation: every byte to write and every byte read lives in the connection, not in
//! a caller's future. A caller dropped while it writes leaves the rest of the queued bytes
//! to a task of their own, one dropped while it reads leaves the reading to one, and the
//! answer of a caller that is gone (dropped, timed out) is read and discarded in its turn,
//! as in `MultiplexedConnection`. A connection that fails (reset, closed, bytes that are not
//! RESP) fails every caller waiting on it with an I/O error and is opened again by the next
//! request. A timeout leaves the connection as it is: its answer still comes, in order.
//!
//! Only the acquisition lanes use it: they carry commands only (no subscriptions), over plain
//! TCP. The subscriptions' connection, `rediss://`, Unix sockets, Cluster and Sentinel stay
//! on redis-rs's connections.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisError, RedisFuture, Value};
use tokio::io::AsyncReadExt;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// A connection that opens (and after a failure, reopens) itself on use; cheap to clone.
#[derive(Clone)]
pub(crate) struct Link {
    shared: Arc<Shared>,
}

struct Shared {
    host: String,
    port: u16,
    info: ConnectionInfo,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// The open connection; `None` until the first use, and after a failure.
    current: Mutex<Option<Arc<Wire>>>,
    /// Held while a connection is being opened, so concurrent callers open one, not several.
    opening: tokio::sync::Mutex<()>,
    /// Called whenever a connection is opened after the first: the old one failed.
    reopened: Option<Arc<dyn Fn() + Send + Sync>>,
    /// Set once a connection was opened.
    opened_once: AtomicBool,
}

/// One TCP connection.
struct Wire {
    /// Written by the one caller that flushes (`Waiting::flushing`).
    writer: OwnedWriteHalf,
    /// Used by the one reading (`Waiting::reading`).
    reader: Arc<tokio::sync::Mutex<Reader>>,
    waiting: Mutex<Waiting>,
    /// Set when the connection failed: the next request opens a new one.
    broken: AtomicBool,
    /// Advanced every quarter of the response timeout by the connection's clock task
    /// (`tick`): a request still unanswered 5 ticks after it was queued (between 1 and 1.25
    /// response timeouts) is answered with a timeout. One timer per connection rather than
    /// one per request: a timer armed and disarmed per request cost the client about 7 %
    /// of its instructions per lock cycle (callgrind, S2's shape).
    tick: std::sync::atomic::AtomicU64,
}

struct Reader {
    half: OwnedReadHalf,
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start.
    start: usize,
    /// The answers parsed from one read, and the callers they complete (kept for their
    /// allocations).
    values: Vec<Value>,
    done: Vec<Expected>,
}

#[derive(Default)]
struct Waiting {
    /// Callers whose answers have not been read yet, in the order of their requests.
    queue: VecDeque<Expected>,
    /// Requests not yet written, in the same order. Many callers' requests go out in one
    /// write when they come together: the server then reads them in one go and answers them
    /// in one write too, which is most of what it costs per request.
    out: Vec<u8>,
    /// Set while a caller writes `out`; the others leave their requests to it.
    flushing: bool,
    /// The buffer the last write used, kept for its allocation.
    spare: Vec<u8>,
    /// Set while someone reads answers: a caller that found no one reading reads its own
    /// (no hand-off between tasks), and if others still wait when it has it, a task of
    /// the connection's own reads on for them until none waits (see `Reading`).
    reading: bool,
    /// Why the connection failed, once it did: later callers fail at once.
    failed: Option<io::ErrorKind>,
}

/// The answers one request expects: one for a command, one per command for a pipeline.
struct Expected {
    count: usize,
    got: Vec<Value>,
    /// `None` once the caller was told it timed out: its answers are read and dropped.
    answer: Option<oneshot::Sender<Answer>>,
    /// The connection's tick when the request was queued (see `Wire::tick`).
    queued_at: u64,
}

type Answer = Result<Vec<Value>, io::ErrorKind>;

impl Link {
    /// A link to the node at `info`, or `None` if this module does not speak its transport
    /// (TLS, Unix sockets): the caller keeps redis-rs's connection for those.
    pub(crate) fn new(
        info: &ConnectionInfo,
        connect_timeout: Duration,
        response_timeout: Duration,
        reopened: Option<Arc<dyn Fn() + Send + Sync>>,
    ) -> Option<Link> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        Some(Link {
            shared: Arc::new(Shared {
                host: host.clone(),
                port: *port,
                info: info.clone(),
                connect_timeout,
                response_timeout,
                current: Mutex::new(None),
                opening: tokio::sync::Mutex::new(()),
                reopened,
                opened_once: AtomicBool::new(false),
            }),
        })
    }

    /// Opens the connection now (it would open on first use otherwise): a node that does not
    /// answer is reported when the client connects.
    pub(crate) async fn open(&self) -> redis::RedisResult<()> {
        self.wire().await.map(drop)
    }

    /// Sends `bytes` (`count` commands) and returns their `count` answers.
    async fn call(&self, bytes: &[u8], count: usize) -> redis::RedisResult<Vec<Value>> {
        let wire = self.wire().await?;
        let answer = wire.send(bytes, count).map_err(|kind| self.failure(kind))?;
        wire.receive(answer)
            .await
            .map_err(|kind| self.failure(kind))
    }

    /// The error a caller gets for a failed request.
    fn failure(&self, kind: io::ErrorKind) -> RedisError {
        if kind == io::ErrorKind::TimedOut {
            return io::Error::new(
                kind,
                format!("no answer within {:?}", self.shared.response_timeout),
            )
            .into();
        }
        failure(kind)
    }

    /// The open connection, opened first if there is none.
    async fn wire(&self) -> redis::RedisResult<Arc<Wire>> {
        if let Some(wire) = self.usable() {
            return Ok(wire);
        }
        let _opening = self.shared.opening.lock().await;
        if let Some(wire) = self.usable() {
            return Ok(wire);
        }
        let shared = &self.shared;
        let wire = match tokio::time::timeout(shared.connect_timeout, shared.open()).await {
            Ok(opened) => opened?,
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection within {:?}", shared.connect_timeout),
                )
                .into())
            }
        };
        if shared.opened_once.swap(true, Ordering::AcqRel) {
            if let Some(reopened) = &shared.reopened {
                reopened();
            }
        }
        *lock(&shared.current) = Some(wire.clone());
        Ok(wire)
    }

    /// The open connection, unless it failed.
    fn usable(&self) -> Option<Arc<Wire>> {
        lock(&self.shared.current)
            .as_ref()
            .filter(|wire| !wire.broken.load(Ordering::Acquire))
            .cloned()
    }
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut values = self.call(&cmd.get_packed_command(), 1).await?;
            Ok(values.pop().unwrap_or(Value::Nil))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let sent = pipeline.len() + if pipeline.is_transaction() { 2 } else { 0 };
            let mut values = self.call(&pipeline.get_packed_pipeline(), sent).await?;
            if pipeline.is_transaction() {
                // MULTI, QUEUED.., then EXEC's array of the answers.
                return match values.pop() {
                    Some(Value::Array(answers)) => Ok(answers),
                    Some(other) => other.extract_error().map(|v| vec![v]),
                    None => Ok(Vec::new()),
                };
            }
            Ok(values.into_iter().skip(offset).take(count).collect())
        })
    }

    fn get_db(&self) -> i64 {
        self.shared.info.redis_settings().db()
    }
}

impl Shared {
    /// Connects and says hello: RESP3 (the answers then look exactly like those of the
    /// client's other connections), the credentials, the database.
    async fn open(&self) -> redis::RedisResult<Arc<Wire>> {
        let stream = TcpStream::connect((self.host.as_str(), self.port)).await?;
        stream.set_nodelay(true)?;
        let (half, writer) = stream.into_split();
        let wire = Arc::new(Wire {
            writer,
            reader: Arc::new(tokio::sync::Mutex::new(Reader {
                half,
                buf: Vec::with_capacity(READ_SIZE),
                start: 0,
                values: Vec::new(),
                done: Vec::new(),
            })),
            waiting: Mutex::new(Waiting::default()),
            broken: AtomicBool::new(false),
            tick: std::sync::atomic::AtomicU64::new(0),
        });
        tokio::spawn(tick(Arc::downgrade(&wire), self.response_timeout / 4));
        let settings = self.info.redis_settings();
        let mut hello = redis::cmd("HELLO");
        hello.arg(3);
        if let Some(password) = settings.password() {
            hello
                .arg("AUTH")
                .arg(settings.username().unwrap_or("default"))
                .arg(password);
        }
        let mut commands = vec![hello];
        if settings.db() != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(settings.db());
            commands.push(select);
        }
        for command in commands {
            let answer = wire.send(&command.get_packed_command(), 1);
            let mut values = wire
                .receive(answer.map_err(failure)?)
                .await
                .map_err(failure)?;
            values.pop().unwrap_or(Value::Nil).extract_error()?;
        }
        Ok(wire)
    }
}

impl Wire {
    /// Queues a request and its caller, for `count` answers. The request is written by
    /// [`receive`](Self::receive), or by whoever is writing already.
    fn send(&self, bytes: &[u8], count: usize) -> Result<Sending, io::ErrorKind> {
        let mut waiting = lock(&self.waiting);
        if let Some(kind) = waiting.failed {
            return Err(kind);
        }
        let (answer, receiver) = oneshot::channel();
        // One lock for both: the queue's order is the order the requests reach the server,
        // and so the order of their answers.
        waiting.queue.push_back(Expected {
            count,
            got: Vec::new(),
            answer: Some(answer),
            queued_at: self.tick.load(Ordering::Relaxed),
        });
        waiting.out.extend_from_slice(bytes);
        let flush = !std::mem::replace(&mut waiting.flushing, true);
        let read = !std::mem::replace(&mut waiting.reading, true);
        Ok(Sending {
            receiver,
            flush,
            read,
            // Others wait for answers: more requests are likely on their way.
            busy: waiting.queue.len() > 1,
        })
    }

    /// Writes every queued request, until none is left. Only the caller that set
    /// `flushing` runs this. The bytes are taken out of `out` before they are written, so
    /// that callers on other threads can queue theirs during the write.
    async fn flush(self: &Arc<Self>, busy: bool) {
        let mut flushing = Flushing {
            wire: self,
            taken: Vec::new(),
            written: 0,
            done: false,
        };
        // While others wait for answers, more requests are likely on their way: the tasks
        // ready to run add theirs first, and one write takes them all (at one request per
        // write the server spends twice the time per request). The same after each write,
        // for the requests queued during it.
        let mut pause = busy;
        loop {
            if flushing.written == flushing.taken.len() {
                if pause && !lock(&self.waiting).out.is_empty() {
                    tokio::task::yield_now().await;
                }
                pause = true;
                let mut waiting = lock(&self.waiting);
                let mut spent = std::mem::take(&mut flushing.taken);
                spent.clear();
                if waiting.out.is_empty() || waiting.failed.is_some() {
                    waiting.flushing = false;
                    waiting.spare = spent;
                    flushing.done = true;
                    return;
                }
                let spare = std::mem::take(&mut waiting.spare);
                let spare = if spare.capacity() >= spent.capacity() {
                    spare
                } else {
                    spent
                };
                flushing.taken = std::mem::replace(&mut waiting.out, spare);
                flushing.written = 0;
            }
            match self.writer.try_write(&flushing.taken[flushing.written..]) {
                Ok(n) => {
                    flushing.written += n;
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    flushing.done = true;
                    self.fail(e.kind());
                    return;
                }
            }
            // The socket's buffer is full: wait until it takes more. If this caller is
            // dropped here, `Flushing` puts the bytes back.
            if let Err(e) = self.writer.writable().await {
                flushing.done = true;
                self.fail(e.kind());
                return;
            }
        }
    }

    /// Waits for the answers `sending` stands for, writing them first if it is this
    /// caller's turn to, and reading them (and those of the callers before it) itself if no
    /// one else is reading.
    async fn receive(self: &Arc<Self>, sending: Sending) -> Answer {
        let Sending {
            receiver: mut answer,
            flush,
            read,
            busy,
        } = sending;
        // Taken before the first await: this caller has the reading role from `send` on, and
        // if it leaves at any point (its answer, a timeout, dropped while it writes or waits
        // for the read lock), `Reading` passes the role on.
        // Made only for the caller that has the role: a `Reading` made and dropped by any
        // other (as `bool::then_some` would, its argument being built either way) passes on
        // a role it never had, one reading task per request.
        let mut reading = if read {
            Some(Reading {
                wire: self,
                reader: None,
            })
        } else {
            None
        };
        if flush {
            // Raced with the answer: a timeout (the socket's buffer stays full) ends it, and
            // `Flushing` leaves the rest of the writing to a task of its own.
            tokio::select! {
                biased;
                got = &mut answer => return got.unwrap_or(Err(io::ErrorKind::ConnectionAborted)),
                () = self.flush(busy) => {}
            }
        }
        let Some(reading) = reading.as_mut() else {
            return answer
                .await
                .unwrap_or(Err(io::ErrorKind::ConnectionAborted));
        };
        let reader = tokio::select! {
            biased;
            got = &mut answer => return got.unwrap_or(Err(io::ErrorKind::ConnectionAborted)),
            reader = self.reader.clone().lock_owned() => reader,
        };
        let reader = reading.reader.insert(reader);
        loop {
            if let Err(kind) = self.hand_out(reader) {
                self.fail(kind);
            }
            match answer.try_recv() {
                Ok(got) => return got,
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(io::ErrorKind::ConnectionAborted)
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            // Raced with the answer, which a timeout may give while no byte comes.
            let filled = tokio::select! {
                biased;
                got = &mut answer => return got.unwrap_or(Err(io::ErrorKind::ConnectionAborted)),
                filled = reader.fill() => filled,
            };
            if let Err(kind) = filled {
                self.fail(kind);
            }
        }
    }

    /// Reads for the callers still waiting, until none is; `reader` is the read lock if the
    /// caller that passed the role on held it already.
    async fn read_on(self: Arc<Self>, reader: Option<OwnedReader>) {
        let mut reader = match reader {
            Some(reader) => reader,
            None => self.reader.clone().lock_owned().await,
        };
        loop {
            if let Err(kind) = self.hand_out(&mut reader) {
                self.fail(kind);
            }
            {
                let mut waiting = lock(&self.waiting);
                if waiting.queue.is_empty() {
                    waiting.reading = false;
                    return;
                }
            }
            if let Err(kind) = reader.fill().await {
                self.fail(kind);
            }
        }
    }

    /// Hands every complete answer in the buffer to its caller.
    fn hand_out(&self, reader: &mut Reader) -> Result<(), io::ErrorKind> {
        while let Some(len) = frame_len(&reader.buf[reader.start..])? {
            let frame = &reader.buf[reader.start..reader.start + len];
            let value = parse(frame).map_err(|_| io::ErrorKind::InvalidData)?;
            reader.start += len;
            reader.values.push(value);
        }
        if reader.values.is_empty() {
            return Ok(());
        }
        // One lock for all the answers one read brought: callers on other threads queue
        // their requests under the same lock.
        {
            let mut waiting = lock(&self.waiting);
            for value in reader.values.drain(..) {
                let Some(front) = waiting.queue.front_mut() else {
                    // An answer nobody asked for: the stream is not what we think it is.
                    return Err(io::ErrorKind::InvalidData);
                };
                front.got.push(value);
                if front.got.len() == front.count {
                    reader
                        .done
                        .push(waiting.queue.pop_front().expect("front exists"));
                }
            }
        }
        for done in reader.done.drain(..) {
            // The caller may be gone (dropped, timed out): its answer is dropped here.
            if let Some(answer) = done.answer {
                let _ = answer.send(Ok(done.got));
            }
        }
        Ok(())
    }

    /// Fails the connection: every queued caller and every later one gets `kind`.
    fn fail(&self, kind: io::ErrorKind) {
        let queue = {
            let mut waiting = lock(&self.waiting);
            waiting.failed.get_or_insert(kind);
            self.broken.store(true, Ordering::Release);
            waiting.out.clear();
            std::mem::take(&mut waiting.queue)
        };
        for answer in queue.into_iter().filter_map(|expected| expected.answer) {
            let _ = answer.send(Err(kind));
        }
    }
}

/// The connection's clock (see `Wire::tick`): answers the requests that waited too long
/// with a timeout, leaving them queued, so that their answers, should they come, are read
/// and dropped in their turn. Ends with the connection.
async fn tick(wire: std::sync::Weak<Wire>, period: Duration) {
    let period = period.max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
        let Some(wire) = wire.upgrade() else {
            return;
        };
        let now = wire.tick.fetch_add(1, Ordering::Relaxed) + 1;
        let mut waiting = lock(&wire.waiting);
        for expected in waiting.queue.iter_mut() {
            if expected.queued_at + 5 > now {
                break;
            }
            if let Some(answer) = expected.answer.take() {
                let _ = answer.send(Err(io::ErrorKind::TimedOut));
            }
        }
    }
}

/// A request queued by [`Wire::send`].
struct Sending {
    receiver: oneshot::Receiver<Answer>,
    /// This caller writes the queued requests (no one else is).
    flush: bool,
    /// This caller reads the answers (no one else is).
    read: bool,
    busy: bool,
}

type OwnedReader = tokio::sync::OwnedMutexGuard<Reader>;

/// The reading caller's role, and the read lock once it has it. When it leaves (with its
/// answer, a timeout, or dropped), the answers still awaited are read on by a task of their
/// own, or no one reads until the next request.
struct Reading<'a> {
    wire: &'a Arc<Wire>,
    reader: Option<OwnedReader>,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        let reader = self.reader.take();
        {
            let mut waiting = lock(&self.wire.waiting);
            if waiting.queue.is_empty() {
                waiting.reading = false;
                return;
            }
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(self.wire.clone().read_on(reader))),
            // No runtime left to read on (it is shutting down): the waiting callers fail
            // with it.
            Err(_) => lock(&self.wire.waiting).reading = false,
        }
    }
}

/// The writing caller. If it is dropped before it is done (a cancelled caller, or a timeout
/// around it), the requests it had still to write are left to a task of their own: other
/// callers wait for their answers.
struct Flushing<'a> {
    wire: &'a Arc<Wire>,
    /// Bytes taken out of `out`, written up to `written`.
    taken: Vec<u8>,
    written: usize,
    done: bool,
}

impl Drop for Flushing<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut waiting = lock(&self.wire.waiting);
        if waiting.failed.is_some() {
            waiting.flushing = false;
            return;
        }
        // Back in front of what was queued since: still the order of the queue.
        let mut out = self.taken.split_off(self.written);
        out.extend_from_slice(&waiting.out);
        waiting.out = out;
        if waiting.out.is_empty() {
            waiting.flushing = false;
            return;
        }
        drop(waiting);
        let wire = self.wire.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(async move { wire.flush(false).await })),
            Err(_) => lock(&self.wire.waiting).flushing = false,
        }
    }
}

/// Bytes asked of the socket per read: many answers at once when many callers wait.
const READ_SIZE: usize = 16 * 1024;

impl Reader {
    /// Reads more bytes from the socket; the end of the stream is an error.
    async fn fill(&mut self) -> Result<(), io::ErrorKind> {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.buf.capacity() - self.buf.len() < READ_SIZE / 4 {
            // Keep only the unread part (an answer that came in pieces).
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.reserve(READ_SIZE / 4);
        match self.half.read_buf(&mut self.buf).await {
            Ok(0) => Err(io::ErrorKind::UnexpectedEof),
            Ok(_) => Ok(()),
            Err(e) => Err(e.kind()),
        }
    }
}

/// The length of the first complete RESP2/RESP3 frame in `buf`, `None` while it is
/// incomplete, an error for bytes that are no frame.
pub(crate) fn frame_len(buf: &[u8]) -> Result<Option<usize>, io::ErrorKind> {
    let mut pos = 0usize;
    // Frames still to skip: an aggregate's header adds its elements.
    let mut left: u64 = 1;
    while left > 0 {
        left -= 1;
        let Some(kind) = buf.get(pos).copied() else {
            return Ok(None);
        };
        let Some(end) = find_crlf(buf, pos + 1) else {
            return Ok(None);
        };
        let head = &buf[pos + 1..end];
        pos = end + 2;
        match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => {}
            b'$' | b'!' | b'=' => {
                if let Some(len) = length(head)? {
                    pos = pos.saturating_add(len).saturating_add(2);
                    if pos > buf.len() {
                        return Ok(None);
                    }
                }
            }
            // Saturating: a header claiming more elements than fit in memory leaves the
            // frame incomplete for ever, which the response timeout ends.
            b'*' | b'~' | b'>' => left = left.saturating_add(elements(head, 1)?),
            b'%' => left = left.saturating_add(elements(head, 2)?),
            // Attributes come before the value they describe.
            b'|' => left = left.saturating_add(elements(head, 2)?).saturating_add(1),
            _ => return Err(io::ErrorKind::InvalidData),
        }
    }
    Ok(Some(pos))
}

/// The frames an aggregate header announces: `per` for each of its elements.
fn elements(head: &[u8], per: u64) -> Result<u64, io::ErrorKind> {
    Ok((length(head)?.unwrap_or(0) as u64).saturating_mul(per))
}

/// A header's length: `None` for -1 (a RESP2 null), an error for anything but a number.
fn length(head: &[u8]) -> Result<Option<usize>, io::ErrorKind> {
    if head == b"-1" {
        return Ok(None);
    }
    std::str::from_utf8(head)
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .map(Some)
        .ok_or(io::ErrorKind::InvalidData)
}

fn find_crlf(buf: &[u8], from: usize) -> Option<usize> {
    let rest = buf.get(from..)?;
    rest.windows(2).position(|w| w == b"\r\n").map(|i| from + i)
}

/// Parses one complete frame: the common shapes here, the rest by redis-rs's parser, so
/// that every answer is the same `Value` the client's other connections produce.
pub(crate) fn parse(frame: &[u8]) -> redis::RedisResult<Value> {
    match parse_common(frame) {
        Some((value, _)) => Ok(value),
        None => redis::parse_redis_value(frame),
    }
}

/// The value at the start of `buf` and its length, for simple strings, integers, bulk
/// strings, nulls and arrays of them; `None` for anything else.
fn parse_common(buf: &[u8]) -> Option<(Value, usize)> {
    let end = find_crlf(buf, 1)?;
    let head = &buf[1..end];
    let after = end + 2;
    match buf[0] {
        b'+' if head == b"OK" => Some((Value::Okay, after)),
        b'+' => Some((
            Value::SimpleString(std::str::from_utf8(head).ok()?.to_owned()),
            after,
        )),
        b':' => Some((
            Value::Int(std::str::from_utf8(head).ok()?.parse().ok()?),
            after,
        )),
        b'_' => Some((Value::Nil, after)),
        b'$' => match length(head).ok()? {
            None => Some((Value::Nil, after)),
            Some(len) => {
                let data = buf.get(after..after + len)?;
                Some((Value::BulkString(data.to_vec()), after + len + 2))
            }
        },
        b'*' => match length(head).ok()? {
            None => Some((Value::Nil, after)),
            Some(n) => {
                let mut items = Vec::with_capacity(n.min(1024));
                let mut pos = after;
                for _ in 0..n {
                    let (item, len) = parse_common(buf.get(pos..)?)?;
                    items.push(item);
                    pos += len;
                }
                Some((Value::Array(items), pos))
            }
        },
        _ => None,
    }
}

/// The error a failed connection gives its callers: an I/O error, which the acquire loop
/// treats as transient (retried, the attempt possibly taken).
fn failure(kind: io::ErrorKind) -> RedisError {
    io::Error::new(kind, "the connection to Redis failed").into()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_measured_whole_or_not_at_all() {
        let frames: &[&[u8]] = &[
            b"+OK\r\n",
            b":42\r\n",
            b"$-1\r\n",
            b"_\r\n",
            b"$5\r\nhe\r\no\r\n",
            b"*2\r\n:1\r\n$-1\r\n",
            b"*-1\r\n",
            b"%1\r\n+a\r\n*1\r\n:2\r\n",
            b"-ERR no\r\n",
            b"|1\r\n+k\r\n+v\r\n:7\r\n",
        ];
        for frame in frames {
            let mut twice = frame.to_vec();
            twice.extend_from_slice(frame);
            assert_eq!(frame_len(&twice), Ok(Some(frame.len())), "{frame:?}");
            for cut in 0..frame.len() {
                assert_eq!(frame_len(&frame[..cut]), Ok(None), "{frame:?} cut at {cut}");
            }
            // The fast parser gives what redis-rs's parser gives.
            let ours = parse(frame);
            let theirs = redis::parse_redis_value(frame);
            assert_eq!(format!("{ours:?}"), format!("{theirs:?}"), "{frame:?}");
        }
        assert_eq!(frame_len(b"?x\r\n"), Err(io::ErrorKind::InvalidData));
        assert_eq!(frame_len(b"$x\r\n"), Err(io::ErrorKind::InvalidData));
    }
}
