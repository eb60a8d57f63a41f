//! The RESP2/RESP3 decoder of distlock's own connections ([`super::link`]).
//!
//! Replies come from whatever answers on the server's port. The decoder therefore works
//! without recursion (an explicit stack of the aggregates still open), refuses a value nested
//! deeper than redis-rs's parser takes ([`MAX_DEPTH`]) and a frame larger than a Redis server
//! sends ([`MAX_FRAME`], announced lengths included, so nothing is buffered for a frame that
//! could never be taken), and resumes where it stopped when a frame arrives in pieces, so a
//! frame read in many pieces is scanned once. Within those bounds it yields the `Value`s
//! redis-rs's parser yields for the same bytes (the client's other connections use that
//! parser): the common shapes are decoded here, the rare leaves (errors, doubles, booleans,
//! big numbers, verbatim strings) by redis-rs's parser, one leaf at a time.

use redis::{PushKind, Value};

/// Nesting depth from which a value is refused: redis-rs refuses the same.
pub(crate) const MAX_DEPTH: usize = 100;
/// Largest frame taken, in bytes: Redis's own largest bulk string (`proto-max-bulk-len`).
pub(crate) const MAX_FRAME: usize = 512 << 20;

/// Bytes asked of the socket per read at least: many answers at once when many callers wait.
const READ_SIZE: usize = 16 * 1024;

/// Why the bytes are no frame this decoder takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Not RESP, or RESP redis-rs refuses too.
    Invalid,
    /// Nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// Larger than [`MAX_FRAME`].
    TooLarge,
}

/// Decodes the frames of one connection's byte stream, in order.
pub(crate) struct Decoder {
    buf: Vec<u8>,
    /// Where the bytes not decoded yet start.
    start: usize,
    /// The aggregates of the frame being decoded that still expect elements, outermost first.
    open: Vec<Open>,
    /// Bytes of the frame being decoded, up to `start`.
    taken: usize,
    /// How far the search for the end of the line at `start` got (a long line in pieces).
    scanned: usize,
    max_depth: usize,
    max_frame: usize,
}

struct Open {
    kind: Aggregate,
    left: usize,
    items: Vec<Value>,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Array,
    Set,
    Map,
    Attribute,
    Push,
}

/// What the element at `start` turned out to be.
enum Step {
    /// A complete value.
    Value(Value),
    /// An aggregate header: its elements follow.
    Opened,
    /// Its bytes have not all arrived.
    Incomplete,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::with_limits(MAX_DEPTH, MAX_FRAME)
    }
}

impl Decoder {
    /// A decoder with other bounds (tests).
    pub(crate) fn with_limits(max_depth: usize, max_frame: usize) -> Decoder {
        Decoder {
            buf: Vec::new(),
            start: 0,
            open: Vec::new(),
            taken: 0,
            scanned: 0,
            max_depth,
            max_frame,
        }
    }

