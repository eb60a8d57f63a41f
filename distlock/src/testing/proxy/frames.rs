//! RESP frame scanning of the server-to-client stream, to put injected
//! pushes in front of replies.

/// Follows the RESP2/RESP3 frames of a server-to-client stream, to tell where each top-level
/// frame (a reply, or a push) starts.
#[derive(Default)]
pub(super) struct FrameScanner {
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
    pub(super) fn boundaries(&mut self, chunk: &[u8]) -> Vec<usize> {
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

#[cfg(test)]
mod tests {
    use super::FrameScanner;

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
}
