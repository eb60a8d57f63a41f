//! The commands every mode's calls become: their KEYS and ARGV, argument by argument.

use redis::Cmd;

use crate::algorithm::*;
use std::sync::Arc;

use crate::key::{Kind, LockKey};

fn args(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .skip(2) // EVALSHA and the hash
        .map(|a| match a {
            redis::Arg::Simple(bytes) => bytes.to_vec(),
            _ => Vec::new(),
        })
        .collect()
}

fn id(nonce: &str) -> HoldId {
    HoldId {
        owner: Arc::from("t0k3n"),
        nonce: Arc::from(nonce),
        holder: Arc::from(""),
        lane: 0,
    }
}

fn ask(waits: bool, fencing: bool) -> Ask {
    Ask {
        unsure: false,
        want_holder_ttl: true,
        waits,
        fencing,
        permits: None,
    }
}

/// The KEYS of a script call: what `numkeys` says, and those arguments.
fn declared(cmd: &Cmd) -> Vec<Vec<u8>> {
    let all = args(cmd);
    let n: usize = std::str::from_utf8(&all[0]).unwrap().parse().unwrap();
    all[1..=n].to_vec()
}

#[test]
fn only_a_waiting_acquire_sends_the_waits_flag() {
    let setnx = &super::SETNX;
    let key = LockKey::new("p", b"k", 64).unwrap();
    let once = args(&setnx.acquire_script_cmd(&key, &id(""), 1000, ask(false, false)));
    assert_eq!(once.len(), 1 + 1 + 7, "{once:?}");
    let waiting = args(&setnx.acquire_script_cmd(&key, &id(""), 1000, ask(true, false)));
    assert_eq!(waiting.len(), once.len() + 2, "{waiting:?}");
    assert_eq!(waiting.last(), Some(&b"1".to_vec()));
}

/// Every key a script touches on a call is declared, and only those: the fencing counter
/// when fencing, a setnx lock's waited-for mark when the caller waits (the acquire) and
/// always for its release (which deletes the mark with the lock).
#[test]
fn script_calls_declare_exactly_the_keys_they_touch() {
    let key = LockKey::new("p", b"k", 64).unwrap();
    let (lock, fence, waited) = (
        key.lock().to_vec(),
        key.helper(Kind::Fence),
        key.helper(Kind::Waited),
    );
    let setnx = &super::SETNX;
    for (waits, fencing, expected) in [
        (false, false, vec![lock.clone()]),
        (false, true, vec![lock.clone(), fence.clone()]),
        (true, false, vec![lock.clone(), waited.clone()]),
        (
            true,
            true,
            vec![lock.clone(), fence.clone(), waited.clone()],
        ),
    ] {
        let cmd = setnx.acquire_script_cmd(&key, &id(""), 1000, ask(waits, fencing));
        assert_eq!(declared(&cmd), expected, "waits {waits}, fencing {fencing}");
    }
    let release = setnx.release_cmd(&key, &id(""), "", false, false);
    assert_eq!(declared(&release), [lock.clone(), waited]);
    // A read/write lock's every call declares its readers and intents after the lock, a
    // semaphore's its permit slots.
    let rw = vec![
        lock.clone(),
        key.helper(Kind::Readers),
        key.helper(Kind::Intents),
    ];
    for (mode, own) in [
        (&*crate::reentrant::REENTRANT, vec![lock.clone()]),
        (&*crate::rwlock::READ, rw.clone()),
        (&*crate::rwlock::WRITE, rw.clone()),
        (
            &*crate::semaphore::SEMAPHORE,
            vec![lock.clone(), key.helper(Kind::Slots)],
        ),
    ] {
        let fenced = [own.clone(), vec![fence.clone()]].concat();
        for waits in [false, true] {
            let cmd = mode.acquire_script_cmd(&key, &id("n"), 1000, ask(waits, false));
            assert_eq!(declared(&cmd), own, "{}", mode.mode);
            let cmd = mode.acquire_script_cmd(&key, &id("n"), 1000, ask(waits, true));
            assert_eq!(declared(&cmd), fenced, "{}", mode.mode);
        }
        let release = mode.release_cmd(&key, &id("n"), "", true, false);
        assert_eq!(declared(&release), own, "{}", mode.mode);
    }
    for mode in [&*crate::rwlock::READ, &*crate::rwlock::WRITE] {
        assert_eq!(declared(&mode.extend_cmd(&key, &id("n"), 1000)), rw);
    }
    for mode in [&*super::SETNX, &*crate::reentrant::REENTRANT] {
        assert_eq!(
            declared(&mode.extend_cmd(&key, &id("n"), 1000)),
            [&lock[..]]
        );
    }
    // A semaphore's every call declares its permit slots after the lock.
    let semaphore = crate::semaphore::SEMAPHORE.extend_cmd(&key, &id("n"), 1000);
    assert_eq!(declared(&semaphore), [lock, key.helper(Kind::Slots)]);
}

