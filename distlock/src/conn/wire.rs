//! One TCP connection of a [`Link`](super::Link), on which the calling tasks write their
//! requests and read the answers themselves.
//!
//! No task owns a role across an `.await`: every byte to write and every byte read lives in
//! the connection, behind locks held only between two awaits. A caller queues its request
//! (the queue's order is the order of the bytes, and so of the answers), writes what is queued
//! with `try_write`, reads what has arrived with `try_read`, hands each answer to its caller
//! in the order the requests went out, and waits for its own answer, the socket becoming
//! readable, or (while its own bytes are not all written) writable. Whoever is polled makes
//! progress for all: a caller polled once and then kept unpolled (a `select!` branch, a
//! future parked in a struct) holds nothing up, and one that is dropped leaves its answer to
//! be read and discarded in its turn. A lone caller writes its request and reads its own
//! answer: no task hand-off. Under load the requests of several callers go out in one write:
//! a caller that finds others waiting yields once before writing, so that the tasks ready to
//! run add theirs, unless [`WRITE_AT`] requests already wait to be written: those go at once,
//! so the server works on them while the rest of the wave is being prepared. The
//! connection's clock task (`tick`) writes and reads too, so even a connection whose callers
//! are all parked moves on.
//!
//! Push frames (RESP3 `>`) never answer a request: they go to the connection's push sink, or
//! nowhere. The one exception is the confirmation a `SUBSCRIBE`/`UNSUBSCRIBE` waits for, which
//! RESP3 sends as a push. Attributes (`|`) describe the reply they precede: the reply is the
//! answer. Anything else unexpected (bytes that are no frame, an answer nobody asked for, a
//! closed socket) fails the connection: every waiting caller gets an error, at once.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::FutureExt;
use redis::io::tcp::socket2::SockRef;
use redis::{PushInfo, PushKind, Value};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use super::read::read_into;
use super::resp::Decoder;
use crate::sync::lock;

/// Where a connection's push frames go (and its disconnection, once it was open).
pub(crate) type PushSink = Arc<dyn Fn(PushInfo) + Send + Sync>;

/// A request unanswered this many ticks after it was queued (between 1 and 1.25 response
/// timeouts) is answered with a timeout.
const TIMEOUT_TICKS: u64 = 5;
/// Reads one call makes at most before it lets others run.
const READS_PER_CALL: usize = 16;
/// A caller that finds this many requests waiting to be written (its own included) writes
/// them at once instead of yielding for more. Gathering a whole wave (every task that an
/// answer woke) into one write leaves the server idle while the client prepares the wave and
/// the client idle while the server answers it; one request per write doubles the server's
/// cost per request. A few per write keep both busy (the bench's S2: `examples/bench/RESULTS.md`).
const WRITE_AT: usize = 4;

pub(crate) type Answer = Result<Vec<Value>, io::ErrorKind>;

pub(crate) struct Wire {
    stream: TcpStream,
    /// The bytes read and not decoded yet, the frame being decoded, and the buffers a read
    /// hands its answers out with.
    reader: Mutex<Reader>,
    /// The bytes being written (taken from `Waiting::out`), written up to `at`.
    writer: Mutex<Outgoing>,
    waiting: Mutex<Waiting>,
    /// Set when the connection failed: the link opens a new one.
    broken: AtomicBool,
    /// Set once the connection said hello: a failure from then on is a disconnection.
    ready: AtomicBool,
    /// Requests answered so far (answers complete in queue order).
    answered: AtomicU64,
    /// Bytes written so far.
    written: AtomicU64,
    /// Reads that brought bytes so far, and the tick of the last one.
    reads: AtomicU64,
    last_read: AtomicU64,
    /// Advanced every quarter of the response timeout by the clock task (`tick`). One timer
    /// per connection rather than one per request: a timer armed and disarmed per request
    /// was a visible share of the client's work per lock cycle (callgrind, S2's shape).
    tick: AtomicU64,
    sink: Option<PushSink>,
}

/// A read's state, under one lock. The buffers are emptied by every read and kept, so that
/// handing out answers allocates nothing for them.
#[derive(Default)]
struct Reader {
    decoder: Decoder,
    /// The frames decoded, before they are handed out.
    frames: Vec<Value>,
    /// The answers matched to their callers, sent once the queue's lock is released.
    done: Vec<(oneshot::Sender<Answer>, Answer)>,
}

