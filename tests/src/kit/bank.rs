//! A bank for the tests of several locks at once: accounts on a server of their own, and the
//! classic transfer, locked on both accounts by the attribute's key list.

use std::time::Duration;

use distlock::{distributed_lock, Client};
use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, RedisResult};

/// Accounts `0..accounts`, each a balance on the bank's server, and what the transfers saw.
///
/// A transfer reads both balances, pauses, then writes both back: two transfers that touch
/// one account at the same time lose or make money, so the total only holds if no two ever
/// did. Each also counts itself inside both accounts while it runs, and notes an overlap when
/// it finds another transfer there.
#[derive(Clone)]
pub struct Bank {
    conn: MultiplexedConnection,
    accounts: usize,
}

/// What a transfer fails with: the lock's error, or the bank server's.
pub type TransferError = Box<dyn std::error::Error + Send + Sync>;

impl Bank {
    /// Opens the bank at `url` with `accounts` accounts, each starting at `balance` unless
    /// another process opened it first.
    ///
    /// # Panics
    /// If the server cannot be reached.
    pub async fn open(url: &str, accounts: usize, balance: i64) -> Bank {
        let mut conn = redis::Client::open(url)
            .expect("the bank's URL")
            .get_multiplexed_async_connection()
            .await
            .unwrap_or_else(|e| panic!("the bank at {url}: {e}"));
        for account in 0..accounts {
            let _: bool = conn
                .set_nx(balance_key(account), balance)
                .await
                .expect("SETNX");
        }
        Bank { conn, accounts }
    }

    /// How many accounts there are.
    pub fn accounts(&self) -> usize {
        self.accounts
    }

    /// The sum of every balance.
    pub async fn total(&self) -> i64 {
        let mut conn = self.conn.clone();
        let mut total = 0;
        for account in 0..self.accounts {
            let balance: i64 = conn.get(balance_key(account)).await.expect("GET");
            total += balance;
        }
        total
    }

    /// Transfers that found another inside one of their accounts.
    pub async fn overlaps(&self) -> u64 {
        let n: Option<u64> = self.conn.clone().get("overlaps").await.expect("GET");
        n.unwrap_or(0)
    }

    /// Transfers done.
    pub async fn transfers(&self) -> u64 {
        let n: Option<u64> = self.conn.clone().get("transfers").await.expect("GET");
        n.unwrap_or(0)
    }

    /// Moves `amount` from account `from` to account `to` under the locks of both, taken at
    /// once (waiting up to a minute for them).
    pub async fn transfer(
        &self,
        locks: &Client,
        from: usize,
        to: usize,
        amount: i64,
    ) -> Result<(), TransferError> {
        transfer(locks, self.conn.clone(), from, to, amount).await
    }

    /// `tasks` tasks at once, each moving a random amount between two random accounts
    /// `transfers` times; the transfers made, or the first failure.
    pub async fn random_transfers(
        &self,
        locks: &Client,
        tasks: usize,
        transfers: usize,
    ) -> Result<u64, TransferError> {
        let mut all = tokio::task::JoinSet::new();
        for _ in 0..tasks {
            let (locks, bank) = (locks.clone(), self.clone());
            all.spawn(async move {
                for _ in 0..transfers {
                    let from = rand::random_range(0..bank.accounts);
                    let to = (from + rand::random_range(1..bank.accounts)) % bank.accounts;
                    let amount = rand::random_range(1..100);
                    bank.transfer(&locks, from, to, amount).await?;
                }
                Ok::<_, TransferError>(())
            });
        }
        while let Some(task) = all.join_next().await {
            task??;
        }
        Ok((tasks * transfers) as u64)
    }
}

fn balance_key(account: usize) -> String {
    format!("balance:{account}")
}

#[distributed_lock(
    key = ["account:<from>", "account:<to>"],
    ttl = "10s",
    wait = "60s",
    client = locks
)]
async fn transfer(
    locks: &Client,
    mut bank: MultiplexedConnection,
    from: usize,
    to: usize,
    amount: i64,
) -> Result<(), TransferError> {
    enter(&mut bank, from).await?;
    enter(&mut bank, to).await?;
    let (from_key, to_key) = (balance_key(from), balance_key(to));
    let source: i64 = bank.get(&from_key).await?;
    let target: i64 = bank.get(&to_key).await?;
    // Long enough for another transfer's reads to come in between, were it let in.
    tokio::time::sleep(Duration::from_millis(1)).await;
    let _: () = bank.set(&from_key, source - amount).await?;
    let _: () = bank.set(&to_key, target + amount).await?;
    let _: u64 = bank.incr("transfers", 1).await?;
    leave(&mut bank, from).await?;
    leave(&mut bank, to).await?;
    Ok(())
}

async fn enter(bank: &mut MultiplexedConnection, account: usize) -> RedisResult<()> {
    let inside: u64 = bank.incr(format!("inside:{account}"), 1).await?;
    if inside > 1 {
        let _: u64 = bank.incr("overlaps", 1).await?;
    }
    Ok(())
}

async fn leave(bank: &mut MultiplexedConnection, account: usize) -> RedisResult<()> {
    let _: i64 = bank.decr(format!("inside:{account}"), 1).await?;
    Ok(())
}
