//! What the modes' unit tests share: the arguments of a script call as sent, and the check that
//! a mode's calls declare exactly the keys they touch. Each mode's own tests sit beside it
//! (`setnx/tests.rs`, `reentrant/tests.rs`, ..).

use std::sync::Arc;

use redis::Cmd;

use super::{Algorithm, Ask, HoldId};
use crate::key::{Kind, LockKey};

/// A script call's arguments after `EVALSHA` and the hash: `numkeys`, KEYS, ARGV.
pub(crate) fn args(cmd: &Cmd) -> Vec<Vec<u8>> {
    cmd.args_iter()
        .skip(2) // EVALSHA and the hash
        .map(|a| match a {
            redis::Arg::Simple(bytes) => bytes.to_vec(),
            _ => Vec::new(),
        })
        .collect()
}

pub(crate) fn id(nonce: &str) -> HoldId {
    HoldId {
        owner: Arc::from("t0k3n"),
        nonce: Arc::from(nonce),
        holder: Arc::from(""),
        lane: 0,
    }
}

pub(crate) fn ask(waits: bool, fencing: bool) -> Ask {
    Ask {
        unsure: false,
        want_holder_ttl: true,
        waits,
        fencing,
        permits: None,
    }
}

/// The KEYS of a script call: what `numkeys` says, and those arguments.
pub(crate) fn declared(cmd: &Cmd) -> Vec<Vec<u8>> {
    let all = args(cmd);
    let n: usize = std::str::from_utf8(&all[0]).unwrap().parse().unwrap();
    all[1..=n].to_vec()
}

/// The acquire, release and extend calls of `mode` (whose owner is a context, not a bare token)
/// declare `own` (its keys after the lock key's), the fencing counter after them when
/// fencing, and the extend `extend`.
pub(crate) fn assert_declares(mode: &Algorithm, own: &[Kind], extend: &[Kind]) {
    let key = LockKey::new("p", b"k", 64).unwrap();
    let keys = |kinds: &[Kind]| -> Vec<Vec<u8>> {
        std::iter::once(key.lock().to_vec())
            .chain(kinds.iter().map(|&kind| key.helper(kind)))
            .collect()
    };
    let own = keys(own);
    let fenced = [own.clone(), vec![key.helper(Kind::Fence)]].concat();
    for waits in [false, true] {
        let cmd = mode.acquire_script_cmd(&key, &id("n"), 1000, ask(waits, false));
        assert_eq!(declared(&cmd), own, "{}", mode.mode);
        let cmd = mode.acquire_script_cmd(&key, &id("n"), 1000, ask(waits, true));
        assert_eq!(declared(&cmd), fenced, "{}", mode.mode);
    }
    let release = mode.release_cmd(&key, &id("n"), "", true, false);
    assert_eq!(declared(&release), own, "{}", mode.mode);
    let extended = mode.extend_cmd(&key, &id("n"), 1000);
    assert_eq!(declared(&extended), keys(extend), "{}", mode.mode);
}

/// A mode refused on a Redlock quorum says so in its own name (`one_node_only!` takes the name
/// as text, so a typo would only show here), and nothing else of the default settings.
pub(crate) fn assert_refused_on_a_quorum_by_name(algorithm: &Algorithm) {
    let reason = algorithm.not_on_quorum.expect("refused on a quorum");
    let named = format!("the {} lock runs on one Redis node", algorithm.mode);
    assert!(reason.starts_with(&named), "{reason}");
    let settings = crate::config::Settings::default();
    match algorithm.admit(&settings, true) {
        Err(crate::error::Error::InvalidConfig { reason: said }) => assert_eq!(said, reason),
        other => panic!("expected the quorum refused, got {:?}", other.err()),
    }
    algorithm
        .admit(&settings, false)
        .expect("admitted elsewhere");
}