#[derive(Default)]
struct Outgoing {
    bytes: Vec<u8>,
    at: usize,
}

#[derive(Default)]
struct Waiting {
    /// Callers whose answers have not all been read yet, in the order of their requests.
    queue: VecDeque<Expected>,
    /// Requests not yet taken by a writer, in the same order. Many callers' requests go out
    /// in one write when they come together: the server then reads them in one go and
    /// answers them in one write too, which is most of what it costs per request.
    out: Vec<u8>,
    /// Bytes queued so far: a request is written once `Wire::written` reaches its end.
    queued: u64,
    /// Requests queued so far.
    sequence: u64,
    /// Requests in `out`.
    unwritten: usize,
    /// Why the connection failed, once it did: later callers fail at once.
    failed: Option<io::ErrorKind>,
}

/// What a request waits for.
struct Expected {
    /// Answers: one for a command, one per command for a pipeline.
    count: usize,
    got: Vec<Value>,
    /// `None` once the caller timed out, or for a request nobody waits for: its answers are
    /// read and dropped in their turn.
    answer: Option<oneshot::Sender<Answer>>,
    /// The tick and the reads when the request was queued, and where its bytes end in the
    /// stream.
    queued_at: u64,
    reads_at: u64,
    end: u64,
    /// A `SUBSCRIBE`/`UNSUBSCRIBE`: answered by the push confirming it (or by an error).
    confirm: Option<Confirm>,
}

/// The push that confirms a subscription change: its kind, and the channel it names.
#[derive(Clone)]
pub(crate) struct Confirm {
    pub(crate) kind: PushKind,
    pub(crate) channel: Vec<u8>,
}

impl Confirm {
    fn confirms(&self, kind: &PushKind, data: &[Value]) -> bool {
        *kind == self.kind
            && matches!(data.first(), Some(Value::BulkString(c)) if *c == self.channel)
    }
}

impl Wire {
    pub(crate) fn new(stream: TcpStream, sink: Option<PushSink>) -> Wire {
        Wire {
            stream,
            reader: Mutex::new(Reader::default()),
            writer: Mutex::new(Outgoing::default()),
            waiting: Mutex::new(Waiting::default()),
            broken: AtomicBool::new(false),
            ready: AtomicBool::new(false),
            answered: AtomicU64::new(0),
            written: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            last_read: AtomicU64::new(0),
            tick: AtomicU64::new(0),
            sink,
        }
    }

