//! The `distlock` command for operators (feature `cli`): `inspect`, `list` and `unlock` over
//! [`Client::inspect`], [`Client::list`] and [`Client::force_unlock`]. The binary is a thin
//! wrapper around [`run`], which the tests drive directly.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{Client, Error, LockInfo, LockMode};

/// How to use the command.
pub const USAGE: &str = "\
usage: distlock [--url URL]... [--prefix PREFIX] <command>

commands:
  inspect NAME                 who holds the lock, its lease, readers, waiting writers, tokens
  list                         the names of the locks held now
  unlock NAME --reason TEXT    remove the lock whoever holds it; the reason is logged and kept

--url may be given several times for a Redlock quorum (default: $DISTLOCK_URL, else
redis://127.0.0.1:6379); --prefix is the clients' key prefix (default: distlock).";

/// Runs one command; returns the text to print and the exit code (0 done, 1 failed, 2 usage).
pub async fn run(args: &[String]) -> (String, i32) {
    match parse(args) {
        Ok(command) => match execute(command).await {
            Ok(text) => (text, 0),
            Err(e) => (format!("distlock: {e}"), 1),
        },
        Err(message) => (format!("distlock: {message}\n\n{USAGE}"), 2),
    }
}

#[derive(Debug)]
enum Action {
    Inspect(String),
    List,
    Unlock { name: String, reason: String },
}

#[derive(Debug)]
struct Command {
    urls: Vec<String>,
    prefix: Option<String>,
    action: Action,
}

fn parse(args: &[String]) -> Result<Command, String> {
    let mut urls = Vec::new();
    let mut prefix = None;
    let mut reason = None;
    let mut words = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match arg.as_str() {
            "--url" => urls.push(value("--url")?),
            "--prefix" => prefix = Some(value("--prefix")?),
            "--reason" => reason = Some(value("--reason")?),
            "-h" | "--help" => return Err("help".into()),
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            word => words.push(word.to_owned()),
        }
    }
    if urls.is_empty() {
        urls.push(
            std::env::var("DISTLOCK_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into()),
        );
    }
    let action = match words.as_slice() {
        [cmd, name] if cmd == "inspect" => Action::Inspect(name.clone()),
        [cmd] if cmd == "list" => Action::List,
        [cmd, name] if cmd == "unlock" => Action::Unlock {
            name: name.clone(),
            reason: reason
                .filter(|r| !r.trim().is_empty())
                .ok_or("unlock needs --reason TEXT: it is logged and kept beside the lock")?,
        },
        [] => return Err("no command given".into()),
        other => return Err(format!("cannot understand `{}`", other.join(" "))),
    };
    Ok(Command {
        urls,
        prefix,
        action,
    })
}

async fn execute(command: Command) -> Result<String, Error> {
    let mut builder = if command.urls.len() == 1 {
        Client::builder(&command.urls[0])
    } else {
        Client::quorum_builder(&command.urls)
    };
    if let Some(prefix) = &command.prefix {
        builder = builder.prefix(prefix);
    }
    let client = builder.connect().await?;
    match command.action {
        Action::Inspect(name) => Ok(describe(&client.inspect(&name).await?)),
        Action::List => Ok(client.list().await?.join("\n")),
        Action::Unlock { name, reason } => Ok(if client.force_unlock(&name, &reason).await? {
            format!("unlocked {name}")
        } else {
            format!("{name} was not locked")
        }),
    }
}

fn unix_ms(t: SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis())
}

/// The human-readable report of `inspect`.
pub fn describe(info: &LockInfo) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "lock: {}", info.name);
    match info.mode {
        None => {
            let _ = writeln!(s, "state: free");
        }
        Some(mode) => {
            let _ = writeln!(s, "state: held ({mode}), {} hold(s)", info.hold_count);
        }
    }
    if let Some(r) = info.remaining {
        let _ = writeln!(s, "remaining: {} ms", r.as_millis());
    }
    if let Some(h) = &info.holder {
        let _ = writeln!(s, "holder: {}", h.owner);
        if let Some(process) = &h.process {
            let _ = writeln!(s, "  process: {process}");
        }
        if let Some(host) = &h.host {
            let _ = writeln!(s, "  host: {host}");
        }
        if let Some(pid) = h.pid {
            let _ = writeln!(s, "  pid: {pid}");
        }
        if let Some(site) = &h.site {
            let _ = writeln!(s, "  site: {site}");
        }
        if let Some(at) = h.acquired_at {
            let _ = writeln!(s, "  acquired at: {} (unix ms)", unix_ms(at));
        }
    }
    for r in &info.readers {
        let _ = writeln!(
            s,
            "reader: {} ({} hold(s), {} ms left)",
            r.owner,
            r.holds,
            r.remaining.as_millis()
        );
    }
    for w in &info.waiting_writers {
        let _ = writeln!(s, "waiting writer: {w}");
    }
    if let Some(n) = info.permits {
        let _ = writeln!(s, "permits: {n}");
    }
    for p in &info.permit_holders {
        let h = &p.holder;
        let _ = writeln!(
            s,
            "permit: {} ({} ms left; pid {}, host {}, site {})",
            h.owner,
            p.remaining.as_millis(),
            h.pid.map_or("?".to_owned(), |pid| pid.to_string()),
            h.host.as_deref().unwrap_or("?"),
            h.site.as_deref().unwrap_or("?")
        );
    }
    if let Some(t) = info.fencing_token {
        let _ = writeln!(s, "fencing token: {t}");
    }
    if let Some(t) = info.last_fencing_token {
        let _ = writeln!(s, "last fencing token issued: {t}");
    }
    if let Some(f) = &info.last_forced_unlock {
        let _ = writeln!(
            s,
            "last forced unlock: at {} (unix ms) by {}, reason: {} (was {} held by {})",
            unix_ms(f.at),
            f.by.replace('\t', " "),
            f.reason,
            f.mode.map_or("an unknown mode", LockMode::as_str),
            f.previous_owner.split('\t').next().unwrap_or_default()
        );
    }
    s.trim_end().to_owned()
}
