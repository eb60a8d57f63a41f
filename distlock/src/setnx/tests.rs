//! The commands a setnx lock's calls become: their KEYS and ARGV, argument by argument (the
//! other modes' beside them, with the helpers in `algorithm/calls_under_test.rs`).

use crate::algorithm::calls_under_test::{args, ask, declared, id};
use crate::algorithm::*;
use crate::key::{Kind, LockKey};

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
/// when fencing, the waited-for mark when the caller waits (the acquire) and always for its
/// release (which deletes the mark with the lock).
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
    assert_eq!(
        declared(&setnx.extend_cmd(&key, &id("n"), 1000)),
        [&lock[..]]
    );
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

/// The watchdog's renewals, packed straight into a connection's output, are the bytes of the
/// commands the other connections get: the extend script (by hash and, for a server that
/// lacks it, with its source) and the native `SET .. IFEQ`.
#[test]
fn renewals_packed_directly_match_their_cmd() {
    use crate::conn::pack::{pack, pipeline, to_cmd};
    let setnx = &super::SETNX;
    let key = LockKey::new("p", b"k", 64).unwrap();
    let id = id("n");
    let mut expected = redis::cmd("EVALSHA");
    expected
        .arg(setnx.extend.get_hash())
        .arg(1)
        .arg(key.lock())
        .arg("t0k3n")
        .arg(1000)
        .arg("n");
    let cmd = setnx.extend_cmd(&key, &id, 1000);
    assert_eq!(cmd.get_packed_command(), expected.get_packed_command());
    for source in [false, true] {
        let call = setnx.extend_call(&key, &id, 1000, source);
        let mut out = Vec::new();
        pack(&mut out, &call);
        assert_eq!(out, to_cmd(&call).get_packed_command(), "source {source}");
    }
    let native = super::native_extend(setnx, &key, &id, 1000).expect("setnx");
    let mut out = Vec::new();
    pack(&mut out, &native);
    assert_eq!(out, to_cmd(&native).get_packed_command());
    let calls = [
        setnx.extend_call(&key, &id, 1000, false),
        setnx.extend_call(&key, &id, 2000, true),
    ];
    let mut out = Vec::new();
    for call in &calls {
        pack(&mut out, call);
    }
    assert_eq!(out, pipeline(&calls).get_packed_pipeline());
}
