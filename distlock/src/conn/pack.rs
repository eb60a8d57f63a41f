//! Commands described once, by the arguments they write, and packed as RESP straight into a
//! [`Link`](super::Link)'s output: the commands of every lock cycle skip the `redis::Cmd` (its
//! two buffers, then the copy into the output). The connections distlock does not write itself
//! get the same arguments as a `Cmd` ([`to_cmd`]).

use redis::{Cmd, Pipeline, RedisWrite};

/// Where a command's arguments go: RESP bytes, a count, or a `redis::Cmd`.
pub(crate) trait Args {
    /// One argument: `parts`, one after another.
    fn push(&mut self, parts: &[&[u8]]);

    /// One argument: `n` in decimal.
    fn push_int(&mut self, n: u64) {
        let mut digits = [0u8; 20];
        let at = decimal(&mut digits, n);
        self.push(&[&digits[at..]]);
    }

    /// The arguments `words`, already packed as RESP in `resp` (fixed words such as a
    /// command's name): one copy where the command is packed.
    fn push_packed(&mut self, resp: &[u8], words: &[&[u8]]) {
        let _ = resp;
        for word in words {
            self.push(&[word]);
        }
    }
}

/// A command, as the arguments it writes, the name first. Written twice when packed (counted,
/// then written), so it must write the same arguments every time.
pub(crate) trait Command {
    fn write(&self, args: &mut impl Args);
}

impl<C: Command> Command for &C {
    fn write(&self, args: &mut impl Args) {
        (**self).write(args);
    }
}

/// `n` in decimal at the end of `digits`; returns where it starts.
fn decimal(digits: &mut [u8; 20], mut n: u64) -> usize {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return at;
        }
    }
}

/// `words` packed as RESP bulk strings, for [`Args::push_packed`].
pub(crate) fn packed(words: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut resp = Resp(&mut out);
    for word in words {
        resp.push(&[word]);
    }
    out
}

/// The first pass of [`pack`]: how many arguments, and about how many bytes.
#[derive(Default)]
struct Count {
    args: usize,
    bytes: usize,
}

impl Args for Count {
    fn push(&mut self, parts: &[&[u8]]) {
        self.args += 1;
        self.bytes += parts.iter().map(|p| p.len()).sum::<usize>();
    }

    fn push_int(&mut self, _: u64) {
        self.args += 1;
        self.bytes += 20;
    }

    fn push_packed(&mut self, resp: &[u8], words: &[&[u8]]) {
        self.args += words.len();
        self.bytes += resp.len();
    }
}

/// Room for one argument's header and line ends: `$`, up to 20 digits, two `\r\n`.
const FRAMING: usize = 25;

/// The second pass of [`pack`].
struct Resp<'a>(&'a mut Vec<u8>);

/// `kind`, `n` in decimal and `\r\n`. Lengths and counts are almost always below 100: a
/// copy of a few bytes whose number is known here costs no call.
fn header(out: &mut Vec<u8>, kind: u8, n: usize) {
    if n < 10 {
        out.extend_from_slice(&[kind, b'0' + n as u8, b'\r', b'\n']);
    } else if n < 100 {
        let (tens, ones) = (b'0' + (n / 10) as u8, b'0' + (n % 10) as u8);
        out.extend_from_slice(&[kind, tens, ones, b'\r', b'\n']);
    } else {
        let mut digits = [0u8; 20];
        let at = decimal(&mut digits, n as u64);
        out.push(kind);
        out.extend_from_slice(&digits[at..]);
        out.extend_from_slice(b"\r\n");
    }
}

impl Args for Resp<'_> {
    fn push(&mut self, parts: &[&[u8]]) {
        let out = &mut *self.0;
        header(out, b'$', parts.iter().map(|p| p.len()).sum());
        for part in parts {
            out.extend_from_slice(part);
        }
        out.extend_from_slice(b"\r\n");
    }

    fn push_packed(&mut self, resp: &[u8], _: &[&[u8]]) {
        self.0.extend_from_slice(resp);
    }
}

impl Args for Cmd {
    fn push(&mut self, parts: &[&[u8]]) {
        use std::io::Write as _;
        let mut arg = self.writer_for_next_arg();
        for part in parts {
            // Writes into a growing in-memory buffer cannot fail.
            let _ = arg.write_all(part);
        }
    }
}

/// Appends `command` to `out` as RESP: an array of bulk strings, as `redis::Cmd` packs it.
pub(crate) fn pack(out: &mut Vec<u8>, command: &impl Command) {
    let mut count = Count::default();
    command.write(&mut count);
    out.reserve(count.bytes + FRAMING * (count.args + 1));
    header(out, b'*', count.args);
    command.write(&mut Resp(out));
}

/// `command` as a `redis::Cmd`.
pub(crate) fn to_cmd(command: &impl Command) -> Cmd {
    let mut count = Count::default();
    command.write(&mut count);
    let mut cmd = Cmd::with_capacity(count.args, count.bytes);
    command.write(&mut cmd);
    cmd
}

/// `commands` as a `redis::Pipeline`, for the connections distlock does not write itself.
pub(crate) fn pipeline(commands: &[impl Command]) -> Pipeline {
    let mut pipeline = Pipeline::with_capacity(commands.len());
    for command in commands {
        pipeline.add_command(to_cmd(command));
    }
    pipeline
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Sample;

    impl Command for Sample {
        fn write(&self, args: &mut impl Args) {
            args.push(&[b"SET"]);
            args.push(&[b"p:", b"#waited:", b"{k}"]);
            args.push(&[b""]);
            args.push_packed(&packed(&[b"NX", b"PX"]), &[b"NX", b"PX"]);
            args.push(&[&[b'x'; 300]]);
            for n in [0, 7, 10, 1000, u64::MAX] {
                args.push_int(n);
            }
        }
    }

    #[test]
    fn packed_as_redis_rs_packs_it() {
        let mut out = b"before".to_vec();
        pack(&mut out, &Sample);
        let cmd = to_cmd(&Sample);
        assert_eq!(out[6..], cmd.get_packed_command());
        let mut expected = redis::cmd("SET");
        expected
            .arg("p:#waited:{k}")
            .arg("")
            .arg("NX")
            .arg("PX")
            .arg([b'x'; 300].as_slice());
        for n in [0, 7, 10, 1000, u64::MAX] {
            expected.arg(n);
        }
        assert_eq!(cmd.get_packed_command(), expected.get_packed_command());
    }
}
