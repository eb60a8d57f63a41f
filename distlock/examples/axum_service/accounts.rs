//! Stands in for the service's database: bank accounts whose operations take several calls
//! and are **not** atomic. A deposit reads the balance, records the deposit, then writes the
//! balance it computed, with a round trip between each step; a read takes the balance, then
//! the deposits. Without the locks, concurrent deposits overwrite each other (lost updates) and
//! a read can see a deposit listed but not yet counted; under them, every instance of the
//! service against one Redis keeps each account whole.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// One account as the service shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Account {
    /// The balance the store keeps (written last by a deposit).
    pub balance: u64,
    /// Every deposit, in order; their sum is `balance` whenever no deposit is half done.
    pub deposits: Vec<u64>,
}

/// The accounts, each operation a few calls `round_trip` apart.
#[derive(Debug, Default)]
pub struct Accounts {
    by_id: Mutex<HashMap<u64, Account>>,
    round_trip: Duration,
}

impl Accounts {
    /// An empty store whose calls take `round_trip` each.
    pub fn new(round_trip: Duration) -> Self {
        Accounts {
            by_id: Mutex::default(),
            round_trip,
        }
    }

    /// Adds `amount` to account `id`: read the balance, record the deposit, write the new
    /// balance. Safe only under the account's write lock. Returns the account as written.
    pub async fn deposit(&self, id: u64, amount: u64) -> Account {
        let balance = self.with(id, |account| account.balance);
        tokio::time::sleep(self.round_trip).await;
        self.with(id, |account| account.deposits.push(amount));
        tokio::time::sleep(self.round_trip).await;
        self.with(id, |account| {
            account.balance = balance + amount;
            account.clone()
        })
    }

    /// Reads account `id`: the balance, then the deposits. Consistent only under the
    /// account's read lock.
    pub async fn read(&self, id: u64) -> Account {
        let balance = self.with(id, |account| account.balance);
        tokio::time::sleep(self.round_trip).await;
        let deposits = self.with(id, |account| account.deposits.clone());
        Account { balance, deposits }
    }

    fn with<T>(&self, id: u64, f: impl FnOnce(&mut Account) -> T) -> T {
        let mut by_id = self.by_id.lock().unwrap_or_else(|e| e.into_inner());
        f(by_id.entry(id).or_default())
    }
}
