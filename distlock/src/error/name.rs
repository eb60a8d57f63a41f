//! The name an error concerns, with what it names.

use std::fmt;
use std::ops::Deref;

use crate::mode::Primitive;

/// The name an [`Error`](crate::Error) concerns, and what it is the name of: a lock, a
/// semaphore, an election, ... The error's message says both (``semaphore `pool` is held by
/// another owner``); `Display` and [`as_str`](Self::as_str) give the name alone, as the
/// `String` these fields were before, and it compares equal to a `&str` of the name.
///
/// ```
/// # async fn demo(client: distlock::Client) {
/// use distlock::{Error, Primitive};
///
/// match client.semaphore("pool", 4).try_acquire().await {
///     Err(Error::Busy { name }) => {
///         assert_eq!(name, "pool");
///         assert_eq!(name.primitive(), Primitive::Semaphore);
///     }
///     _ => {}
/// }
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockName {
    name: String,
    primitive: Primitive,
}

impl LockName {
    /// `name`, the name of a `primitive`.
    pub fn new(name: impl Into<String>, primitive: Primitive) -> Self {
        LockName {
            name: name.into(),
            primitive,
        }
    }

    /// The name (shortened when it is very long).
    pub fn as_str(&self) -> &str {
        &self.name
    }

    /// What it is the name of.
    pub fn primitive(&self) -> Primitive {
        self.primitive
    }

    /// The name, as a `String`.
    pub fn into_string(self) -> String {
        self.name
    }

    /// The primitive and the name, as messages say them: ``semaphore `pool` ``.
    pub(crate) fn described(&self) -> String {
        format!("{} `{}`", self.primitive, self.name)
    }
}

/// A lock's name (an error made by hand, as a test does).
impl From<&str> for LockName {
    fn from(name: &str) -> Self {
        LockName::new(name, Primitive::Lock)
    }
}

/// A lock's name (an error made by hand, as a test does).
impl From<String> for LockName {
    fn from(name: String) -> Self {
        LockName::new(name, Primitive::Lock)
    }
}

impl From<LockName> for String {
    fn from(name: LockName) -> Self {
        name.name
    }
}

impl Deref for LockName {
    type Target = str;

    fn deref(&self) -> &str {
        &self.name
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

impl PartialEq<str> for LockName {
    fn eq(&self, other: &str) -> bool {
        self.name == other
    }
}

impl PartialEq<&str> for LockName {
    fn eq(&self, other: &&str) -> bool {
        self.name == *other
    }
}

impl PartialEq<String> for LockName {
    fn eq(&self, other: &String) -> bool {
        &self.name == other
    }
}
