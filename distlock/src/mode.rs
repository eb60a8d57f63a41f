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

impl LockMode {
    /// What a name taken in this mode is called in messages: a reentrant lock is a lock.
    pub(crate) fn primitive(self) -> Primitive {
        match self {
            LockMode::SetNx | LockMode::Reentrant => Primitive::Lock,
            LockMode::Read => Primitive::ReadLock,
            LockMode::Write => Primitive::WriteLock,
            LockMode::Semaphore => Primitive::Semaphore,
        }
    }
}

/// What a name is the name of, as errors say it: ``semaphore `pool` ``,
/// ``read lock `doc:7` ``, ``election `scheduler` ``. The one home of these words; [`LockName`](crate::LockName)
/// carries it with the name.
///
/// ```
/// use distlock::{Error, LockName, Primitive};
///
/// let busy = Error::Busy { name: LockName::new("pool", Primitive::Semaphore) };
/// assert_eq!(busy.to_string(), "semaphore `pool` is held by another owner");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Primitive {
    /// [`Client::lock`](crate::Client::lock) (also a Redlock quorum's) and
    /// [`Client::reentrant`](crate::Client::reentrant).
    Lock,
    /// [`Client::read`](crate::Client::read).
    ReadLock,
    /// [`Client::write`](crate::Client::write).
    WriteLock,
    /// [`Client::semaphore`](crate::Client::semaphore).
    Semaphore,
    /// [`Client::election`](crate::Client::election).
    Election,
    /// [`Client::lock_many`](crate::Client::lock_many): its name is the set's, `[a, b]`.
    LockSet,
    /// [`Client::write_many`](crate::Client::write_many): its name is the set's, `[a, b]`.
    WriteLockSet,
}

impl Primitive {
    /// The words for it: `lock`, `read lock`, `write lock`, `semaphore`, `election`,
    /// `lock set`, `write lock set`.
    pub fn as_str(self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::ReadLock => "read lock",
            Primitive::WriteLock => "write lock",
            Primitive::Semaphore => "semaphore",
            Primitive::Election => "election",
            Primitive::LockSet => "lock set",
            Primitive::WriteLockSet => "write lock set",
        }
    }

    /// A set of names each taken as this: `lock_many`'s and `write_many`'s.
    pub(crate) fn set(self) -> Primitive {
        match self {
            Primitive::WriteLock => Primitive::WriteLockSet,
            _ => Primitive::LockSet,
        }
    }
}

impl std::fmt::Display for Primitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
