//! Methods: `&self`, `&mut self`, `self`, `self: Arc<Self>`, `<self.field>`, `client = self.locks`,
//! and native `async fn` in a trait impl.
use std::sync::Arc;

use distlock::{distributed_lock, write_lock, Client};

struct Account {
    id: u64,
    owner: Owner,
    locks: Client,
    balance: u64,
}

struct Owner {
    name: String,
}

impl Account {
    #[distributed_lock(key = "account:<self.id>", client = self.locks)]
    async fn balance(&self) -> Result<u64, distlock::Error> {
        Ok(self.balance)
    }

    #[write_lock(key = "account:<self.id>:<self.owner.name>", client = &self.locks)]
    async fn deposit(&mut self, amount: u64) -> Result<u64, distlock::Error> {
        self.balance += amount;
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>", client = self.locks.clone())]
    async fn close(self) -> Result<u64, distlock::Error> {
        Ok(self.balance)
    }

    #[distributed_lock(key = "account:<self.id>", client = self.locks)]
    async fn shared(self: Arc<Self>) -> Result<u64, distlock::Error> {
        Ok(self.balance)
    }
}

trait Ledger {
    async fn post(&self, entry: u64) -> Result<(), distlock::Error>;
}

impl Ledger for Account {
    #[distributed_lock(key = "ledger:<self.id>:<entry>", client = self.locks)]
    async fn post(&self, entry: u64) -> Result<(), distlock::Error> {
        let _ = entry;
        Ok(())
    }
}

fn assert_send<T: Send>(_: &T) {}

#[allow(dead_code)]
fn check(mut account: Account, shared: Arc<Account>) {
    assert_send(&account.balance());
    assert_send(&account.deposit(1));
    assert_send(&shared.clone().shared());
    assert_send(&account.post(1));
    assert_send(&account.close());
}

fn main() {}
