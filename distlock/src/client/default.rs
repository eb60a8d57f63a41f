//! The default clients the attributes use when they name none: one scoped to a task
//! ([`scope_default`]), else the process-wide ones ([`set_default`]).

use std::future::Future;
use std::sync::OnceLock;

use crate::error::Error;

use super::Client;

static DEFAULT: OnceLock<Client> = OnceLock::new();
static DEFAULT_QUORUM: OnceLock<Client> = OnceLock::new();

tokio::task_local! {
    static SCOPED: Client;
}

/// Runs `fut` with `client` as the default of every locked fn it calls that names no
/// `client = ..`, in place of the process-wide default ([`set_default`]), which stays as it
/// was for everything else. For tests run in parallel, each against a server of its own, and
/// for a process that serves several tenants, each on its own Redis.
///
/// The client is the current task's: a task `fut` spawns does not see it (wrap that task's
/// future in `scope_default` too). Scopes nest; the innermost wins. It is the default of
/// `mode = "redlock"` fns too (a single-node client is refused there with a clear error).
///
/// ```no_run
/// use distlock::distributed_lock;
///
/// #[distributed_lock(key = "report:<id>")]
/// async fn build_report(id: u64) -> Result<(), distlock::Error> {
///     Ok(())
/// }
///
/// # async fn demo() -> Result<(), distlock::Error> {
/// let tenant = distlock::Client::connect("redis://127.0.0.1:6380").await?;
/// distlock::scope_default(tenant, build_report(7)).await?;
/// # Ok(()) }
/// ```
pub async fn scope_default<F: Future>(client: Client, fut: F) -> F::Output {
    SCOPED.scope(client, fut).await
}

/// The client [`scope_default`] gave the current task, if any.
pub(crate) fn scoped_default() -> Option<Client> {
    SCOPED.try_with(Client::clone).ok()
}

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
/// [`Error::NoClient`]. (A client given to [`scope_default`] is not seen here: it is not
/// `'static`; locked fns see it.)
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
