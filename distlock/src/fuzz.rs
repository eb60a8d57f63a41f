//! Fuzzing entry points: **not an API**, no stability promise, hidden from the docs.
//!
//! Compiled with the `_fuzzing` feature (off by default) for the `cargo fuzz` targets in
//! `fuzz/`, and always under `cargo test`, where `tests` runs every entry over the seed
//! corpus and a few thousand pseudo-random inputs. Each entry turns arbitrary bytes into what
//! a Redis server (or a hostile one) could send and runs the decoding a real reply goes
//! through. Errors are the expected outcome; a panic is a bug.

use std::sync::Arc;

use redis::{PushInfo, PushKind, Value, VerbatimFormat};

use crate::algorithm::{parse_acquire, renewed_lease, script_error};
use crate::channels::{Arrival, Channels};
use crate::error::Op;
use crate::key::LockKey;
use crate::mode::LockMode;

/// Values nest at most this deep: deeper adds nothing the decoders look at.
const MAX_DEPTH: usize = 4;
/// Elements per aggregate, at most.
const MAX_LEN: usize = 8;

/// An acquire script's reply (any value, server errors included) through `parse_acquire`
/// or `script_error`, as `Algorithm::send_acquire` does; then an extend script's reply
/// through the `i64` conversion and `renewed_lease`, as `Algorithm::send_extend` does.
pub fn acquire_reply(data: &[u8]) {
    let mut input = Input(data);
    let key = input.key();
    let mode = [
        LockMode::SetNx,
        LockMode::Reentrant,
        LockMode::Read,
        LockMode::Write,
        LockMode::Semaphore,
    ][usize::from(input.byte()) % 5];
    let reply = input.value(0);
    let outcome = match reply.extract_error() {
        Ok(reply) => parse_acquire(mode, &key, reply),
        Err(error) => Err(script_error(Op::Acquire, &key, error)),
    };
    if let Err(error) = outcome {
        // Messages carry server-chosen text (a type name, a mode): they must format.
        let _ = error.to_string();
    }
    let extend = input.value(0);
    if let Ok(ms) = redis::from_redis_value::<i64>(extend) {
        let lease = renewed_lease(ms);
        assert_eq!(lease.is_some(), ms > 0, "renewed_lease({ms}) = {lease:?}");
    }
}

/// A sequence of push frames through `Channels::on_push`, with one lock's channel
/// registered (so messages on it reach the wake-up and de-duplication logic).
pub fn push_frame(data: &[u8]) {
    let mut input = Input(data);
    let key = input.key();
    let channels = Arc::new(Channels::default());
    // While `_attempt` lives, the channel has an entry that messages can find.
    let _attempt = match channels.arrive(&key) {
        Arrival::Attempt(in_flight) => in_flight,
        Arrival::Queue { .. } => unreachable!("the first arrival attempts"),
    };
    let channel = key.channel();
    while !input.0.is_empty() {
        let kind = input.push_kind();
        let mut data = Vec::new();
        for _ in 0..usize::from(input.byte()) % 4 {
            let value = match input.byte() % 4 {
                // The registered channel, and payloads the release scripts publish.
                0 => Value::BulkString(channel.clone()),
                1 => Value::BulkString(b"all".to_vec()),
                2 => Value::BulkString(input.bytes().to_vec()),
                _ => input.value(1),
            };
            data.push(value);
        }
        channels.on_push(PushInfo { kind, data });
    }
}

