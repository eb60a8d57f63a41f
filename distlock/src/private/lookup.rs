//! Finding the client a locked call runs on.

use std::borrow::Cow;
use std::sync::Arc;

use crate::client::Client;
use crate::error::Error;

// ---------------------------------------------------------------------------------------------
// Finding the client.

/// A value `client = ..` may evaluate to.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a lock client",
    label = "`client = ..` must evaluate to a `distlock::Client`",
    note = "accepted: `Client`, `&Client`, `Arc<Client>`, `Box<Client>`, and an `Option` of these (`None` returns `distlock::Error::NoClient`); leave `client` out to use the default set with `distlock::set_default`"
)]
pub trait AsLockClient {
    /// The client (a cheap clone: an `Arc` inside), or why there is none.
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error>;
}

impl AsLockClient for Client {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        Ok(Cow::Owned(self.clone()))
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for &T {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        (**self).lock_client()
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for &mut T {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        (**self).lock_client()
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for Arc<T> {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        (**self).lock_client()
    }
}

impl<T: AsLockClient + ?Sized> AsLockClient for Box<T> {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        (**self).lock_client()
    }
}

impl<T: AsLockClient> AsLockClient for Option<T> {
    fn lock_client(&self) -> Result<Cow<'static, Client>, Error> {
        self.as_ref().ok_or(Error::NoClient)?.lock_client()
    }
}

/// `client = expr`, evaluated where the fn's parameters are in scope. The result owns its
/// handle, so the body may move whatever the expression borrowed from.
pub fn client<C: AsLockClient + ?Sized>(client: &C) -> Result<Cow<'static, Client>, Error> {
    client.lock_client()
}

/// No `client = ..`: the task's (`scope_default`), else the process default, else
/// [`Error::NoClient`].
pub fn default_client() -> Result<Cow<'static, Client>, Error> {
    match crate::client::scoped_default() {
        Some(client) => Ok(Cow::Owned(client)),
        None => crate::client::default_client().map(Cow::Borrowed),
    }
}

/// No `client = ..` in a `mode = "redlock"` fn: the task's, else the quorum default, else
/// [`Error::NoClient`].
pub fn default_quorum_client() -> Result<Cow<'static, Client>, Error> {
    match crate::client::scoped_default() {
        Some(client) => Ok(Cow::Owned(client)),
        None => crate::client::default_quorum_client().map(Cow::Borrowed),
    }
}