    pub(crate) fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// Marks the handshake done: from now on a failure is reported to the sink.
    pub(crate) fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
    }

    /// Sends `bytes` (`count` commands, or one subscription change `confirm` names) and
    /// returns their answers.
    pub(crate) async fn request(
        self: &Arc<Self>,
        bytes: &[u8],
        count: usize,
        confirm: Option<Confirm>,
    ) -> Answer {
        self.request_with(|out| out.extend_from_slice(bytes), count, confirm)
            .await
    }

    /// [`request`](Self::request) with the bytes that `write` appends: a command packed
    /// straight into the bytes waiting to be written is not packed into a buffer of its own
    /// first, then copied.
    pub(crate) async fn request_with(
        self: &Arc<Self>,
        write: impl FnOnce(&mut Vec<u8>),
        count: usize,
        confirm: Option<Confirm>,
    ) -> Answer {
        let (mut answer, sequence, end, gather) = self.enqueue(write, count, confirm, true)?;
        let answer = answer.as_mut().expect("a receiver was asked for");
        let _unwritten = Unwritten { wire: self, end };
        if gather {
            // Others wait for answers: more requests are likely on their way, and one write
            // takes several (at one request per write the server spends twice the time per
            // request).
            tokio::task::yield_now().await;
        }
        loop {
            if self.written.load(Ordering::Acquire) < end {
                if let Err(kind) = self.flush() {
                    self.fail(kind);
                }
            }
            // Handing out this caller's own answer (what the read below most often brings) would
            // wake the waker the last wait left: this task, polled again for nothing (through the
            // runtime's queue, waking an idle worker). A no-op waker takes its place until then.
            if let Poll::Ready(got) = answer.poll_unpin(&mut Context::from_waker(Waker::noop())) {
                return got.unwrap_or(Err(io::ErrorKind::ConnectionAborted));
            }
            if let Err(kind) = self.read(Some(sequence)) {
                self.fail(kind);
            }
            match answer.try_recv() {
                Ok(got) => return got,
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(io::ErrorKind::ConnectionAborted)
                }
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            let write = self.written.load(Ordering::Acquire) < end;
            tokio::select! {
                biased;
                got = &mut *answer => return got.unwrap_or(Err(io::ErrorKind::ConnectionAborted)),
                ready = self.stream.readable() => {
                    if let Err(e) = ready {
                        self.fail(e.kind());
                    }
                }
                ready = self.stream.writable(), if write => {
                    if let Err(e) = ready {
                        self.fail(e.kind());
                    }
                }
            }
        }
    }

    /// Queues commands nobody waits for (a subscription change each, or with no `confirm`,
    /// one answer each: read and dropped), and writes what the socket takes now; the rest
    /// goes with the next request, or at the next tick.
    pub(crate) fn send_unanswered(&self, requests: impl IntoIterator<Item = (Vec<u8>, Confirm)>) {
        for (bytes, confirm) in requests {
            let write = |out: &mut Vec<u8>| out.extend_from_slice(&bytes);
            if self.enqueue(write, 1, Some(confirm), false).is_err() {
                return;
            }
        }
        if let Err(kind) = self.flush() {
            self.fail(kind);
        }
    }

    /// Sends a `PING` nobody waits for: only its answer's arrival (or absence) counts.
    fn ping(&self) {
        let ping = redis::cmd("PING").get_packed_command();
        if self
            .enqueue(|out| out.extend_from_slice(&ping), 1, None, false)
            .is_ok()
        {
            if let Err(kind) = self.flush() {
                self.fail(kind);
            }
        }
    }

    /// Queues a request: its receiver (if asked for), its sequence number, the end of its
    /// bytes in the stream, and whether to wait for more requests before writing (others
    /// wait for answers, and fewer than [`WRITE_AT`] requests wait to be written).
    #[allow(clippy::type_complexity)]
    fn enqueue(
        &self,
        write: impl FnOnce(&mut Vec<u8>),
        count: usize,
        confirm: Option<Confirm>,
        answered: bool,
    ) -> Result<(Option<oneshot::Receiver<Answer>>, u64, u64, bool), io::ErrorKind> {
        let mut waiting = lock(&self.waiting);
        if let Some(kind) = waiting.failed {
            return Err(kind);
        }
        let (sender, receiver) = match answered {
            true => {
                let (sender, receiver) = oneshot::channel();
                (Some(sender), Some(receiver))
            }
            false => (None, None),
        };
        // One lock for both: the queue's order is the order the requests reach the server,
        // and so the order of their answers.
        let before = waiting.out.len();
        write(&mut waiting.out);
        waiting.unwritten += 1;
        waiting.queued += (waiting.out.len() - before) as u64;
        let end = waiting.queued;
        waiting.queue.push_back(Expected {
            count,
            got: Vec::new(),
            answer: sender,
            queued_at: self.tick.load(Ordering::Relaxed),
            reads_at: self.reads.load(Ordering::Relaxed),
            end,
            confirm,
        });
        let sequence = waiting.sequence;
        waiting.sequence += 1;
        let gather = waiting.queue.len() > 1 && waiting.unwritten < WRITE_AT;
        Ok((receiver, sequence, waiting.queued, gather))
    }

    /// Writes what is queued, until it is all written or the socket takes no more.
    fn flush(&self) -> Result<(), io::ErrorKind> {
        let mut writer = lock(&self.writer);
        loop {
            if self.is_broken() {
                return Ok(());
            }
            if writer.at == writer.bytes.len() {
                let mut waiting = lock(&self.waiting);
                if waiting.out.is_empty() {
                    return Ok(());
                }
                // The buffers trade places: both keep their allocations.
                writer.bytes.clear();
                std::mem::swap(&mut writer.bytes, &mut waiting.out);
                waiting.unwritten = 0;
                writer.at = 0;
            }
            let at = writer.at;
            match self.stream.try_write(&writer.bytes[at..]) {
                Ok(n) => {
                    writer.at += n;
                    self.written.fetch_add(n as u64, Ordering::AcqRel);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e.kind()),
            }
        }
    }

    /// Reads what has arrived and hands out the answers in it, until the socket has nothing
    /// more, or (with `until`) that request is answered.
    fn read(&self, until: Option<u64>) -> Result<(), io::ErrorKind> {
        let mut reader = lock(&self.reader);
        let Reader {
            decoder,
            frames,
            done,
        } = &mut *reader;
        for _ in 0..READS_PER_CALL {
            if self.is_broken() {
                return Ok(());
            }
            let decoded = loop {
                match decoder.next() {
                    Ok(Some(frame)) => frames.push(frame),
                    Ok(None) => break Ok(()),
                    Err(_) => break Err(io::ErrorKind::InvalidData),
                }
            };
            // Before any error: the answers decoded so far reach their callers.
            if !frames.is_empty() {
                self.hand_out(frames, done)?;
            }
            decoded?;
            if until.is_some_and(|sequence| self.answered.load(Ordering::Acquire) > sequence) {
                return Ok(());
            }
            match read_into(&self.stream, decoder.buffer()) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof),
                Ok(_) => {
                    self.reads.fetch_add(1, Ordering::AcqRel);
                    self.last_read
                        .store(self.tick.load(Ordering::Relaxed), Ordering::Relaxed);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e.kind()),
            }
        }
        Ok(())
    }

    /// Hands each frame to the request it answers, in order, and each push to the sink. Every
    /// answer matched reaches its caller, even when a later frame is one nobody asked for
    /// (the connection then fails).
    fn hand_out(
        &self,
        frames: &mut Vec<Value>,
        done: &mut Vec<(oneshot::Sender<Answer>, Answer)>,
    ) -> Result<(), io::ErrorKind> {
        let mut pushes = Vec::new();
        let mut unexpected = false;
        {
            // One lock for all the frames of one read: callers on other threads queue their
            // requests under the same lock.
            let mut waiting = lock(&self.waiting);
            for frame in frames.drain(..) {
                match without_attributes(frame) {
                    Value::Push { kind, data } => {
                        let confirms = waiting.queue.front().is_some_and(|front| {
                            front
                                .confirm
                                .as_ref()
                                .is_some_and(|c| c.confirms(&kind, &data))
                        });
                        if confirms {
                            done.extend(self.pop(&mut waiting, Ok(Vec::new())));
                        }
                        pushes.push(PushInfo { kind, data });
                    }
                    answer => {
                        let Some(front) = waiting.queue.front_mut() else {
                            // An answer nobody asked for: the stream is not what we think.
                            unexpected = true;
                            break;
                        };
                        if front.confirm.is_some() {
                            // A subscription change is answered in-band only by an error.
                            done.extend(self.pop(&mut waiting, Ok(vec![answer])));
                        } else {
                            front.got.push(answer);
                            if front.got.len() == front.count {
                                let got = std::mem::take(&mut front.got);
                                done.extend(self.pop(&mut waiting, Ok(got)));
                            }
                        }
                    }
                }
            }
        }
        for (answer, got) in done.drain(..) {
            // The caller may be gone (dropped, timed out): its answer is dropped here.
            let _ = answer.send(got);
        }
        if let Some(sink) = &self.sink {
            for push in pushes {
                sink(push);
            }
        }
        match unexpected {
            true => Err(io::ErrorKind::InvalidData),
            false => Ok(()),
        }
    }

    /// Takes the front request off the queue, answered with `got`.
    fn pop(&self, waiting: &mut Waiting, got: Answer) -> Option<(oneshot::Sender<Answer>, Answer)> {
        let front = waiting.queue.pop_front()?;
        self.answered.fetch_add(1, Ordering::AcqRel);
        front.answer.map(|answer| (answer, got))
    }

    /// Fails the connection: every queued caller and every later one gets `kind`, the socket
    /// is shut down, and the sink hears of the disconnection if the connection was open.
    pub(crate) fn fail(&self, kind: io::ErrorKind) {
        let queue = {
            let mut waiting = lock(&self.waiting);
            if waiting.failed.is_some() {
                return;
            }
            waiting.failed = Some(kind);
            self.broken.store(true, Ordering::Release);
            waiting.out = Vec::new();
            waiting.unwritten = 0;
            std::mem::take(&mut waiting.queue)
        };
        let _ = SockRef::from(&self.stream).shutdown(std::net::Shutdown::Both);
        for answer in queue.into_iter().filter_map(|expected| expected.answer) {
            let _ = answer.send(Err(kind));
        }
        if self.ready.swap(false, Ordering::AcqRel) {
            if let Some(sink) = &self.sink {
                sink(PushInfo {
                    kind: PushKind::Disconnection,
                    data: Vec::new(),
                });
            }
        }
    }

    /// Closes the connection without reporting a disconnection (its link is gone).
    pub(crate) fn close(&self) {
        self.ready.store(false, Ordering::Release);
        self.fail(io::ErrorKind::ConnectionAborted);
    }

    /// Reads the connection's pushes while no caller waits (the connection that carries the
    /// subscriptions), until it fails.
    pub(crate) async fn listen(self: Arc<Self>) {
        while !self.is_broken() {
            if let Err(kind) = self.read(None) {
                self.fail(kind);
                return;
            }
            if let Err(e) = self.stream.readable().await {
                self.fail(e.kind());
            }
        }
    }
}

