//! The axum example (`--bin axum_service`): bank accounts kept in memory, served over HTTP,
//! with `#[read_lock]` and `#[write_lock]` handlers keyed on the account id from the path.
//!
//! * `GET /accounts/{id}` returns `{"balance": .., "deposits": [..]}` under the read lock of
//!   `account:<id>`: any number of reads of one account run together, never alongside a
//!   deposit into it.
//! * `POST /accounts/{id}/deposit` with `{"amount": ..}` adds a deposit under the write lock of
//!   `account:<id>` and returns the account after it.
//!
//! The store is deliberately **not** atomic: a deposit reads the balance, waits (playing a
//! call to another system), appends to the deposit list, waits again, then writes the balance
//! it computed; a read takes the balance and the deposit list with a wait between them.
//! Without the locks, concurrent deposits overwrite each other (lost updates) and a read can
//! see a deposit listed but not yet counted. With them, every process running this service
//! against the same Redis keeps each account consistent. The tests in
//! `examples/tests/axum_service.rs` check both halves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use distlock::{read_lock, write_lock, Client, HandlerError};
use serde::{Deserialize, Serialize};

/// One account as the service shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// The balance the store keeps (written last by a deposit).
    pub balance: u64,
    /// Every deposit, in order; their sum equals `balance` whenever no deposit is half done.
    pub deposits: Vec<u64>,
}

impl Account {
    /// Whether `balance` is the sum of `deposits`.
    pub fn is_consistent(&self) -> bool {
        self.deposits.iter().sum::<u64>() == self.balance
    }
}

/// The body of `POST /accounts/{id}/deposit`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Deposit {
    /// Amount to add.
    pub amount: u64,
}

/// Accounts in memory, with non-atomic operations (see the module docs).
#[derive(Debug, Default)]
pub struct Accounts {
    by_id: Mutex<HashMap<u64, Account>>,
    /// How long each step of an operation waits for its (pretend) remote call.
    latency: Duration,
}

impl Accounts {
    /// An empty store whose operations wait `latency` between their steps.
    pub fn new(latency: Duration) -> Self {
        Accounts {
            by_id: Mutex::default(),
            latency,
        }
    }

    /// Adds `amount` to account `id` in three steps with a wait between each: read the
    /// balance, record the deposit, write the new balance. Safe only under the account's
    /// write lock. Returns the account as written.
    pub async fn deposit(&self, id: u64, amount: u64) -> Account {
        let balance = self.with(id, |account| account.balance);
        tokio::time::sleep(self.latency).await; // e.g. asking a fraud check
        self.with(id, |account| account.deposits.push(amount));
        tokio::time::sleep(self.latency).await; // e.g. writing the ledger entry
        self.with(id, |account| {
            account.balance = balance + amount;
            account.clone()
        })
    }

    /// Reads account `id` in two steps with a wait between them: the balance, then the
    /// deposits. Consistent only under the account's read lock.
    pub async fn read(&self, id: u64) -> Account {
        let balance = self.with(id, |account| account.balance);
        tokio::time::sleep(self.latency).await;
        let deposits = self.with(id, |account| account.deposits.clone());
        Account { balance, deposits }
    }

    fn with<T>(&self, id: u64, f: impl FnOnce(&mut Account) -> T) -> T {
        let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        f(by_id.entry(id).or_default())
    }
}

/// What the handlers share: the lock client and the store.
#[derive(Clone)]
pub struct App {
    /// The lock client every handler locks through (`client = app.locks`).
    pub locks: Client,
    /// The accounts.
    pub accounts: Arc<Accounts>,
}

// The handlers' error is `distlock::HandlerError`: a lock error answers with distlock's own
// HTTP mapping (`distlock::Error::http_status`): `409` when the account is busy, `503` with
// `Retry-After` when Redis is unreachable (in both, the deposit did not run), `500` when the
// lease was lost during the deposit (it may have been applied: the client must not simply
// repeat it). The bodies name no lock or server.

/// `GET /accounts/{id}`: shared with other reads of the account, never with a deposit.
#[read_lock(key = "account:<id>", client = app.locks, ttl = "10s", wait = "10s")]
async fn show(State(app): State<App>, Path(id): Path<u64>) -> Result<Json<Account>, HandlerError> {
    Ok(Json(app.accounts.read(id).await))
}

/// `POST /accounts/{id}/deposit`: alone on the account.
#[write_lock(key = "account:<id>", client = app.locks, ttl = "10s", wait = "10s")]
async fn deposit(
    State(app): State<App>,
    Path(id): Path<u64>,
    Json(Deposit { amount }): Json<Deposit>,
) -> Result<Json<Account>, HandlerError> {
    Ok(Json(app.accounts.deposit(id, amount).await))
}

/// The service's routes.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/accounts/{id}", get(show))
        .route("/accounts/{id}/deposit", post(deposit))
        .with_state(app)
}
