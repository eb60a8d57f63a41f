//! The commands a semaphore's calls become: their KEYS and ARGV.

use crate::algorithm::calls_under_test::{args, ask, assert_declares, id};
use crate::algorithm::Ask;
use crate::config::Settings;
use crate::error::Error;
use crate::key::{Kind, LockKey};

/// Every call declares the permit slots after the lock key.
#[test]
fn script_calls_declare_exactly_the_keys_they_touch() {
    assert_declares(&super::SEMAPHORE, &[Kind::Slots], &[Kind::Slots]);
}

/// A semaphore's acquire always sends the waits flag, so that its number of permits has its
/// place (ARGV[9]); the other modes never send the number.
#[test]
fn a_semaphore_sends_its_permits_after_the_waits_flag() {
    let key = LockKey::new("p", b"k", 64).unwrap();
    let semaphore = &super::SEMAPHORE;
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

/// The semaphore's own refusals, asked by the acquire loop through `Algorithm::admit`: a
/// quorum, in its own words, and zero permits; any number above passes.
#[test]
fn a_semaphore_refuses_a_quorum_and_zero_permits() {
    let semaphore = &super::SEMAPHORE;
    let permits = |n| Settings {
        permits: Some(n),
        ..Settings::default()
    };
    let reason = |r: Result<(), Error>| match r {
        Err(Error::InvalidConfig { reason }) => reason,
        other => panic!("expected a refusal, got {:?}", other.err()),
    };
    assert!(reason(semaphore.admit(&permits(2), true)).contains("does not bound the holders"));
    assert!(reason(semaphore.admit(&permits(0), false)).contains("at least 1 permit"));
    semaphore
        .admit(&permits(1), false)
        .expect("one permit is a semaphore");
}