/// Reads the fuzz input front to back; an exhausted input reads as zeros.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let Some((&first, rest)) = self.0.split_first() else {
            return 0;
        };
        self.0 = rest;
        first
    }

    fn bytes(&mut self) -> &[u8] {
        let len = usize::from(self.byte()).min(self.0.len());
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        taken
    }

    fn text(&mut self) -> String {
        String::from_utf8_lossy(self.bytes()).into_owned()
    }

    fn i64(&mut self) -> i64 {
        let mut raw = [0; 8];
        for byte in &mut raw {
            *byte = self.byte();
        }
        i64::from_le_bytes(raw)
    }

    /// A small integer most of the time (the values the scripts use), any `i64` otherwise.
    fn int(&mut self) -> i64 {
        match self.byte() {
            tag @ 0..=200 => i64::from(tag) - 4,
            _ => self.i64(),
        }
    }

    /// A lock key from an arbitrary name, or a fixed one when the name is refused.
    fn key(&mut self) -> LockKey {
        let name = self.bytes();
        LockKey::new("distlock", name, 256)
            .or_else(|_| LockKey::new("distlock", b"order:42", 256))
            .expect("a valid name")
    }

    fn push_kind(&mut self) -> PushKind {
        match self.byte() % 14 {
            0 => PushKind::Disconnection,
            1 => PushKind::Invalidate,
            2 | 3 => PushKind::Message,
            4 => PushKind::PMessage,
            5 | 6 => PushKind::SMessage,
            7 => PushKind::Unsubscribe,
            8 => PushKind::PUnsubscribe,
            9 => PushKind::SUnsubscribe,
            10 => PushKind::Subscribe,
            11 => PushKind::PSubscribe,
            12 => PushKind::SSubscribe,
            _ => PushKind::Other(self.text()),
        }
    }

    fn values(&mut self, depth: usize) -> Vec<Value> {
        let len = usize::from(self.byte()) % (MAX_LEN + 1);
        (0..len).map(|_| self.value(depth + 1)).collect()
    }

    fn pairs(&mut self, depth: usize) -> Vec<(Value, Value)> {
        let len = usize::from(self.byte()) % (MAX_LEN + 1);
        (0..len)
            .map(|_| (self.value(depth + 1), self.value(depth + 1)))
            .collect()
    }

    /// Any RESP2/RESP3 value the connection can hand over, server errors included.
    fn value(&mut self, depth: usize) -> Value {
        let tag = self.byte();
        if depth >= MAX_DEPTH && tag % 16 >= 10 {
            return Value::Nil;
        }
        match tag % 16 {
            0 => Value::Nil,
            1 | 2 => Value::Int(self.int()),
            3 => Value::BulkString(self.bytes().to_vec()),
            4 => Value::SimpleString(self.text()),
            5 => Value::Okay,
            6 => Value::Double(f64::from_bits(self.i64().cast_unsigned())),
            7 => Value::Boolean(self.byte() & 1 == 1),
            8 => Value::BigNumber(self.bytes().to_vec()),
            9 => {
                // Through the RESP parser, so the error is what a server's `-` reply becomes.
                let mut reply = b"-".to_vec();
                reply.extend(self.bytes().iter().filter(|b| !matches!(b, b'\r' | b'\n')));
                reply.extend(b"\r\n");
                redis::parse_redis_value(&reply).unwrap_or(Value::Nil)
            }
            10 | 11 => {
                // Mostly the two-element shape acquire replies have.
                let mut items = vec![Value::Int(self.int()), self.value(depth + 1)];
                if tag % 16 == 11 {
                    items.extend(self.values(depth));
                }
                Value::Array(items)
            }
            12 => Value::Map(self.pairs(depth)),
            13 => Value::Set(self.values(depth)),
            14 => Value::VerbatimString {
                format: match self.byte() % 3 {
                    0 => VerbatimFormat::Text,
                    1 => VerbatimFormat::Markdown,
                    _ => VerbatimFormat::Unknown(self.text()),
                },
                text: self.text(),
            },
            _ => match self.byte() % 3 {
                0 => Value::Push {
                    kind: self.push_kind(),
                    data: self.values(depth),
                },
                1 => Value::Attribute {
                    data: Box::new(self.value(depth + 1)),
                    attributes: self.pairs(depth),
                },
                _ => Value::Array(self.values(depth)),
            },
        }
    }
}

