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

/// `t` for people: the UTC time in ISO 8601 (no time-zone database without a dependency for
/// it) and how long ago it was by this machine's clock, e.g.
/// `2026-11-29T07:12:03.120Z (12 s ago)`.
fn when(t: SystemTime, now: SystemTime) -> String {
    let age = match now.duration_since(t) {
        Ok(ago) => format!("{} ago", span(ago.as_secs())),
        // The holder's clock is ahead of this one.
        Err(ahead) => format!(
            "in {}, by this machine's clock",
            span(ahead.duration().as_secs())
        ),
    };
    format!("{} ({age})", utc(t))
}

/// `secs` in the two largest units: `12 s`, `3 min 4 s`, `2 h 5 min`, `3 d 4 h`.
fn span(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, _) => format!("{h} h {m} min"),
        _ => format!("{d} d {h} h"),
    }
}

/// `t` as `YYYY-MM-DDTHH:MM:SS.mmmZ`; the civil date from the day count as in Howard
/// Hinnant's `civil_from_days` (proleptic Gregorian calendar).
fn utc(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    let (days, ms_of_day) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let secs = ms_of_day / 1000;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        ms_of_day % 1000
    )
}

/// The human-readable report of `inspect`.
pub fn describe(info: &LockInfo) -> String {
    describe_at(info, SystemTime::now())
}

/// [`describe`], with ages counted to `now`.
fn describe_at(info: &LockInfo, now: SystemTime) -> String {
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
            let _ = writeln!(s, "  acquired at: {}", when(at, now));
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
        let slot = p
            .slot
            .map_or(String::new(), |slot| format!(" in slot {slot}"));
        let _ = writeln!(
            s,
            "permit{slot}: {} ({} ms left; pid {}, host {}, site {})",
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
            "last forced unlock: at {} by {}, reason: {} (was {} held by {})",
            when(f.at, now),
            f.by.replace('\t', " "),
            f.reason,
            f.mode.map_or("an unknown mode", LockMode::as_str),
            f.previous_owner.split('\t').next().unwrap_or_default()
        );
    }
    s.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Holder;

    fn at(unix_ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(unix_ms)
    }

    #[test]
    fn times_are_utc_dates_with_their_age() {
        let now = at(1_795_936_323_120); // 2026-11-29T07:12:03.120Z
        assert_eq!(utc(now), "2026-11-29T07:12:03.120Z");
        assert_eq!(utc(at(0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(at(951_782_400_000)), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc(at(4_107_542_399_999)), "2100-02-28T23:59:59.999Z");
        let ago = |secs: u64| when(now - Duration::from_secs(secs), now);
        assert_eq!(ago(12), "2026-11-29T07:11:51.120Z (12 s ago)");
        assert!(ago(184).ends_with("(3 min 4 s ago)"), "{}", ago(184));
        assert!(ago(7_500).ends_with("(2 h 5 min ago)"), "{}", ago(7_500));
        assert!(ago(3 * 86_400 + 4 * 3600).ends_with("(3 d 4 h ago)"));
        let ahead = when(now + Duration::from_secs(2), now);
        assert!(
            ahead.ends_with("(in 2 s, by this machine's clock)"),
            "{ahead}"
        );
    }

    #[test]
    fn the_report_shows_when_the_hold_was_taken_not_unix_milliseconds() {
        let now = at(1_795_936_323_120);
        let info = LockInfo {
            name: "report".into(),
            mode: Some(LockMode::SetNx),
            remaining: Some(Duration::from_secs(18)),
            holder: Some(Holder {
                owner: "token".into(),
                acquired_at: Some(now - Duration::from_secs(12)),
                ..Holder::default()
            }),
            hold_count: 1,
            readers: Vec::new(),
            waiting_writers: Vec::new(),
            permits: None,
            permit_holders: Vec::new(),
            fencing_token: None,
            last_fencing_token: None,
            last_forced_unlock: None,
        };
        let text = describe_at(&info, now);
        assert!(
            text.contains("acquired at: 2026-11-29T07:11:51.120Z (12 s ago)"),
            "{text}"
        );
        assert!(!text.contains("unix ms"), "{text}");
    }

    #[test]
    fn the_report_shows_a_fenced_permits_slot() {
        let permit = |slot| crate::inspect::PermitHolder {
            holder: Holder {
                owner: "token".into(),
                ..Holder::default()
            },
            remaining: Duration::from_secs(3),
            slot,
        };
        let info = LockInfo {
            name: "pool".into(),
            mode: Some(LockMode::Semaphore),
            remaining: Some(Duration::from_secs(3)),
            holder: None,
            hold_count: 2,
            readers: Vec::new(),
            waiting_writers: Vec::new(),
            permits: Some(3),
            permit_holders: vec![permit(Some(1)), permit(None)],
            fencing_token: None,
            last_fencing_token: None,
            last_forced_unlock: None,
        };
        let text = describe_at(&info, at(1_795_936_323_120));
        assert!(
            text.contains("permit in slot 1: token (3000 ms left"),
            "{text}"
        );
        assert!(text.contains("permit: token (3000 ms left"), "{text}");
    }
}