    /// The buffer to read more bytes into (appended after what it holds), with room for at
    /// least a quarter of a read.
    pub(crate) fn buffer(&mut self) -> &mut Vec<u8> {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.scanned = 0;
            self.start = 0;
        } else if self.start > 0 && self.buf.capacity() - self.buf.len() < READ_SIZE / 4 {
            // Keep only what is not decoded yet (a frame that came in pieces).
            self.buf.drain(..self.start);
            self.scanned -= self.start;
            self.start = 0;
        }
        let room = if self.buf.capacity() == 0 {
            READ_SIZE
        } else {
            READ_SIZE / 4
        };
        self.buf.reserve(room);
        &mut self.buf
    }

    /// Appends bytes read (tests and fuzzing; a connection reads into [`buffer`](Self::buffer)).
    #[cfg(any(test, feature = "_fuzzing"))]
    pub(crate) fn feed(&mut self, bytes: &[u8]) {
        self.buffer().extend_from_slice(bytes);
    }

    /// Bytes fed and not yet part of a complete frame.
    #[cfg(any(test, feature = "_fuzzing"))]
    pub(crate) fn pending(&self) -> usize {
        self.buf.len() - self.start + self.taken
    }

    /// The next complete frame, `None` until its bytes have all arrived. After an error the
    /// stream cannot be decoded further.
    pub(crate) fn next(&mut self) -> Result<Option<Value>, Refused> {
        loop {
            if self.open.len() >= self.max_depth && self.start < self.buf.len() {
                return Err(Refused::TooDeep);
            }
            let mut value = match self.element()? {
                Step::Incomplete => return Ok(None),
                Step::Opened => continue,
                Step::Value(value) => value,
            };
            // The aggregates this value completes.
            loop {
                let Some(top) = self.open.last_mut() else {
                    self.taken = 0;
                    return Ok(Some(value));
                };
                top.items.push(value);
                top.left -= 1;
                if top.left > 0 {
                    break;
                }
                let done = self.open.pop().expect("an aggregate is open");
                value = done.finish()?;
            }
        }
    }

    /// Decodes the element at `start`, and moves past it (or past its header).
    fn element(&mut self) -> Result<Step, Refused> {
        let at = self.start;
        let Some(&kind) = self.buf.get(at) else {
            return Ok(Step::Incomplete);
        };
        let Some(end) = self.line_end(at + 1) else {
            if self.taken + (self.buf.len() - at) > self.max_frame {
                return Err(Refused::TooLarge);
            }
            return Ok(Step::Incomplete);
        };
        let after = end + 2;
        let line = &self.buf[at + 1..end];
        let step = match kind {
            b'+' => {
                let text = std::str::from_utf8(line).map_err(|_| Refused::Invalid)?;
                Step::Value(if text == "OK" {
                    Value::Okay
                } else {
                    Value::SimpleString(text.to_owned())
                })
            }
            b':' => Step::Value(Value::Int(int(line)?)),
            b'_' => {
                std::str::from_utf8(line).map_err(|_| Refused::Invalid)?;
                Step::Value(Value::Nil)
            }
            b'$' | b'!' | b'=' => {
                let len = int(line)?;
                if len < 0 {
                    if kind != b'$' {
                        // redis-rs would wait for ever for the bytes of a negative length.
                        return Err(Refused::Invalid);
                    }
                    Step::Value(Value::Nil)
                } else {
                    let len = usize::try_from(len).map_err(|_| Refused::TooLarge)?;
                    let end = after.checked_add(len).ok_or(Refused::TooLarge)?;
                    if self.taken + (end - at) + 2 > self.max_frame {
                        return Err(Refused::TooLarge);
                    }
                    if self.buf.len() < end + 2 {
                        return Ok(Step::Incomplete);
                    }
                    if &self.buf[end..end + 2] != b"\r\n" {
                        return Err(Refused::Invalid);
                    }
                    let value = if kind == b'$' {
                        Value::BulkString(self.buf[after..end].to_vec())
                    } else {
                        leaf(&self.buf[at..end + 2])?
                    };
                    self.consume(end + 2)?;
                    return Ok(Step::Value(value));
                }
            }
            b'-' | b'(' | b',' | b'#' => Step::Value(leaf(&self.buf[at..after])?),
            b'*' | b'~' | b'%' | b'|' | b'>' => {
                let n = int(line)?;
                self.consume(after)?;
                return self.open_aggregate(kind, n);
            }
            _ => return Err(Refused::Invalid),
        };
        self.consume(after)?;
        Ok(step)
    }

    /// An aggregate of `n` as its header says: a complete value if it has no elements, else
    /// opened for them.
    fn open_aggregate(&mut self, kind: u8, n: i64) -> Result<Step, Refused> {
        let (aggregate, per, extra) = match kind {
            b'*' => (Aggregate::Array, 1, 0),
            b'~' => (Aggregate::Set, 1, 0),
            b'%' => (Aggregate::Map, 2, 0),
            b'|' => (Aggregate::Attribute, 2, 1),
            _ => (Aggregate::Push, 1, 0),
        };
        if n <= 0 {
            match aggregate {
                Aggregate::Array | Aggregate::Set if n < 0 => return Ok(Step::Value(Value::Nil)),
                Aggregate::Map | Aggregate::Attribute if n < 0 => return Err(Refused::Invalid),
                Aggregate::Push => return Ok(Step::Value(empty_push())),
                _ => {}
            }
        }
        let left = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(per))
            .and_then(|n| n.checked_add(extra))
            .ok_or(Refused::TooLarge)?;
        // Every element takes 3 bytes at least (`_\r\n`).
        if left.saturating_mul(3) > self.max_frame - self.taken {
            return Err(Refused::TooLarge);
        }
        if left == 0 {
            let empty = Open {
                kind: aggregate,
                left,
                items: Vec::new(),
            };
            return empty.finish().map(Step::Value);
        }
        self.open.push(Open {
            kind: aggregate,
            left,
            items: Vec::with_capacity(left.min(16)),
        });
        Ok(Step::Opened)
    }

    /// Moves past a decoded element ending at `to`.
    fn consume(&mut self, to: usize) -> Result<(), Refused> {
        self.taken += to - self.start;
        self.start = to;
        self.scanned = to;
        if self.taken > self.max_frame {
            return Err(Refused::TooLarge);
        }
        Ok(())
    }

    /// Where the CRLF ending the line from `from` is, resuming the search where the last one
    /// for the same line stopped.
    fn line_end(&mut self, from: usize) -> Option<usize> {
        let search = from.max(self.scanned.saturating_sub(1));
        let rest = self.buf.get(search..)?;
        match rest.windows(2).position(|w| w == b"\r\n") {
            Some(i) => Some(search + i),
            None => {
                self.scanned = self.buf.len();
                None
            }
        }
    }
}

