//! Linux `/proc` queries about processes the kit started.

use std::fs;

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
