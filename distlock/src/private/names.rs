//! The names a locked fn takes: its one key, or (`key = [..]`) several at once.

use std::borrow::Cow;

/// What the generated code passes to [`run`](super::run) as the key: the rendered name, or
/// an array of them for `key = [..]`.
pub trait LockNames {
    /// The names, as the runtime takes them.
    fn into_names(self) -> Names;
}

/// One name, or several taken at once ([`Client::lock_many`](crate::Client::lock_many)).
pub enum Names {
    /// `key = ".."`.
    One(Cow<'static, str>),
    /// `key = [..]`, in the order written (the set's own order is fixed by the runtime).
    Many(Vec<Cow<'static, str>>),
}

impl LockNames for Cow<'static, str> {
    fn into_names(self) -> Names {
        Names::One(self)
    }
}

impl<const N: usize> LockNames for [Cow<'static, str>; N] {
    fn into_names(self) -> Names {
        Names::Many(self.into())
    }
}
