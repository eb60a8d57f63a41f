//! Reading a connection's socket so that a read which drained it says so.

use std::io;

use redis::io::tcp::socket2::SockRef;
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Reads what has arrived on `stream` into `buf`'s spare room; `WouldBlock` when nothing has.
///
/// A read that leaves room unfilled has drained the socket, and on an edge-triggered poller
/// (epoll, kqueue) every byte that arrives later raises a new event. So the socket's readiness
/// is cleared then, as tokio's own `TcpStream::poll_read` does: the next request waits for its
/// answer instead of first trying a read that finds nothing (a `recvfrom` answering `EAGAIN`
/// per round trip). The clear is tokio's (`try_io` given `WouldBlock`), tied to the readiness
/// event seen before the read: an event that came in between keeps the socket readable, so
/// bytes arriving just after the read still wake the reader. Elsewhere (a level-triggered
/// `poll`), only a read that finds nothing clears it.
pub(super) fn read_into(stream: &TcpStream, buf: &mut Vec<u8>) -> io::Result<usize> {
    // A read into no room answers 0, which would read as the end of the stream.
    buf.reserve(1);
    let mut got = 0;
    let read = stream.try_io(Interest::READABLE, || {
        let room = buf.spare_capacity_mut();
        let space = room.len();
        let n = SockRef::from(stream).recv(room)?;
        // SAFETY: `recv` initialised the first `n` bytes of the spare capacity.
        unsafe { buf.set_len(buf.len() + n) };
        got = n;
        if DRAINED_BY_A_SHORT_READ && 0 < n && n < space {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    });
    match read {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        read => read,
    }
}

/// Whether the poller tokio uses here is edge-triggered, so that a read that leaves room in
/// the buffer shows the socket drained (the targets and the opt-out tokio's `poll_read` names).
const DRAINED_BY_A_SHORT_READ: bool = cfg!(all(
    not(mio_unsupported_force_poll_poll),
    any(
        target_os = "android",
        target_os = "illumos",
        target_os = "linux",
        target_os = "redox",
        target_os = "dragonfly",
        target_os = "freebsd",
        target_os = "ios",
        target_os = "macos",
        target_os = "netbsd",
        target_os = "openbsd",
        target_os = "tvos",
        target_os = "visionos",
        target_os = "watchos",
    )
));
