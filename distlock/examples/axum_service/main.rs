//! An axum service whose handlers lock per account: deposits are alone on their account, reads
//! share it (`accounts.rs` is the store they guard, which is not atomic). The handlers' error
//! is `distlock::HandlerError` (the `axum` feature): a lock error answers with distlock's HTTP
//! mapping (409 busy, 503 + Retry-After when Redis is unreachable: in both the deposit did not
//! run; 500 for a lease lost during a deposit, which may have been applied), with a body that
//! names no lock or server.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p distlock --features axum --example axum_service
//! curl -X POST -H 'content-type: application/json' -d 5 http://127.0.0.1:3000/accounts/7/deposit
//! curl http://127.0.0.1:3000/accounts/7
//! ```
//!
//! `ADDR` sets where it listens (`127.0.0.1:0`: a free port); the first line it prints is
//! `listening on http://<address>`. Run it twice against one Redis: the accounts' locks hold
//! across both processes.

mod accounts;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use distlock::{read_lock, write_lock, Client, HandlerError};

use accounts::{Account, Accounts};

#[derive(Clone)]
struct App {
    locks: Client,
    accounts: Arc<Accounts>,
}

/// `GET /accounts/{id}`: shared with other reads of the account, never with a deposit.
#[read_lock(key = "account:<id>", client = app.locks, wait = "5s")]
async fn balance(
    State(app): State<App>,
    Path(id): Path<u64>,
) -> Result<Json<Account>, HandlerError> {
    Ok(Json(app.accounts.read(id).await))
}

/// `POST /accounts/{id}/deposit` with the amount as its body: alone on the account.
#[write_lock(key = "account:<id>", client = app.locks, wait = "5s")]
async fn deposit(
    State(app): State<App>,
    Path(id): Path<u64>,
    Json(amount): Json<u64>,
) -> Result<Json<Account>, HandlerError> {
    Ok(Json(app.accounts.deposit(id, amount).await))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let locks = Client::connect(&url).await?;
    let app = App {
        locks: locks.clone(),
        // Each call of the store takes 5 ms, as a database's round trip would.
        accounts: Arc::new(Accounts::new(Duration::from_millis(5))),
    };
    let router = Router::new()
        .route("/accounts/{id}", get(balance))
        .route("/accounts/{id}/deposit", post(deposit))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    // Requests still waiting for a lock end with 503; held locks are given back.
    let report = locks.shutdown(Duration::from_secs(5)).await;
    println!("stopped: {} locks released", report.released);
    Ok(())
}
