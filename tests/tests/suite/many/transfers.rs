//! The transfer attribute keeps a bank's total across tasks and processes.

use super::*;

/// Accounts of the transfer tests, and the balance each starts with.
const ACCOUNTS: usize = 20;
const BALANCE: i64 = 1000;

/// The classic transfer (`key = ["account:<from>", "account:<to>"]`, see the kit's `Bank`):
/// 16 tasks moving money between random pairs of 20 accounts. A transfer waits up to a minute
/// for its two accounts, so a deadlock fails it; the bank's total and the overlaps it counted
/// show whether two transfers ever touched one account at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transfer_attribute_keeps_the_total_across_16_tasks() {
    let server = RedisServer::start();
    let bank_server = RedisServer::start();
    let locks = client(&server).await;
    let bank = Bank::open(&bank_server.url(), ACCOUNTS, BALANCE).await;
    let started = Instant::now();
    let done = bank
        .random_transfers(&locks, 16, 40)
        .await
        .expect("every transfer");
    eprintln!("{done} transfers by 16 tasks in {:?}", started.elapsed());
    assert_eq!(bank.transfers().await, done);
    assert_eq!(
        bank.overlaps().await,
        0,
        "two transfers in one account at once"
    );
    assert_eq!(
        bank.total().await,
        ACCOUNTS as i64 * BALANCE,
        "money lost or made"
    );
}

/// The same from two processes of 8 tasks each, the transfers of both processes taking the
/// same accounts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transfer_attribute_keeps_the_total_across_two_processes() {
    let server = RedisServer::start();
    let bank_server = RedisServer::start();
    let started = Instant::now();
    let done = run_contenders(
        2,
        &[
            "transfer",
            &server.url(),
            &bank_server.url(),
            &ACCOUNTS.to_string(),
            "8",
            "25",
        ],
    );
    eprintln!(
        "{done:?} transfers by 2 processes x 8 tasks in {:?}",
        started.elapsed()
    );
    let bank = Bank::open(&bank_server.url(), ACCOUNTS, BALANCE).await;
    assert_eq!(bank.transfers().await, done.iter().sum::<u64>());
    assert_eq!(
        bank.overlaps().await,
        0,
        "two transfers in one account at once"
    );
    assert_eq!(
        bank.total().await,
        ACCOUNTS as i64 * BALANCE,
        "money lost or made"
    );
}
