//! Random identities: owner tokens and client ids.

use rand::Rng;

/// 128 random bits as 32 hex digits: a fresh owner token for one acquisition, so a release
/// or extension can prove it is the holder (seeds 000-003: the value is a random UUID).
pub(crate) fn owner_token() -> String {
    format!("{:032x}", rand::rng().random::<u128>())
}

/// 64 random bits as 16 hex digits, naming one client (one process's connection set).
pub(crate) fn client_id() -> String {
    format!("{:016x}", rand::rng().random::<u64>())
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_are_fixed_width_and_distinct() {
        let a = super::owner_token();
        let b = super::owner_token();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
        assert_eq!(super::client_id().len(), 16);
    }
}
