//! The lock modes, as users name them: in errors, inspection, traces and the attributes.

/// The mode a lock is held in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockMode {
    /// [`Client::lock`](crate::Client::lock) (also a Redlock quorum's lock).
    SetNx,
    /// [`Client::reentrant`](crate::Client::reentrant).
    Reentrant,
    /// [`Client::read`](crate::Client::read): one or more readers hold it.
    Read,
    /// [`Client::write`](crate::Client::write).
    Write,
    /// [`Client::semaphore`](crate::Client::semaphore): up to its number of permits at once.
    Semaphore,
}

impl std::fmt::Display for LockMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl LockMode {
    /// How traces, metrics and messages name the mode.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LockMode::SetNx => "setnx",
            LockMode::Reentrant => "reentrant",
            LockMode::Read => "read",
            LockMode::Write => "write",
            LockMode::Semaphore => "semaphore",
        }
    }

    /// The mode a script names: `setnx`, `reentrant`, `read`, `write` or `semaphore`.
    pub(crate) fn named(name: &str) -> Option<LockMode> {
        Some(match name {
            "setnx" => LockMode::SetNx,
            "reentrant" => LockMode::Reentrant,
            "read" => LockMode::Read,
            "write" => LockMode::Write,
            "semaphore" => LockMode::Semaphore,
            _ => return None,
        })
    }
}