/// Bytes as distlock's own connections read them from the socket (`conn::link`): the input's
/// first byte chooses where the stream is cut into reads, and every frame the decoder yields
/// must be the value redis-rs's parser makes of the same bytes, when that parser takes them.
pub fn answer_stream(data: &[u8]) {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let step = usize::from(step) + 1;
    let cuts: Vec<usize> = (step..stream.len()).step_by(step).collect();
    let mut rest = stream;
    for frame in decode_stream(stream, &cuts) {
        let Ok((ours, len)) = frame else {
            return;
        };
        assert!(
            len > 0 && len <= rest.len(),
            "frame of {len} in {}",
            rest.len()
        );
        if let Ok(theirs) = redis::parse_redis_value(&rest[..len]) {
            assert_eq!(
                format!("{ours:?}"),
                format!("{theirs:?}"),
                "{:?}",
                &rest[..len]
            );
        }
        rest = &rest[len..];
    }
}

/// Decodes `stream` as a connection does when the socket gives it in pieces cut at `cuts`
/// (offsets, ascending): every complete frame with its length in bytes, in order, then the
/// reason decoding stopped, if it did (bytes that are no frame, or a frame beyond the
/// decoder's bounds on nesting and size). Frames not complete when the stream ends are not
/// listed.
pub fn decode_stream(stream: &[u8], cuts: &[usize]) -> Vec<Result<(Value, usize), String>> {
    let mut decoder = crate::conn::resp::Decoder::default();
    let mut frames = Vec::new();
    let mut from = 0;
    // Bytes fed so far, and where the frame being decoded started.
    let mut start = 0;
    for to in cuts.iter().copied().chain([stream.len()]) {
        let to = to.clamp(from, stream.len());
        decoder.feed(&stream[from..to]);
        from = to;
        loop {
            match decoder.next() {
                Ok(Some(value)) => {
                    let len = to - start - decoder.pending();
                    start += len;
                    frames.push(Ok((value, len)));
                }
                Ok(None) => break,
                Err(refused) => {
                    frames.push(Err(format!("{refused:?}")));
                    return frames;
                }
            }
        }
    }
    frames
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// The committed seeds and crash reproducers of one target, if the checkout has them
    /// (a packaged crate does not).
    fn corpus(target: &str) -> Vec<Vec<u8>> {
        let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
        let mut inputs = Vec::new();
        for dir in ["seeds", "regressions"] {
            let Ok(entries) = std::fs::read_dir(fuzz.join(dir).join(target)) else {
                continue;
            };
            for entry in entries.flatten() {
                if let Ok(bytes) = std::fs::read(entry.path()) {
                    inputs.push(bytes);
                }
            }
        }
        inputs
    }

    /// xorshift64*: deterministic, so a failure reproduces, and no dependency.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % n as u64).unwrap_or(0)
        }
    }

    /// Random bytes, and the seeds with a few bytes flipped, inserted or cut.
    fn inputs(seeds: &[Vec<u8>], count: usize) -> Vec<Vec<u8>> {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut out = seeds.to_vec();
        for i in 0..count {
            let mut input = match seeds.get(i % (seeds.len() + 1)) {
                Some(seed) => seed.clone(),
                None => (0..rng.below(64)).map(|_| rng.next() as u8).collect(),
            };
            for _ in 0..=rng.below(4) {
                let at = rng.below(input.len() + 1);
                match rng.below(3) {
                    0 if at < input.len() => input[at] = rng.next() as u8,
                    1 => input.insert(at, rng.next() as u8),
                    _ => input.truncate(at),
                }
            }
            out.push(input);
        }
        out
    }

    #[test]
    fn acquire_replies_never_panic() {
        for input in inputs(&corpus("acquire_reply"), 4000) {
            super::acquire_reply(&input);
        }
    }

    #[test]
    fn answer_streams_never_panic() {
        for input in inputs(&corpus("answer_stream"), 4000) {
            super::answer_stream(&input);
        }
    }

    #[test]
    fn push_frames_never_panic() {
        for input in inputs(&corpus("push_frame"), 4000) {
            super::push_frame(&input);
        }
    }
}