impl Open {
    /// The value of an aggregate whose elements have all arrived, as redis-rs builds it.
    fn finish(self) -> Result<Value, Refused> {
        let pairs = |items: Vec<Value>| {
            let mut items = items.into_iter();
            let mut pairs = Vec::with_capacity(items.len() / 2);
            while let (Some(k), Some(v)) = (items.next(), items.next()) {
                pairs.push((k, v));
            }
            pairs
        };
        Ok(match self.kind {
            Aggregate::Array => Value::Array(self.items),
            Aggregate::Set => Value::Set(self.items),
            Aggregate::Map => Value::Map(pairs(self.items)),
            Aggregate::Attribute => {
                let mut items = self.items;
                let data = items.pop().ok_or(Refused::Invalid)?;
                Value::Attribute {
                    data: Box::new(data),
                    attributes: pairs(items),
                }
            }
            Aggregate::Push => {
                let mut items = self.items.into_iter();
                let kind = match items.next() {
                    Some(Value::BulkString(kind)) => {
                        String::from_utf8(kind).map_err(|_| Refused::Invalid)?
                    }
                    Some(Value::SimpleString(kind)) => kind,
                    _ => return Err(Refused::Invalid),
                };
                Value::Push {
                    kind: push_kind(kind),
                    data: items.collect(),
                }
            }
        })
    }
}

/// A length or integer line, as redis-rs reads it.
fn int(line: &[u8]) -> Result<i64, Refused> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or(Refused::Invalid)
}

/// A leaf that is no aggregate (so the parser cannot recurse), by redis-rs's parser.
fn leaf(bytes: &[u8]) -> Result<Value, Refused> {
    redis::parse_redis_value(bytes).map_err(|_| Refused::Invalid)
}

/// What redis-rs makes of a push frame without elements.
fn empty_push() -> Value {
    Value::Push {
        kind: PushKind::Other(String::new()),
        data: Vec::new(),
    }
}

