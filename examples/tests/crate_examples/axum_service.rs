//! The axum example against a real `redis-server`, over real HTTP on loopback: concurrent
//! deposits into one account are all counted and every read sees a consistent account, while
//! the same store operations run concurrently without the locks lose updates and show
//! half-done deposits (so the first test could fail if the locks did not serialise).

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use distlock::Client;
use distlock_examples::accounts::{router, Account, Accounts, App};
use distlock_testkit::RedisServer;
use futures_util::future::join_all;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

/// One HTTP/1.1 exchange on a fresh connection (`Connection: close`): the status and the body.
/// The request is written only once `go` is passed, so a batch of requests arrives together.
async fn http(
    addr: &str,
    method: &str,
    path: &str,
    json: Option<&str>,
    go: &Barrier,
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("connect to the service");
    let body = json.unwrap_or("");
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
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not an account: {body:?}: {e}"))
}

/// Serves the example's router on a free loopback port in this process.
async fn serve(locks: Client, latency: Duration) -> String {
    let app = App {
        locks,
        accounts: Arc::new(Accounts::new(latency)),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a free port");
    let addr = listener.local_addr().expect("address").to_string();
    tokio::spawn(async move { axum::serve(listener, router(app)).await });
    addr
}

const DEPOSITS: u64 = 16;
const READS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deposits_are_all_counted_and_reads_are_consistent() {
    let server = RedisServer::start();
    let locks = Client::connect(&server.url()).await.expect("connect");
    let addr = serve(locks, Duration::from_millis(5)).await;

    // Every request is connected first and sent at once: 16 deposits into account 7 and 16
    // reads of it, all in flight together, each on its own connection.
    let go = Arc::new(Barrier::new(DEPOSITS as usize + READS));
    let mut deposits = Vec::new();
    for amount in 1..=DEPOSITS {
        let (addr, go) = (addr.clone(), go.clone());
        deposits.push(tokio::spawn(async move {
            let body = format!("{{\"amount\":{amount}}}");
            http(&addr, "POST", "/accounts/7/deposit", Some(&body), &go).await
        }));
    }
    let mut reads = Vec::new();
    for _ in 0..READS {
        let (addr, go) = (addr.clone(), go.clone());
        reads.push(tokio::spawn(async move {
            http(&addr, "GET", "/accounts/7", None, &go).await
        }));
    }

    let mut balances_seen = Vec::new();
    for deposit in deposits {
        let (status, body) = deposit.await.expect("task");
        assert_eq!(status, 200, "deposit failed: {body}");
        let after = account(&body);
        assert!(after.is_consistent(), "a deposit returned {after:?}");
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
        assert!(
            seen.is_consistent(),
            "a read saw a half-done deposit: {seen:?}"
        );
    }

    let (status, body) = http(&addr, "GET", "/accounts/7", None, &Barrier::new(1)).await;
    assert_eq!(status, 200, "{body}");
    let last = account(&body);
    assert_eq!(
        last.balance,
        (1..=DEPOSITS).sum::<u64>(),
        "lost deposits: {last:?}"
    );
    assert_eq!(last.deposits.len(), DEPOSITS as usize);
    assert!(last.is_consistent());

    // Another account was never touched.
    let (_, body) = http(&addr, "GET", "/accounts/8", None, &Barrier::new(1)).await;
    assert_eq!(account(&body), Account::default());
}

/// The control: the handlers' store operations run concurrently without any lock lose
/// deposits and show half-done ones. The test above passes only because the locks serialise.
///
/// On one task with Tokio's clock paused, the interleaving is fixed: every deposit reads the
/// balance (0) at t = 0 and records its deposit at t = 5 ms; every read takes the balance at
/// 2.5 ms (still 0) and the deposits at 7.5 ms (all recorded, none counted).
#[tokio::test(start_paused = true)]
async fn without_the_locks_the_same_operations_lose_deposits() {
    let latency = Duration::from_millis(5);
    let accounts = Accounts::new(latency);
    let deposits = join_all((1..=DEPOSITS).map(|amount| accounts.deposit(7, amount)));
    let reads = join_all((0..READS).map(|_| async {
        tokio::time::sleep(latency / 2).await;
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
        seen.iter().all(|a| !a.is_consistent()),
        "a read without a lock saw a consistent account: {seen:?}"
    );
}

/// The binary itself: given a Redis URL and port 0, it prints where it listens and answers.
#[tokio::test]
async fn the_binary_serves_locked_handlers() {
    let server = RedisServer::start();
    let mut service = tokio::process::Command::new(env!("CARGO_BIN_EXE_axum_service"))
        .args(["--redis", &server.url(), "--port", "0", "--latency-ms", "1"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start axum_service");
    let mut first = String::new();
    BufReader::new(service.stdout.take().expect("stdout"))
        .read_line(&mut first)
        .await
        .expect("read the first line");
    let addr = first
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();

    let one = Barrier::new(1);
    let (status, body) = http(
        &addr,
        "POST",
        "/accounts/1/deposit",
        Some(r#"{"amount":42}"#),
        &one,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(&addr, "GET", "/accounts/1", None, &one).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        account(&body),
        Account {
            balance: 42,
            deposits: vec![42]
        }
    );
    // The handlers locked through this Redis: the deposit's write lock is a script call.
    let stats = server.commandstats();
    let scripts =
        stats.get("evalsha").copied().unwrap_or(0) + stats.get("eval").copied().unwrap_or(0);
    assert!(scripts > 0, "no lock was taken on the server: {stats:?}");

    service.kill().await.expect("stop the service");
}
