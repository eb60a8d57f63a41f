//! What an attribute adds to its caller (design.md §7, issue 37): a locked fn's future stays
//! within a small constant of the by-hand acquisition whatever its body awaits, and locked fns
//! nest 50 deep in a debug build on tokio's default worker stack (2 MiB).
//!
//! A stack overflow aborts the whole process, so the nesting runs in a child process of this
//! test binary: an overflow fails the test instead of taking the suite down with it. The bar is
//! the debug build (`cargo test`'s), whose futures and poll frames are the largest.

use std::mem::size_of_val;

use super::*;

/// How much larger than the by-hand acquisition's future a locked fn's may be, and how much
/// larger than one alone a locked fn awaiting another may be.
const SLACK: usize = 256;

const CHILD_NEST: &str = "DISTLOCK_TEST_NEST_URL";

/// How deep the child nests locked fns through `Box::pin`.
const DEPTH: u32 = 50;

/// How many locked fns [`chain!`] nests directly.
const CHAIN: u32 = 7;

#[distributed_lock(key = "empty", client = locks)]
async fn empty(locks: &Client) -> Result<u32, AppError> {
    Ok(1)
}

#[distributed_lock(key = "outer", client = locks)]
async fn awaits_another(locks: &Client) -> Result<u32, AppError> {
    empty(locks).await
}

#[tokio::test]
async fn a_locked_fns_future_is_about_the_size_of_the_by_hand_acquisition() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let by_hand = size_of_val(&locks.lock("empty").acquire());
    let alone = size_of_val(&empty(&locks));
    let nested = size_of_val(&awaits_another(&locks));
    let chain = size_of_val(&c1(&locks, 1));
    eprintln!(
        "future sizes: by-hand acquire {by_hand} B, empty locked fn {alone} B, \
         locked fn awaiting another {nested} B, a chain of {CHAIN} {chain} B"
    );
    assert!(
        alone <= by_hand + SLACK,
        "an empty locked fn's future is {alone} B, the by-hand acquisition's {by_hand} B"
    );
    assert!(
        nested <= alone + SLACK,
        "awaiting another locked fn made the future {nested} B, {alone} B alone"
    );
    assert!(
        chain <= alone + SLACK,
        "{CHAIN} locked fns each awaiting the next: {chain} B, {alone} B alone"
    );
    assert_eq!(awaits_another(&locks).await.expect("nested call"), 1);
}

/// The service, 50 deep: a handler calling a reentrant fn that recurses through
/// `Box::pin` and, at the bottom, awaits a second locked fn.
#[distributed_lock(key = "handler:<id>", client = locks)]
async fn handler(locks: &Client, id: u32) -> Result<u32, AppError> {
    recurse(locks, id, DEPTH - 2).await
}

#[distributed_lock(key = "tree:<id>", client = locks, mode = "reentrant", wait = "0s")]
async fn recurse(locks: &Client, id: u32, levels: u32) -> Result<u32, AppError> {
    if levels == 0 {
        return Ok(1 + leaf(locks, id).await?);
    }
    Ok(1 + Box::pin(recurse(locks, id, levels - 1)).await?)
}

#[read_lock(key = "leaf:<id>", client = locks)]
async fn leaf(locks: &Client, id: u32) -> Result<u32, AppError> {
    Ok(1)
}

/// `chain!(a -> b -> c)`: locked fns each awaiting the next directly (no `Box::pin`), each on a
/// key of its own level; the last one returns 1 and each adds 1.
///
/// Seven, not 50: a direct chain's type nests deeper with each fn, and spawning one 8 deep
/// overflows rustc's default `recursion_limit` proving it `Send` (14 with a limit of 256; plain
/// `async fn`s, each awaiting a `tokio::sync::Mutex` and the next, reach the default limit
/// between 30 and 40 deep). The 50 levels are a recursion, whose type refers to itself.
macro_rules! chain {
    ($name:ident -> $next:ident $(-> $rest:ident)*) => {
        #[distributed_lock(key = "chain:<level>", client = locks)]
        async fn $name(locks: &Client, level: u32) -> Result<u32, AppError> {
            Ok(1 + $next(locks, level + 1).await?)
        }
        chain!($next $(-> $rest)*);
    };
    ($last:ident) => {
        #[write_lock(key = "chain:<level>", client = locks)]
        async fn $last(locks: &Client, level: u32) -> Result<u32, AppError> {
            Ok(1)
        }
    };
}

chain!(c1 -> c2 -> c3 -> c4 -> c5 -> c6 -> c7);

#[tokio::test]
async fn locked_fns_nest_50_deep_on_tokios_default_stack() {
    let server = RedisServer::start();
    let child = spawn_child(
        "footprint::child_nest_50_deep",
        &[(CHILD_NEST, server.url())],
    );
    let said = finish_child(child);
    assert!(
        said.contains(&format!("RECURSED {DEPTH}")),
        "child said {said:?}"
    );
    assert!(
        said.contains(&format!("CHAINED {CHAIN}")),
        "child said {said:?}"
    );
}

/// Run by `locked_fns_nest_50_deep_on_tokios_default_stack`; does nothing when run directly.
/// The calls run in spawned tasks, on tokio's worker threads and their default stack.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of locked_fns_nest_50_deep_on_tokios_default_stack"]
async fn child_nest_50_deep() {
    let Ok(url) = std::env::var(CHILD_NEST) else {
        return;
    };
    let locks = Client::connect(&url).await.expect("connect");
    let recursed = tokio::spawn({
        let locks = locks.clone();
        async move { handler(&locks, 7).await.map_err(AppError::lock) }
    });
    let recursed = recursed.await.expect("the task ran").expect("50 deep");
    println!("RECURSED {recursed}");
    let chained = tokio::spawn(async move { c1(&locks, 1).await.map_err(AppError::lock) });
    let chained = chained.await.expect("the task ran").expect("the chain");
    println!("CHAINED {chained}");
}