/// The connection's clock: answers the requests that waited too long with a timeout, leaving
/// them queued, so that their answers, should they come, are read and dropped in their turn;
/// fails the connection when the oldest request timed out with nothing read since it was
/// queued, or still not all written (the peer went silent: a reset would have told), or is
/// unanswered for two timeouts whatever else came, so that neither the requests nor their
/// bytes pile up behind it; writes and reads for callers that
/// are not polled; and, while `ping` says so, sends a `PING` when nothing was read for
/// `ping_after` (a connection that only listens is then found silent too). Ends with the
/// connection.
pub(crate) async fn tick(
    wire: Weak<Wire>,
    period: Duration,
    ping_after: Duration,
    ping: impl Fn() -> bool,
) {
    let period = period.max(Duration::from_millis(1));
    let idle_ticks = (ping_after.as_nanos() / period.as_nanos()).max(1) as u64;
    loop {
        tokio::time::sleep(period).await;
        let Some(wire) = wire.upgrade() else {
            return;
        };
        if wire.is_broken() {
            return;
        }
        let now = wire.tick.fetch_add(1, Ordering::Relaxed) + 1;
        let progress = wire.flush().and_then(|()| wire.read(None));
        if let Err(kind) = progress {
            wire.fail(kind);
            return;
        }
        let silent = {
            let mut waiting = lock(&wire.waiting);
            let reads = wire.reads.load(Ordering::Acquire);
            let written = wire.written.load(Ordering::Acquire);
            // Nothing came since the oldest request went out, or the peer has not even taken
            // its bytes, or (pushes come, answers do not) it is unanswered twice as long as a
            // timeout: every later answer waits behind it, and requests would pile up.
            let silent = waiting.queue.front().is_some_and(|front| {
                let timed_out = front.queued_at + TIMEOUT_TICKS <= now;
                timed_out && (front.reads_at == reads || written < front.end)
                    || front.queued_at + 2 * TIMEOUT_TICKS <= now
            });
            for expected in waiting.queue.iter_mut() {
                if expected.queued_at + TIMEOUT_TICKS > now {
                    break;
                }
                if let Some(answer) = expected.answer.take() {
                    let _ = answer.send(Err(io::ErrorKind::TimedOut));
                }
            }
            silent
        };
        if silent {
            wire.fail(io::ErrorKind::TimedOut);
            return;
        }
        let idle = now.saturating_sub(wire.last_read.load(Ordering::Relaxed)) >= idle_ticks;
        if idle && lock(&wire.waiting).queue.is_empty() && ping() {
            wire.ping();
        }
    }
}

/// A top-level value without the attributes that describe it.
fn without_attributes(mut value: Value) -> Value {
    while let Value::Attribute { data, .. } = value {
        value = *data;
    }
    value
}

/// A caller's request. When the caller leaves (with its answer, a timeout, or dropped) before
/// its bytes were all written, it writes what the socket takes now; the rest goes with the
/// next request, or at the next tick.
struct Unwritten<'a> {
    wire: &'a Wire,
    end: u64,
}

impl Drop for Unwritten<'_> {
    fn drop(&mut self) {
        if self.wire.written.load(Ordering::Acquire) < self.end {
            if let Err(kind) = self.wire.flush() {
                self.wire.fail(kind);
            }
        }
    }
}