/// A semaphore's acquire always sends the waits flag, so that its number of permits has its
/// place (ARGV[9]); the other modes never send the number.
#[test]
fn a_semaphore_sends_its_permits_after_the_waits_flag() {
    let key = LockKey::new("p", b"k", 64).unwrap();
    let semaphore = &crate::semaphore::SEMAPHORE;
    for (waits, flag) in [(false, "0"), (true, "1")] {
        let ask = Ask {
            permits: Some(4),
            ..ask(waits, false)
        };
        let sent = args(&semaphore.acquire_script_cmd(&key, &id(""), 1000, ask));
        assert_eq!(sent.len(), 1 + 2 + 9, "{sent:?}");
        assert_eq!(sent[sent.len() - 2..], [flag.as_bytes(), b"4"]);
    }
}

#[test]
fn only_an_acquire_that_does_not_wait_asks_set_for_the_old_value() {
    let setnx = &super::SETNX;
    let key = LockKey::new("p", b"k", 64).unwrap();
    let id = id("");
    let words = |waits| -> Vec<Vec<u8>> {
        let call = setnx.acquire_cmd(&key, &id, 1000, ask(waits, false), false);
        assert!(call.plain() && call.get != waits);
        call.cmd()
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(bytes) => bytes.to_vec(),
                _ => Vec::new(),
            })
            .collect()
    };
    let set = [&b"SET"[..], b"p:{k}", b"t0k3n", b"NX", b"PX", b"1000"];
    assert_eq!(words(true), set);
    assert_eq!(words(false)[..6], set);
    assert_eq!(words(false)[6..], [b"GET".to_vec()]);
    // A server that refused `GET` gets the script from a caller that does not wait; a
    // waiter's plain `SET .. NX PX` needs no `GET` and goes on as before.
    assert!(!setnx
        .acquire_cmd(&key, &id, 1000, ask(false, false), true)
        .plain());
    assert!(setnx
        .acquire_cmd(&key, &id, 1000, ask(true, false), true)
        .plain());
}

#[test]
fn a_release_leaves_off_its_trailing_empty_arguments_only() {
    let setnx = &super::SETNX;
    let key = LockKey::new("p", b"k", 64).unwrap();
    let keys = [&b"2"[..], b"p:{k}", b"p:#waited:{k}"];
    let with =
        |rest: &[&[u8]]| -> Vec<Vec<u8>> { keys.iter().chain(rest).map(|a| a.to_vec()).collect() };
    let plain = setnx.release_cmd(&key, &id(""), "", false, false);
    assert_eq!(args(&plain), with(&[b"t0k3n"]));
    let listening = setnx.release_cmd(&key, &id(""), "", false, true);
    assert_eq!(args(&listening), with(&[b"t0k3n", b"", b"", b"", b"1"]));
    let quorum = setnx.release_cmd(&key, &id(""), "w1", false, false);
    assert_eq!(args(&quorum), with(&[b"t0k3n", b"", b"w1"]));
    let sharded = setnx.release_cmd(&key, &id("n"), "", true, false);
    assert_eq!(args(&sharded), with(&[b"t0k3n", b"n", b"", b"s"]));
}

/// The hot commands packed straight into a connection's output are the bytes redis-rs packs
/// for the same arguments.
#[test]
fn commands_packed_directly_match_their_cmd() {
    use crate::conn::pack::{pack, to_cmd};
    let setnx = &super::SETNX;
    let key = LockKey::new("p", b"k", 64).unwrap();
    let id = id("");
    for waits in [false, true] {
        let call = setnx.acquire_cmd(&key, &id, 1000, ask(waits, false), false);
        let mut out = Vec::new();
        pack(&mut out, &call.set_nx());
        assert_eq!(out, call.cmd().get_packed_command(), "waits {waits}");
    }
    for (wake, sharded, listening) in [("", false, false), ("w1", true, true)] {
        let args = setnx.release_args(&key, &id, wake, sharded, listening);
        for source in [false, true] {
            let call = ScriptCall {
                script: &setnx.release,
                source,
                args: &args,
            };
            let mut out = Vec::new();
            pack(&mut out, &call);
            assert_eq!(out, to_cmd(&call).get_packed_command());
        }
        let cmd = setnx.release_cmd(&key, &id, wake, sharded, listening);
        assert_eq!(
            cmd.get_packed_command(),
            to_cmd(&ScriptCall {
                script: &setnx.release,
                source: false,
                args: &args
            })
            .get_packed_command()
        );
    }
}
