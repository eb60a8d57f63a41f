//! An axum handler with extractor patterns and `client = state.locks`, registered on a
//! `Router`: that only compiles if the locked future is `Send`.
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};

#[derive(Clone)]
struct App {
    locks: distlock::Client,
}

enum AppError {
    Lock(distlock::Error),
}

impl From<distlock::Error> for AppError {
    fn from(error: distlock::Error) -> Self {
        AppError::Lock(error)
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        match self {
            // distlock's own mapping (the `axum` feature): 409 busy, 503 Redis down, 500 lost.
            AppError::Lock(error) => error.into_response(),
        }
    }
}

#[distlock::read_lock(key = "doc:<doc_id>", client = state.locks)]
async fn show(State(state): State<App>, Path(doc_id): Path<u64>) -> Result<Json<String>, AppError> {
    let _ = &state;
    Ok(Json(format!("doc {doc_id}")))
}

#[distlock::write_lock(key = "doc:<doc_id>", client = state.locks, wait = "1s")]
async fn save(
    State(state): State<App>,
    Path(doc_id): Path<u64>,
    Json(body): Json<String>,
) -> Result<impl IntoResponse, AppError> {
    // The body takes `state` and `body` by value; the key and client were taken before.
    let App { locks } = state;
    let _ = locks;
    Ok((StatusCode::CREATED, format!("{doc_id}: {body}")))
}

fn main() {
    let _router: Router<App> = Router::new()
        .route("/doc/{doc_id}", get(show))
        .route("/doc/{doc_id}", put(save));
}
