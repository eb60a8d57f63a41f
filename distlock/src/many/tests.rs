//! A set's calls: each kind of key once per name, in the set's order; the answers name the
//! member they concern.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, Value};

use crate::algorithm::calls_under_test::assert_refused_on_a_quorum_by_name;
use crate::algorithm::{parse_acquire, Ask, Attempt, HoldId};
use crate::error::Error;
use crate::key::{Kind, LockKey};
use crate::mode::LockMode;

fn set(names: &[&str]) -> LockKey {
    let keys = names
        .iter()
        .map(|n| LockKey::new("p", n.as_bytes(), 64).expect("valid name"))
        .collect();
    LockKey::set(keys).expect("a set")
}

fn id() -> HoldId {
    HoldId {
        owner: Arc::from("t0k3n"),
        nonce: Arc::from(""),
        holder: Arc::from(""),
        lane: 0,
    }
}

/// The KEYS of a script call.
fn declared(cmd: &Cmd) -> Vec<Vec<u8>> {
    let all: Vec<Vec<u8>> = cmd
        .args_iter()
        .skip(2)
        .map(|a| match a {
            redis::Arg::Simple(bytes) => bytes.to_vec(),
            _ => Vec::new(),
        })
        .collect();
    let n: usize = std::str::from_utf8(&all[0]).unwrap().parse().unwrap();
    all[1..=n].to_vec()
}

#[test]
fn every_call_declares_each_kind_of_key_once_per_name_in_the_sets_order() {
    let key = set(&["b", "a", "c"]);
    let each =
        |f: &dyn Fn(&LockKey) -> Vec<u8>| -> Vec<Vec<u8>> { key.members().iter().map(f).collect() };
    let locks = each(&|m| m.lock().to_vec());
    let fences = each(&|m| m.helper(Kind::Fence));
    let marks = each(&|m| m.helper(Kind::Waited));
    let many = &super::MANY;
    for (waits, fencing) in [(false, false), (true, false), (false, true), (true, true)] {
        let ask = Ask {
            unsure: false,
            want_holder_ttl: true,
            waits,
            fencing,
            permits: None,
        };
        let id = id();
        let call = many.acquire_cmd(&key, &id, 1000, ask, false);
        assert!(!call.plain(), "a set is always its script");
        let mut expected = locks.clone();
        if fencing {
            expected.extend(fences.iter().cloned());
        }
        if waits {
            expected.extend(marks.iter().cloned());
        }
        assert_eq!(
            declared(&call.cmd()),
            expected,
            "waits {waits}, fencing {fencing}"
        );
    }
    let release = many.release_cmd(&key, &id(), "", false, false);
    assert_eq!(declared(&release), [locks.clone(), marks].concat());
    assert_eq!(declared(&many.extend_cmd(&key, &id(), 1000)), locks);
}

#[test]
fn an_answer_names_the_member_it_concerns() {
    let key = set(&["b", "a", "c"]);
    let reply = |items: Vec<Value>| parse_acquire(LockMode::SetNx, &key, Value::Array(items));
    let int = Value::Int;
    let text = |s: &str| Value::BulkString(s.as_bytes().to_vec());
    assert_eq!(
        reply(vec![int(0), int(40), int(2)]).unwrap(),
        Attempt::Busy {
            holder_ttl: Some(Duration::from_millis(40)),
            member: 1
        }
    );
    let second = key.members()[1].name().to_owned();
    match reply(vec![int(-1), text("hash"), int(2)]) {
        Err(Error::WrongType { name, found }) => {
            assert_eq!((name.as_str(), found.as_str()), (second.as_str(), "hash"))
        }
        other => panic!("{other:?}"),
    }
    match reply(vec![int(-3), text("reentrant"), int(2)]) {
        Err(Error::ModeConflict { name, .. }) => assert_eq!(name, second),
        other => panic!("{other:?}"),
    }
    // A place outside the set is no answer of ours.
    for place in [0, 4, -1] {
        let err = reply(vec![int(0), int(40), int(place)]).unwrap_err();
        assert!(matches!(err, Error::Redis { .. }), "{place}: {err}");
    }
    // A single name's answers have no place: the name itself.
    let one = LockKey::new("p", b"a", 64).unwrap();
    assert_eq!(
        parse_acquire(LockMode::SetNx, &one, Value::Array(vec![int(0), int(5)])).unwrap(),
        Attempt::Busy {
            holder_ttl: Some(Duration::from_millis(5)),
            member: 0
        }
    );
}

/// A write set's calls: each name's lock hash, then each name's readers, then each name's
/// intents (the read/write lock's helpers, kind by kind), then each counter when fenced: the
/// layout `write_head.lua` reads. No waited-for mark (the read/write lock publishes on every
/// release), and an upgrade refusal names its member.
#[test]
fn a_write_set_declares_each_names_hash_readers_intents_and_counter() {
    let key = set(&["b", "a", "c"]);
    let each =
        |f: &dyn Fn(&LockKey) -> Vec<u8>| -> Vec<Vec<u8>> { key.members().iter().map(f).collect() };
    let locks = each(&|m| m.lock().to_vec());
    let readers = each(&|m| m.helper(Kind::Readers));
    let intents = each(&|m| m.helper(Kind::Intents));
    let fences = each(&|m| m.helper(Kind::Fence));
    let keys = [locks, readers, intents].concat();
    let write = &super::WRITE_MANY;
    for (waits, fencing) in [(false, false), (true, false), (false, true), (true, true)] {
        let ask = Ask {
            unsure: false,
            want_holder_ttl: true,
            waits,
            fencing,
            permits: None,
        };
        let id = id();
        let call = write.acquire_cmd(&key, &id, 1000, ask, false);
        assert!(!call.plain(), "a set is always its script");
        let mut expected = keys.clone();
        if fencing {
            expected.extend(fences.iter().cloned());
        }
        assert_eq!(
            declared(&call.cmd()),
            expected,
            "waits {waits}, fencing {fencing}"
        );
    }
    assert_eq!(
        declared(&write.release_cmd(&key, &id(), "", true, false)),
        keys
    );
    assert_eq!(declared(&write.extend_cmd(&key, &id(), 1000)), keys);
    let reply = parse_acquire(
        LockMode::Write,
        &key,
        Value::Array(vec![
            Value::Int(-2),
            Value::BulkString(b"upgrade".to_vec()),
            Value::Int(3),
        ]),
    );
    match reply {
        Err(Error::Upgrade { name }) => assert_eq!(name, key.members()[2].name()),
        other => panic!("{other:?}"),
    }
}

/// A write set runs where the read/write lock runs, and says so as a write lock.
#[test]
fn a_write_set_is_refused_on_a_quorum_as_a_write_lock() {
    assert_refused_on_a_quorum_by_name(&super::WRITE_MANY);
    super::MANY
        .admit(&crate::config::Settings::default(), true)
        .expect("a set of setnx locks runs on a quorum");
}
