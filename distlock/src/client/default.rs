//! The process-wide default clients the attributes use when they name none.

use std::sync::OnceLock;

use crate::error::Error;

use super::Client;

static DEFAULT: OnceLock<Client> = OnceLock::new();
static DEFAULT_QUORUM: OnceLock<Client> = OnceLock::new();

/// Sets the client that locked functions use when they name no `client = ..`. A quorum
/// client ([`Client::quorum`]) and a single-node one have a default each, so a process can
/// set both: `mode = "redlock"` fns use the quorum default, every other fn the single-node
/// one (or the quorum default if that is the only one). Returns the client back as an error
/// if a default of its kind was already set (the first one stays).
pub fn set_default(client: Client) -> Result<(), Client> {
    if client.is_quorum() {
        DEFAULT_QUORUM.set(client)
    } else {
        DEFAULT.set(client)
    }
}

/// The single-node client set with [`set_default`], else the quorum one, else
/// [`Error::NoClient`].
pub fn default_client() -> Result<&'static Client, Error> {
    DEFAULT
        .get()
        .or_else(|| DEFAULT_QUORUM.get())
        .ok_or(Error::NoClient)
}

/// The quorum client set with [`set_default`], else the single-node one (which a Redlock fn
/// then refuses with a clear error), else [`Error::NoClient`].
pub fn default_quorum_client() -> Result<&'static Client, Error> {
    DEFAULT_QUORUM
        .get()
        .or_else(|| DEFAULT.get())
        .ok_or(Error::NoClient)
}
