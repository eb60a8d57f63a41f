//! The commands a semaphore's calls become: their KEYS and ARGV.

use crate::algorithm::calls_under_test::{args, ask, assert_declares, id};
use crate::algorithm::Ask;
use crate::key::LockKey;

#[test]
fn script_calls_declare_exactly_the_keys_they_touch() {
    assert_declares(&super::SEMAPHORE, &[], &[]);
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
        assert_eq!(sent.len(), 1 + 1 + 9, "{sent:?}");
        assert_eq!(sent[sent.len() - 2..], [flag.as_bytes(), b"4"]);
    }
}
