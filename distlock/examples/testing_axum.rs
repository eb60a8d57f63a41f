//! Testing an axum handler that takes a lock: the worked example of the testing guide
//! (`docs/testing.md`). The handler is an ordinary `#[write_lock]` deposit; its tests, at the
//! bottom, run it against a throwaway server for the normal path, a busy lock (409), Redis
//! unreachable (503, the body not run) and a lease lost in the middle of the body (the body
//! cancelled, 500, and the write it had not reached not done).
//!
//! ```text
//! cargo test -p distlock --features testing,axum --example testing_axum
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p distlock --features testing,axum --example testing_axum
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use distlock::{write_lock, Client};

/// The balances, standing in for a database, and what the handler awaits between reading a
/// balance and writing it back (a database round trip in a real service; a test holds the
/// body there).
#[derive(Clone, Default)]
struct Accounts {
    balances: Arc<Mutex<HashMap<u64, u64>>>,
    round_trip: Option<Arc<RoundTrip>>,
}

/// Where a test holds the body between its read and its write.
#[derive(Default)]
struct RoundTrip {
    /// Told when a body reached its round trip.
    reached: tokio::sync::Notify,
    /// The round trip ends when this is notified (a test that ends the lease never does).
    done: tokio::sync::Notify,
}

impl Accounts {
    fn balance(&self, id: u64) -> u64 {
        let balances = self.balances.lock().unwrap_or_else(|e| e.into_inner());
        balances.get(&id).copied().unwrap_or(0)
    }

    fn set(&self, id: u64, balance: u64) {
        let mut balances = self.balances.lock().unwrap_or_else(|e| e.into_inner());
        balances.insert(id, balance);
    }

    async fn round_trip(&self) {
        match &self.round_trip {
            Some(trip) => {
                trip.reached.notify_one();
                trip.done.notified().await;
            }
            None => tokio::task::yield_now().await,
        }
    }
}

#[derive(Clone)]
struct App {
    locks: Client,
    accounts: Accounts,
}

enum AppError {
    Lock(distlock::Error),
}

impl From<distlock::Error> for AppError {
    fn from(e: distlock::Error) -> Self {
        AppError::Lock(e)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        // 409 busy, 503 when Redis is unreachable (nothing ran in either), 500 when the lease
        // was lost during the deposit.
        let AppError::Lock(e) = self;
        e.into_response()
    }
}

/// One deposit per account at a time: read, a round trip, write back.
#[write_lock(key = "account:<id>", client = app.locks, wait = "100ms")]
async fn deposit(
    State(app): State<App>,
    Path(id): Path<u64>,
    Json(amount): Json<u64>,
) -> Result<Json<u64>, AppError> {
    let before = app.accounts.balance(id);
    app.accounts.round_trip().await;
    app.accounts.set(id, before + amount);
    Ok(Json(before + amount))
}

fn router(app: App) -> Router {
    Router::new()
        .route("/accounts/{id}/deposit", post(deposit))
        .with_state(app)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let app = App {
        locks: Client::connect(&url).await?,
        accounts: Accounts::default(),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}", listener.local_addr()?);
    let served = axum::serve(listener, router(app));
    // Serves until ^C.
    tokio::select! {
        served = served => served?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::extract::{Path, State};
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use axum::Json;
    use distlock::testing::{end_lease, lock_state, TestServer};

    use super::{deposit, Accounts, App, RoundTrip};

    /// A server of the test's own and the app on it.
    async fn app(round_trip: Option<Arc<RoundTrip>>) -> (TestServer, App) {
        let server = TestServer::start().await.expect("a redis-server");
        let locks = server.client().await.expect("connect");
        let accounts = Accounts {
            round_trip,
            ..Accounts::default()
        };
        (server, App { locks, accounts })
    }

    /// `POST /accounts/{id}/deposit` with `amount`, as axum would call the handler.
    async fn post_deposit(app: &App, id: u64, amount: u64) -> StatusCode {
        deposit(State(app.clone()), Path(id), Json(amount))
            .await
            .into_response()
            .status()
    }

    #[tokio::test]
    async fn a_deposit_is_written_and_the_lock_given_back() {
        let (_server, app) = app(None).await;
        assert_eq!(post_deposit(&app, 7, 5).await, StatusCode::OK);
        assert_eq!(post_deposit(&app, 7, 3).await, StatusCode::OK);
        assert_eq!(app.accounts.balance(7), 8);
        assert!(!lock_state(&app.locks, "account:7").await.unwrap().is_held());
    }

    #[tokio::test]
    async fn a_busy_account_answers_409_and_writes_nothing() {
        let (server, app) = app(None).await;
        // Another instance of the service (a client of its own: the write lock is reentrant
        // within one client's task, so the test's own client would let the handler in).
        let instance = server.client().await.unwrap();
        let other = instance.write("account:7").acquire().await.unwrap();
        assert_eq!(post_deposit(&app, 7, 5).await, StatusCode::CONFLICT);
        assert_eq!(app.accounts.balance(7), 0);
        other.release().await.unwrap();
        assert_eq!(post_deposit(&app, 7, 5).await, StatusCode::OK);
    }

    #[tokio::test]
    async fn redis_unreachable_answers_503_and_runs_nothing() {
        let trip = Arc::new(RoundTrip::default());
        let (mut server, app) = app(Some(trip.clone())).await;
        server.kill();
        assert_eq!(
            post_deposit(&app, 7, 5).await,
            StatusCode::SERVICE_UNAVAILABLE
        );
        // The body never ran: it would have reached its round trip (a permit left here).
        assert!(
            tokio::time::timeout(std::time::Duration::ZERO, trip.reached.notified())
                .await
                .is_err()
        );
        assert_eq!(app.accounts.balance(7), 0);
    }

    #[tokio::test]
    async fn a_lease_lost_mid_body_cancels_it_answers_500_and_the_write_is_not_done() {
        let trip = Arc::new(RoundTrip::default());
        let (_server, app) = app(Some(trip.clone())).await;
        let request = tokio::spawn({
            let app = app.clone();
            async move { post_deposit(&app, 7, 5).await }
        });
        // The body read the balance and waits for its round trip: end the lease there.
        trip.reached.notified().await;
        assert!(end_lease(&app.locks, "account:7").await.unwrap());
        assert_eq!(request.await.unwrap(), StatusCode::INTERNAL_SERVER_ERROR);
        // The body was cancelled at its round trip: the write after it never happened.
        assert_eq!(app.accounts.balance(7), 0);
        // The lock is free for the next request.
        assert!(!lock_state(&app.locks, "account:7").await.unwrap().is_held());
    }
}
