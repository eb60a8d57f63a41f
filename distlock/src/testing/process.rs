//! The processes under the throwaway servers: spawning them from one long-lived thread,
//! free loopback ports, signals, and the probe that tells a server is up.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use crate::sync::lock;

type Spawn = (Command, mpsc::SyncSender<io::Result<Child>>);

/// The thread every server is spawned from. On Linux each server gets `SIGKILL` when the
/// thread that spawned it exits (`PR_SET_PDEATHSIG`), so that a test process killed without
/// unwinding (a timeout, `^C`) leaves no server behind; this thread lives as long as the
/// process, so a server started from a short-lived thread (`spawn_blocking`, a runtime of
/// its own) lives on.
static SPAWNER: LazyLock<Mutex<Option<mpsc::Sender<Spawn>>>> = LazyLock::new(|| {
    let (tx, rx) = mpsc::channel::<Spawn>();
    let started = std::thread::Builder::new()
        .name("distlock-testing-spawner".into())
        .spawn(move || {
            for (mut command, reply) in rx {
                let _ = reply.send(command.spawn());
            }
        });
    Mutex::new(started.ok().map(|_| tx))
});

/// Starts `command` as a child that never outlives the test process: on Linux it gets
/// `SIGKILL` when the process dies, however it dies (`SIGKILL` included), as every server of
/// this module does. It is spawned from one long-lived thread of the module's, because
/// Linux ties that signal to the spawning *thread*, and a test's threads end with the test.
/// For a test's own helper processes (a database, a fake service); the caller still stops
/// and reaps the child.
///
/// ```no_run
/// let mut command = std::process::Command::new("sleep");
/// command.arg("60");
/// let mut child = distlock::testing::spawn_process(command)?;
/// child.kill()?;
/// child.wait()?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn spawn_process(mut command: Command) -> io::Result<Child> {
    die_with_spawning_thread(&mut command);
    let sender = lock(&SPAWNER).clone();
    let Some(sender) = sender else {
        return command.spawn();
    };
    let (reply, answer) = mpsc::sync_channel(1);
    sender
        .send((command, reply))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    answer
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}

#[cfg(target_os = "linux")]
fn die_with_spawning_thread(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and calls only the async-signal-safe
    // prctl, getppid and raise; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) == -1 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before prctl took effect: no signal would come.
            if libc::getppid() as u32 != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_spawning_thread(_: &mut Command) {}

/// The highest port handed out: a Redis Cluster node also listens on its port + 10000.
const MAX_PORT: u16 = u16::MAX - 10_000;

/// A free loopback port, other than `except`, at most [`MAX_PORT`]. A server may still lose
/// it to another process before it binds: the caller starts again on another port then.
pub(super) fn free_port(except: u16) -> io::Result<u16> {
    // The listeners are held until the search ends, so no port comes up twice.
    let mut held = Vec::new();
    for _ in 0..200 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        if port != except && port <= MAX_PORT {
            return Ok(port);
        }
        held.push(listener);
    }
    Err(io::Error::other("no free loopback port"))
}

/// Whether our child `pid` has exited (reaped or not), without reaping it.
pub(super) fn has_exited(pid: u32) -> bool {
    let pid = libc::id_t::from(pid);
    // SAFETY: a zeroed siginfo_t is a valid value for waitid(2) to write into.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid(2) writes only to `info`; WNOWAIT leaves the child to be reaped by its
    // `Child`.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // With WNOHANG and no exit to report, nothing is written into `info` (Linux zeroes it):
    // its signal number stays 0; an exit to report sets it to SIGCHLD. (`si_signo` is a
    // field on every Unix libc describes, unlike `si_pid`.)
    r != 0 || info.si_signo != 0
}

/// Waits up to `timeout` for our child `pid` to exit (without reaping it); whether it did.
/// A thread blocks in waitid(2) for the exit, the kernel's event; if the time runs out first,
/// the caller kills the child, which ends that wait too.
pub(super) fn exits_within(pid: u32, timeout: Duration) -> bool {
    let (exited, exit) = mpsc::sync_channel(1);
    let waiting = std::thread::Builder::new()
        .name("distlock-testing-stop".into())
        .spawn(move || {
            let pid = libc::id_t::from(pid);
            loop {
                // SAFETY: as in `has_exited`, without WNOHANG: blocks until the child exits.
                let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
                let r = unsafe {
                    libc::waitid(libc::P_PID, pid, &mut info, libc::WEXITED | libc::WNOWAIT)
                };
                if r == 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                    let _ = exited.send(());
                    return;
                }
            }
        });
    match waiting {
        Ok(_) => exit.recv_timeout(timeout).is_ok(),
        Err(_) => has_exited(pid),
    }
}

/// Sends `signal` to our child `pid` (not yet reaped, so the pid is not someone else's).
pub(super) fn signal(pid: u32, signal: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(pid, signal) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits for our child `pid` to report the state change `flag` asks for (`WUNTRACED`: it
/// stopped; `WCONTINUED`: it continued): the kernel's event, no polling. A child that died
/// meanwhile ends the wait too.
pub(super) fn wait_for(pid: u32, flag: libc::c_int) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
    let mut status = 0;
    loop {
        // SAFETY: waitpid(2) writes only to `status`, a valid int.
        let r = unsafe { libc::waitpid(pid, &mut status, flag) };
        if r == pid {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The request a probe sends: `INFO server`, whose answer names the process.
const INFO_SERVER: &[u8] = b"*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n";

/// Asks the server on `port` for its pid (`INFO server`): true once the process that
/// answers is `pid` (another test's server on a port we lost must not pass for ours). A
/// server that wants a password answers `-NOAUTH`: it is up, and taken as ours.
pub(super) fn probe(port: u16, pid: u32, timeout: Duration) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let answer = || -> io::Result<Vec<u8>> {
        let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.write_all(INFO_SERVER)?;
        let mut reply = Vec::with_capacity(4096);
        let mut buf = [0u8; 4096];
        while !complete(&reply) {
            let n = stream.read(&mut buf)?;
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        Ok(reply)
    };
    answer().is_ok_and(|reply| is_ours(&reply, pid))
}

/// [`probe`] on the async runtime (a start awaits it instead of blocking its thread).
pub(super) async fn probe_async(port: u16, pid: u32, timeout: Duration) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let answer = async {
        let mut stream = tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await?;
        stream.write_all(INFO_SERVER).await?;
        let mut reply = Vec::with_capacity(4096);
        let mut buf = [0u8; 4096];
        while !complete(&reply) {
            let n = stream.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            reply.extend_from_slice(&buf[..n]);
        }
        io::Result::Ok(reply)
    };
    matches!(tokio::time::timeout(timeout, answer).await, Ok(Ok(reply)) if is_ours(&reply, pid))
}

fn is_ours(reply: &[u8], pid: u32) -> bool {
    let text = String::from_utf8_lossy(reply);
    text.starts_with("-NOAUTH") || text.contains(&format!("process_id:{pid}\r\n"))
}

/// Whether `reply` is a whole answer: an error line, or a bulk string read to its end (or
/// more than any `INFO server` answer is).
fn complete(reply: &[u8]) -> bool {
    if reply.len() > 64 * 1024 {
        return true;
    }
    let Some(end) = reply.windows(2).position(|w| w == b"\r\n") else {
        return false;
    };
    if reply.first() != Some(&b'$') {
        return true;
    }
    let len: usize = std::str::from_utf8(&reply[1..end])
        .ok()
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    reply.len() >= end + 2 + len + 2
}