/// A push's kind from its name, as redis-rs names it.
fn push_kind(kind: String) -> PushKind {
    match kind.as_str() {
        "invalidate" => PushKind::Invalidate,
        "message" => PushKind::Message,
        "pmessage" => PushKind::PMessage,
        "smessage" => PushKind::SMessage,
        "unsubscribe" => PushKind::Unsubscribe,
        "punsubscribe" => PushKind::PUnsubscribe,
        "sunsubscribe" => PushKind::SUnsubscribe,
        "subscribe" => PushKind::Subscribe,
        "psubscribe" => PushKind::PSubscribe,
        "ssubscribe" => PushKind::SSubscribe,
        _ => PushKind::Other(kind),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every frame of `stream` (fed in two pieces cut at `cut`) and the error that stopped
    /// the decoding, if one did.
    fn decode(decoder: &mut Decoder, stream: &[u8], cut: usize) -> (Vec<Value>, Option<Refused>) {
        let mut frames = Vec::new();
        for piece in [&stream[..cut], &stream[cut..]] {
            decoder.feed(piece);
            loop {
                match decoder.next() {
                    Ok(Some(frame)) => frames.push(frame),
                    Ok(None) => break,
                    Err(e) => return (frames, Some(e)),
                }
            }
        }
        (frames, None)
    }

    const FRAMES: &[&[u8]] = &[
        b"+OK\r\n",
        b"+hello world\r\n",
        b":42\r\n",
        b": -7 \r\n",
        b"$-1\r\n",
        b"_\r\n",
        b"$5\r\nhe\r\no\r\n",
        b"$0\r\n\r\n",
        b"*2\r\n:1\r\n$-1\r\n",
        b"*-1\r\n",
        b"*0\r\n",
        b"%1\r\n+a\r\n*1\r\n:2\r\n",
        b"%0\r\n",
        b"~2\r\n+a\r\n+b\r\n",
        b"-ERR no\r\n",
        b"!9\r\nNOPERM no\r\n",
        b"|1\r\n+k\r\n+v\r\n:7\r\n",
        b"*1\r\n|1\r\n+k\r\n+v\r\n:7\r\n",
        b">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n",
        b">2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n",
        b">0\r\n",
        b",3.25\r\n",
        b",inf\r\n",
        b"#t\r\n",
        b"(123456789012345678901234567890\r\n",
        b"=7\r\ntxt:abc\r\n",
    ];

    #[test]
    fn frames_decode_as_redis_rs_parses_them_at_every_split() {
        let stream = FRAMES.concat();
        let theirs: Vec<String> = FRAMES
            .iter()
            .map(|f| format!("{:?}", redis::parse_redis_value(f).expect("a valid frame")))
            .collect();
        for cut in 0..=stream.len() {
            let (ours, error) = decode(&mut Decoder::default(), &stream, cut);
            assert_eq!(error, None, "cut at {cut}, after {ours:?}");
            let ours: Vec<String> = ours.iter().map(|v| format!("{v:?}")).collect();
            assert_eq!(ours, theirs, "cut at {cut}");
        }
    }

    #[test]
    fn bytes_that_are_no_frame_are_refused() {
        for garbage in [
            &b"?x\r\n"[..],
            b"$x\r\n",
            b":1x\r\n",
            b"%-1\r\n",
            b"|-1\r\n",
            b"!-1\r\n",
            b"$3\r\nabcdef\r\n",
            b"+\xff\r\n",
            b">1\r\n:1\r\n",
            b"#x\r\n",
        ] {
            let (frames, error) = decode(&mut Decoder::default(), garbage, garbage.len());
            assert!(frames.is_empty(), "{garbage:?}");
            assert_eq!(error, Some(Refused::Invalid), "{garbage:?}");
            assert!(redis::parse_redis_value(garbage).is_err(), "{garbage:?}");
        }
    }

    #[test]
    fn nesting_is_bounded_as_in_redis_rs_without_recursion() {
        for depth in [MAX_DEPTH - 1, MAX_DEPTH, 200_000] {
            for open in [
                &b"*1\r\n"[..],
                b"%1\r\n+k\r\n",
                b"|1\r\n+k\r\n+v\r\n",
                b">2\r\n+m\r\n",
            ] {
                let mut frame = open.repeat(depth);
                frame.extend_from_slice(b":1\r\n");
                let (ours, error) = decode(&mut Decoder::default(), &frame, frame.len() / 2);
                if depth < MAX_DEPTH {
                    assert_eq!((ours.len(), error), (1, None), "depth {depth}");
                    let theirs = redis::parse_redis_value(&frame).expect("within redis-rs's bound");
                    assert_eq!(format!("{:?}", ours[0]), format!("{theirs:?}"));
                } else {
                    assert_eq!(error, Some(Refused::TooDeep), "depth {depth}");
                    if depth == MAX_DEPTH {
                        assert!(redis::parse_redis_value(&frame).is_err());
                    }
                }
            }
        }
    }

    #[test]
    fn sizes_are_bounded_before_the_bytes_arrive() {
        // Announced, not sent: refused at the header.
        for header in [
            &b"$99999999999999\r\n"[..],
            b"$536870911\r\n",
            b"*9223372036854775807\r\n",
            b"%4611686018427387904\r\n",
            b"*200000000\r\n",
        ] {
            let (_, error) = decode(&mut Decoder::default(), header, header.len());
            assert_eq!(error, Some(Refused::TooLarge), "{header:?}");
        }
        // Sent, over a small bound: refused as the bytes come.
        let mut decoder = Decoder::with_limits(MAX_DEPTH, 64);
        let big = [&b"*100\r\n"[..], &b"+x\r\n".repeat(100)].concat();
        assert_eq!(decode(&mut decoder, &big, 10).1, Some(Refused::TooLarge));
        let mut decoder = Decoder::with_limits(MAX_DEPTH, 64);
        let line = [&b"+"[..], &[b'x'; 100][..]].concat();
        assert_eq!(decode(&mut decoder, &line, 10).1, Some(Refused::TooLarge));
        // Frames under the bound pass one after another: the bound is per frame.
        let mut decoder = Decoder::with_limits(MAX_DEPTH, 64);
        let small = b"$40\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n".repeat(10);
        assert_eq!(
            decode(&mut decoder, &small, 7),
            (
                (0..10).map(|_| Value::BulkString(vec![b'x'; 40])).collect(),
                None
            )
        );
    }

    #[test]
    fn a_frame_in_many_pieces_is_decoded_once_complete() {
        let frame = [
            &b"*3\r\n$20000\r\n"[..],
            &[b'a'; 20000][..],
            b"\r\n:1\r\n+end\r\n",
        ]
        .concat();
        let mut decoder = Decoder::default();
        for (i, byte) in frame.iter().enumerate() {
            decoder.feed(&[*byte]);
            let next = decoder.next().expect("valid");
            assert_eq!(next.is_some(), i == frame.len() - 1, "after byte {i}");
        }
    }
}
