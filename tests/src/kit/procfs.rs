//! Linux `/proc` queries about processes the kit started.

use std::fs;
use std::time::Duration;

/// `st` column value of a listening socket in `/proc/net/tcp`.
const TCP_LISTEN: &str = "0A";

/// Scheduler state letter of `pid` (`R`, `S`, `T`, `Z`, ...), `None` if gone.
pub(crate) fn process_state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may itself contain spaces or
    // ')', so the state is the first field after the LAST ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// Whether `pid` is stopped by a signal (SIGSTOP and friends).
pub(crate) fn is_stopped(pid: u32) -> bool {
    process_state(pid) == Some('T')
}

/// Whether `pid` owns the IPv4 socket listening on `127.0.0.1:port`.
///
/// A PONG on the port alone does not prove the server is ours: if our child
/// lost the bind race, whoever won it answers instead.
pub(crate) fn owns_loopback_listener(pid: u32, port: u16) -> bool {
    let Ok(table) = fs::read_to_string("/proc/net/tcp") else {
        return false;
    };
    let wanted = format!("0100007F:{port:04X}");
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, local, _, state, _, _, _, _, _, inode, ..]
                    if *local == wanted && *state == TCP_LISTEN =>
                {
                    Some(format!("socket:[{inode}]"))
                }
                _ => None,
            }
        })
        .collect();
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| fs::read_link(fd.path()).ok())
        .any(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
}

/// `st` column value of an established connection in `/proc/net/tcp`.
const TCP_ESTABLISHED: &str = "01";

/// Bytes received and not yet read on the server side of every established IPv4 connection to
/// `127.0.0.1:port`: what a server frozen by SIGSTOP was sent since it stopped (a request
/// that reached it, as an event a test can wait for instead of a fixed time).
pub(crate) fn unread_bytes_at(port: u16) -> u64 {
    let Ok(table) = fs::read_to_string("/proc/net/tcp") else {
        return 0;
    };
    let wanted = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, local, _, state, queues, ..]
                    if *local == wanted && *state == TCP_ESTABLISHED =>
                {
                    // `tx_queue:rx_queue`, in hex.
                    let (_, rx) = queues.split_once(':')?;
                    u64::from_str_radix(rx, 16).ok()
                }
                _ => None,
            }
        })
        .sum()
}

/// User + system CPU time `pid` has used so far, from `/proc/<pid>/stat` (in clock ticks, so
/// to 10 ms); zero if the process is gone. For benchmarks: what a `redis-server` spent.
pub fn cpu_time(pid: u32) -> Duration {
    let ticks = fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // Fields after the command name, which is in parentheses: utime and stime are the
            // 12th and 13th of them.
            let (_, rest) = stat.rsplit_once(')')?;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / per_second)
}

/// User + system CPU time of this process so far (`getrusage(RUSAGE_SELF)`, to the
/// microsecond).
pub fn own_cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1_000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn sees_own_listener_and_state() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("local addr").port();
        let me = std::process::id();
        assert!(owns_loopback_listener(me, port));
        drop(listener);
        assert!(!owns_loopback_listener(me, port));
        assert!(matches!(process_state(me), Some('R' | 'S')));
    }
}
