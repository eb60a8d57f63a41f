//! The commands a reentrant lock's calls become: their KEYS.

use crate::algorithm::calls_under_test::assert_declares;

#[test]
fn script_calls_declare_exactly_the_keys_they_touch() {
    assert_declares(&super::REENTRANT, &[], &[]);
}
