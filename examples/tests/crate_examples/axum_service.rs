//! `axum_service` as a user runs it, against a real `redis-server`, over real HTTP on loopback:
//! concurrent deposits into one account are all counted and every read sees a whole account,
//! while the same store operations run concurrently without the locks lose deposits and show
//! half-done ones (so the first test could fail if the locks did not serialise).

use std::sync::Arc;
use std::time::Duration;

use distlock_testkit::RedisServer;
use futures_util::future::join_all;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

use super::{interrupt, next_line, start};

/// The example's own store, the file it compiles (not a copy), for the control below.
#[path = "../../../distlock/examples/axum_service/accounts.rs"]
mod accounts;

use accounts::{Account, Accounts};

/// One HTTP/1.1 exchange on a fresh connection (`Connection: close`): the status and the body.
/// The request is written only once `go` is passed, so a batch of requests arrives together.
async fn http(addr: &str, method: &str, path: &str, body: &str, go: &Barrier) -> (u16, String) {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("connect to the service");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    go.wait().await;
    stream.write_all(request.as_bytes()).await.expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("receive");
    let response = String::from_utf8(response).expect("UTF-8 response");
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {response:?}"));
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "unexpected chunked response: {head}"
    );
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    (status, body.to_owned())
}

fn account(body: &str) -> Account {
    let json: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON: {body:?}: {e}"));
    let number = |v: &serde_json::Value| v.as_u64().unwrap_or_else(|| panic!("in {body:?}"));
    Account {
        balance: number(&json["balance"]),
        deposits: json["deposits"]
            .as_array()
            .unwrap_or_else(|| panic!("no deposits in {body:?}"))
            .iter()
            .map(number)
            .collect(),
    }
}

/// Whether the account's balance is the sum of its deposits: no deposit half done.
fn whole(account: &Account) -> bool {
    account.deposits.iter().sum::<u64>() == account.balance
}

const DEPOSITS: u64 = 16;
const READS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deposits_are_all_counted_and_reads_see_whole_accounts() {
    let server = RedisServer::start();
    let env = [
        ("REDIS_URL", server.url()),
        ("ADDR", "127.0.0.1:0".to_owned()),
    ];
    let (service, mut out) = start("axum_service", &env);
    let first = next_line(&mut out).await;
    let addr = first
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();

    // Every request is connected first and sent at once: 16 deposits into account 7 and 16
    // reads of it, all in flight together, each on its own connection.
    let go = Arc::new(Barrier::new(DEPOSITS as usize + READS));
    let mut deposits = Vec::new();
    for amount in 1..=DEPOSITS {
        let (addr, go) = (addr.clone(), go.clone());
        deposits.push(tokio::spawn(async move {
            let body = amount.to_string();
            http(&addr, "POST", "/accounts/7/deposit", &body, &go).await
        }));
    }
    let mut reads = Vec::new();
    for _ in 0..READS {
        let (addr, go) = (addr.clone(), go.clone());
        reads.push(tokio::spawn(async move {
            http(&addr, "GET", "/accounts/7", "", &go).await
        }));
    }

    let mut balances_seen = Vec::new();
    for deposit in deposits {
        let (status, body) = deposit.await.expect("task");
        assert_eq!(status, 200, "deposit failed: {body}");
        let after = account(&body);
        assert!(whole(&after), "a deposit returned {after:?}");
        balances_seen.push(after.balance);
    }
    // Serialised deposits each saw the previous one's result: all balances differ.
    balances_seen.sort_unstable();
    balances_seen.dedup();
    assert_eq!(
        balances_seen.len(),
        DEPOSITS as usize,
        "two deposits saw the same balance"
    );
    for read in reads {
        let (status, body) = read.await.expect("task");
        assert_eq!(status, 200, "read failed: {body}");
        let seen = account(&body);
        assert!(whole(&seen), "a read saw a half-done deposit: {seen:?}");
    }

    let one = Barrier::new(1);
    let (status, body) = http(&addr, "GET", "/accounts/7", "", &one).await;
    assert_eq!(status, 200, "{body}");
    let last = account(&body);
    assert_eq!(
        last.balance,
        (1..=DEPOSITS).sum::<u64>(),
        "lost deposits: {last:?}"
    );
    assert_eq!(last.deposits.len(), DEPOSITS as usize);
    assert!(whole(&last));
    // Another account was never touched.
    let (_, body) = http(&addr, "GET", "/accounts/8", "", &one).await;
    assert_eq!(account(&body), Account::default());

    // The handlers locked through this Redis: the deposits' write locks are script calls.
    let stats = server.commandstats();
    let scripts =
        stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0);
    assert!(scripts > 0, "no lock was taken on the server: {stats:?}");

    interrupt(service).await;
    assert_eq!(next_line(&mut out).await, "stopped: 0 locks released");
}

/// The control: the example's store operations run concurrently without any lock lose
/// deposits and show half-done ones. The test above passes only because the locks serialise.
///
/// On one task with Tokio's clock paused, the interleaving is fixed: every deposit reads the
/// balance (0) at t = 0 and records its deposit at t = 5 ms; every read takes the balance at
/// 2.5 ms (still 0) and the deposits at 7.5 ms (all recorded, none counted).
#[tokio::test(start_paused = true)]
async fn without_the_locks_the_same_operations_lose_deposits() {
    let round_trip = Duration::from_millis(5);
    let accounts = Accounts::new(round_trip);
    let deposits = join_all((1..=DEPOSITS).map(|amount| accounts.deposit(7, amount)));
    let reads = join_all((0..READS).map(|_| async {
        tokio::time::sleep(round_trip / 2).await;
        accounts.read(7).await
    }));
    let (_, seen) = tokio::join!(deposits, reads);
    let last = accounts.read(7).await;
    assert!(
        last.balance < (1..=DEPOSITS).sum::<u64>(),
        "no deposit was lost without a lock: {last:?}"
    );
    assert_eq!(last.deposits.len(), DEPOSITS as usize);
    assert!(
        seen.iter().all(|a| !whole(a)),
        "a read without a lock saw a consistent account: {seen:?}"
    );
}
