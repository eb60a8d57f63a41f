//! The commands a reentrant lock's calls become: their KEYS.

use crate::algorithm::calls_under_test::{assert_declares, assert_refused_on_a_quorum_by_name};

#[test]
fn script_calls_declare_exactly_the_keys_they_touch() {
    assert_declares(&super::REENTRANT, &[], &[]);
}

#[test]
fn a_quorum_is_refused_in_the_modes_name() {
    assert_refused_on_a_quorum_by_name(&super::REENTRANT);
}
