//! An axum service whose handlers lock per account: deposits are alone on their account, reads
//! share it. The handlers' error is `distlock::HandlerError` (the `axum` feature): a lock error
//! answers with distlock's HTTP mapping (409 busy, 503 + Retry-After when Redis is
//! unreachable, 500 for a lost lease), with a body that names no lock or server.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p distlock --features axum --example axum_service
//! curl -X POST -H 'content-type: application/json' -d 5 http://127.0.0.1:3000/accounts/7/deposit
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::routing::{get, post};
use axum::{Json, Router};
use distlock::{read_lock, write_lock, Client, HandlerError};

#[derive(Clone)]
struct App {
    locks: Client,
    // Stands in for a database shared by every instance of the service.
    balances: Arc<Mutex<HashMap<u64, u64>>>,
}

#[read_lock(key = "account:<id>", client = app.locks, wait = "2s")]
async fn balance(State(app): State<App>, Path(id): Path<u64>) -> Result<Json<u64>, HandlerError> {
    Ok(Json(
        app.balances.lock().unwrap().get(&id).copied().unwrap_or(0),
    ))
}

#[write_lock(key = "account:<id>", client = app.locks, wait = "2s")]
async fn deposit(
    State(app): State<App>,
    Path(id): Path<u64>,
    Json(amount): Json<u64>,
) -> Result<Json<u64>, HandlerError> {
    // A read-modify-write with an await in the middle, as a database round trip would be.
    let before = app.balances.lock().unwrap().get(&id).copied().unwrap_or(0);
    tokio::task::yield_now().await;
    app.balances.lock().unwrap().insert(id, before + amount);
    Ok(Json(before + amount))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());
    let locks = Client::connect(&url).await?;
    let app = App {
        locks: locks.clone(),
        balances: Arc::default(),
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
    let report = locks.shutdown(std::time::Duration::from_secs(5)).await;
    println!("stopped: {} locks released", report.released);
    Ok(())
}
