//! The state shared between a [`FaultProxy`](super::FaultProxy) handle and
//! its proxy thread, and the fault decisions taken on it.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::frames::FrameScanner;
pub(super) use crate::sync::lock;

/// Default RNG seed: fixed, so a run without
/// [`FaultProxy::seed`](super::FaultProxy::seed) is as replayable as one with it.
const DEFAULT_SEED: u64 = 0x5EED_D157_10C4_F00D;

/// Which way a chunk goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Direction {
    ToServer,
    ToClient,
}

/// State shared between the handle and the proxy thread.
pub(super) struct Shared {
    /// Where new upstream connections go; `redirects` is bumped when it changes.
    upstream: Mutex<SocketAddr>,
    pub(super) redirects: watch::Sender<u64>,
    /// An `f64` as bits.
    pub(super) drop_probability: AtomicU64,
    pub(super) drop_next: AtomicU64,
    pub(super) blackhole: AtomicBool,
    pub(super) refuse_new: AtomicBool,
    /// `(base, jitter)`.
    pub(super) latency: Mutex<(Duration, Duration)>,
    /// Added to server-to-client chunks only.
    pub(super) reply_latency: Mutex<Duration>,
    pub(super) rng: Mutex<SplitMix64>,
    /// Bumped by `reset_all`; every connection task watches it.
    pub(super) reset_all: watch::Sender<u64>,
    /// Ids of the connections being forwarded; `closed` is signalled when
    /// one leaves, which `reset_all` waits for.
    pub(super) open: Mutex<HashSet<u64>>,
    pub(super) closed: Condvar,
    pub(super) connections: AtomicU64,
    pub(super) replies_dropped: AtomicU64,
    pub(super) resets: AtomicU64,
    /// Client-to-server chunks read; lets tests wait until a write was read
    /// as a chunk of its own.
    pub(super) requests_read: AtomicU64,
    /// Patterns given to `note_sending`; `noting` is set once there is one, so
    /// that connections scan their requests only then.
    pub(super) patterns: Mutex<Vec<Vec<u8>>>,
    pub(super) noting: AtomicBool,
    /// Connections whose client sent one of `patterns`.
    pub(super) noted: Mutex<HashSet<u64>>,
    /// Bumped by `reset_noted`; every connection watches it and resets itself
    /// if noted.
    pub(super) reset_noted: watch::Sender<u64>,
    /// Connections frozen by `freeze`; `freezes` is bumped whenever the set changes, and
    /// frozen pipes wait for it.
    pub(super) frozen: Mutex<HashSet<u64>>,
    pub(super) freezes: watch::Sender<u64>,
    /// Push frames `inject_push` asked for, in order, and the one `push_before_replies` puts
    /// before every reply.
    pub(super) injections: Mutex<std::collections::VecDeque<Vec<u8>>>,
    pub(super) standing_push: Mutex<Option<Vec<u8>>>,
    pub(super) pushes_injected: AtomicU64,
    /// The pattern of `drop_next_reply_containing` (until a chunk with it was dropped) or
    /// `drop_replies_containing` (with its probability).
    pub(super) drop_containing: Mutex<Option<(Vec<u8>, Option<f64>)>>,
}

impl Shared {
    pub(super) fn new(upstream: SocketAddr) -> Self {
        Self {
            upstream: Mutex::new(upstream),
            redirects: watch::Sender::new(0),
            drop_probability: AtomicU64::new(0.0_f64.to_bits()),
            drop_next: AtomicU64::new(0),
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

    /// The upstream server of the moment.
    pub(super) fn upstream(&self) -> SocketAddr {
        *lock(&self.upstream)
    }

    /// Sends every connection's requests from now on to `upstream` (`FaultProxy::redirect`).
    pub(super) fn redirect(&self, upstream: SocketAddr) {
        *lock(&self.upstream) = upstream;
        self.redirects.send_modify(|generation| *generation += 1);
    }

    /// Waits while connection `id` is frozen.
    pub(super) async fn while_frozen(&self, id: u64) {
        let mut freezes = self.freezes.subscribe();
        while lock(&self.frozen).contains(&id) {
            if freezes.changed().await.is_err() {
                return;
            }
        }
    }

    /// Whether the server-to-client `chunk` about to be written is lost because it contains
    /// the pattern of `drop_next_reply_containing`.
    pub(super) fn lose_reply_containing(&self, chunk: &[u8]) -> bool {
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
    pub(super) fn inject(&self, scanner: &mut FrameScanner, chunk: Vec<u8>) -> Vec<u8> {
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

    pub(super) fn blackholed(&self) -> bool {
        self.blackhole.load(Ordering::SeqCst)
    }

    /// Decides whether the server-to-client chunk about to be written is lost.
    pub(super) fn lose_reply(&self) -> bool {
        let next = self
            .drop_next
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        let lose = next || {
            let probability = f64::from_bits(self.drop_probability.load(Ordering::SeqCst));
            probability > 0.0 && lock(&self.rng).next_f64() < probability
        };
        if lose {
            self.replies_dropped.fetch_add(1, Ordering::SeqCst);
        }
        lose
    }

    /// The delay for a chunk just read in `direction`, if latency is on.
    pub(super) fn delay(&self, direction: Direction) -> Option<Duration> {
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

    pub(super) fn count_reset(&self) {
        self.resets.fetch_add(1, Ordering::SeqCst);
    }

    /// Notes connection `id` if `recent` (the end of what its client sent before this
    /// chunk) followed by `chunk` holds a pattern; keeps the end of both in `recent`.
    pub(super) fn scan_request(&self, id: u64, recent: &mut Vec<u8>, chunk: &[u8]) {
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

/// SplitMix64: tiny, fast and good enough for fault injection; saves a
/// dependency on `rand`.
pub(super) struct SplitMix64(pub(super) u64);

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
