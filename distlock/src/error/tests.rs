//! The error classes and their HTTP statuses.

use super::*;

fn transport() -> Error {
    transport_of("k")
}

fn transport_of(name: &str) -> Error {
    Error::redis(
        Op::Acquire,
        name,
        std::io::Error::from(std::io::ErrorKind::ConnectionReset).into(),
    )
}

fn lost() -> Error {
    Error::LeaseLost {
        name: "k".into(),
        held_for: Duration::from_secs(1),
    }
}

/// A waiter that queued behind this process's other waiters and never sent an attempt of
/// its own (the lock passed among them, by hand-off or their own attempts) says so, not
/// "(0 attempts)".
#[test]
fn a_timeout_says_how_it_waited() {
    let timeout = |attempts| Error::Timeout {
        name: "k".into(),
        waited: Duration::from_secs(2),
        attempts,
    };
    assert_eq!(
        timeout(0).to_string(),
        "lock `k` still busy after waiting 2s in line behind this process's other waiters \
         for it (no attempt of its own sent)"
    );
    assert_eq!(
        timeout(1).to_string(),
        "lock `k` still busy after waiting 2s (1 attempt)"
    );
    assert_eq!(
        timeout(3).to_string(),
        "lock `k` still busy after waiting 2s (3 attempts)"
    );
}

#[test]
fn each_error_is_in_one_group_and_maps_to_its_status() {
    let busy = Error::Busy { name: "k".into() };
    let timeout = Error::Timeout {
        name: "k".into(),
        waited: Duration::from_secs(1),
        attempts: 3,
    };
    let short = Error::QuorumNotReached {
        name: "k".into(),
        acked: 1,
        needed: 2,
        nodes: 3,
        errors: vec![NodeError {
            node: "n".into(),
            reason: "timed out".into(),
            retryable: true,
        }],
    };
    let refused = Error::QuorumNotReached {
        name: "k".into(),
        acked: 0,
        needed: 2,
        nodes: 3,
        errors: vec![
            NodeError {
                node: "n".into(),
                reason: "OOM".into(),
                retryable: false,
            },
            NodeError {
                node: "m".into(),
                reason: "OOM".into(),
                retryable: false,
            },
        ],
    };
    let bad_name = Error::InvalidName {
        name: "".into(),
        reason: "the name is empty".into(),
    };
    // (error, contended, transient, outcome unknown, retryable, status)
    let cases = [
        (busy, true, false, false, true, 409),
        (timeout, true, false, false, true, 409),
        (transport(), false, true, false, true, 503),
        (short, false, true, false, true, 503),
        (refused, false, false, false, false, 500),
        (lost(), false, false, true, false, 500),
        (bad_name, false, false, false, false, 400),
        (Error::NoClient, false, false, false, false, 500),
        (
            Error::ShutDown { name: "k".into() },
            false,
            false,
            false,
            false,
            503,
        ),
        (Error::config("x"), false, false, false, false, 500),
        (
            Error::StaleToken {
                token: FencingToken::new(1),
                highest: FencingToken::new(2),
            },
            false,
            false,
            false,
            false,
            409,
        ),
        (
            Error::Store {
                source: "connection closed".into(),
            },
            false,
            false,
            false,
            false,
            500,
        ),
        (
            Error::PermitsMismatch {
                name: "k".into(),
                permits: 3,
                recorded: 4,
            },
            false,
            false,
            false,
            false,
            500,
        ),
    ];
    for (e, contended, transient, unknown, retryable, status) in cases {
        assert_eq!(e.is_contended(), contended, "{e}");
        assert_eq!(e.is_transient(), transient, "{e}");
        assert_eq!(e.is_outcome_unknown(), unknown, "{e}");
        assert_eq!(e.is_retryable(), retryable, "{e}");
        assert_eq!(e.http_status(), status, "{e}");
    }
}

/// Each error names what its name is the name of: the words come from `Primitive` alone, and
/// a name made from a `&str` (as here, and in an application's tests) is a lock's.
#[test]
fn errors_name_the_primitive() {
    use crate::mode::Primitive;
    let name = |primitive| LockName::new("x", primitive);
    let busy = |primitive| {
        Error::Busy {
            name: name(primitive),
        }
        .to_string()
    };
    assert_eq!(busy(Primitive::Lock), "lock `x` is held by another owner");
    assert_eq!(
        busy(Primitive::Semaphore),
        "semaphore `x` is held by another owner"
    );
    assert_eq!(
        busy(Primitive::ReadLock),
        "read lock `x` is held by another owner"
    );
    assert_eq!(
        busy(Primitive::WriteLock),
        "write lock `x` is held by another owner"
    );
    assert_eq!(
        busy(Primitive::Election),
        "election `x` is held by another owner"
    );
    assert_eq!(
        busy(Primitive::LockSet),
        "lock set `x` is held by another owner"
    );
    assert_eq!(
        busy(Primitive::WriteLockSet),
        "write lock set `x` is held by another owner"
    );
    // Every variant that carries a name says it with its primitive.
    let semaphore = || name(Primitive::Semaphore);
    let texts = [
        Error::Timeout {
            name: semaphore(),
            waited: Duration::from_secs(2),
            attempts: 1,
        },
        Error::LeaseLost {
            name: semaphore(),
            held_for: Duration::from_secs(1),
        },
        Error::NotOwner { name: semaphore() },
        Error::QuorumNotReached {
            name: semaphore(),
            acked: 1,
            needed: 2,
            nodes: 3,
            errors: Vec::new(),
        },
        Error::Reentrant { name: semaphore() },
        Error::Upgrade { name: semaphore() },
        Error::WrongType {
            name: semaphore(),
            found: "list".into(),
        },
        Error::ModeConflict {
            name: semaphore(),
            held_as: LockMode::SetNx,
            requested: LockMode::Semaphore,
        },
        Error::PermitsMismatch {
            name: semaphore(),
            permits: 3,
            recorded: 4,
        },
        Error::ReplicasNotConfirmed {
            name: semaphore(),
            wanted: 1,
            confirmed: 0,
            timeout: Duration::from_millis(100),
        },
        Error::ShutDown { name: semaphore() },
    ];
    for e in texts {
        let text = e.to_string();
        assert!(text.contains("semaphore `x`"), "{text}");
        assert!(!text.contains("lock `x`"), "{text}");
        assert_eq!(e.name(), Some("x"));
    }
    let invalid = Error::InvalidName {
        name: LockName::new("", Primitive::Election),
        reason: "the name is empty".into(),
    };
    assert_eq!(
        invalid.to_string(),
        "invalid election name ``: the name is empty"
    );
    // The name alone, where the name is wanted: as the `String` it was.
    let name = name(Primitive::Semaphore);
    assert_eq!(name.to_string(), "x");
    assert_eq!(name, "x");
    assert_eq!(name.primitive(), Primitive::Semaphore);
    assert_eq!(LockName::from("x").primitive(), Primitive::Lock);
}
