//! Lock errors as HTTP answers (feature `axum`): the status of [`Error::http_status`], a body
//! that says what the status means and nothing internal, and the full error in the service's
//! own log. Names come from request data and the error of an unreachable server names the
//! server: neither goes to the caller unless the application asks for it
//! ([`Error::into_detailed_response`]).

use axum_core::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};

use super::Error;

impl Error {
    /// The status of [`http_status`](Self::http_status) as an `http` status code.
    fn status_code(&self) -> StatusCode {
        StatusCode::from_u16(self.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// The HTTP answer with the error's whole message as its body: the lock's name (which
    /// the request's data made), and for a server that could not be reached, its address.
    /// For services whose callers may see that (an internal tool, a test); the default
    /// answer (`IntoResponse`) says only what the status means.
    #[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
    pub fn into_detailed_response(self) -> Response {
        let status = self.status_code();
        with_retry_after((status, self.to_string()).into_response())
    }
}

/// The response for a handler that fails with a lock error: the status of
/// [`Error::http_status`], `Retry-After: 1` on 503, and a plain-text body that says what the
/// status means, without the lock's name, its keys or any server's address. The whole error
/// goes to `tracing`: at `debug` for 409 and 400 (contention and bad names are the callers'
/// business), `warn` for 503 (Redis unreachable, the client shutting down) and for a
/// [stale token](Error::StaleToken) (a holder stalled past its lease), `error` for 500
/// (a lost lease, a mistake in code or configuration). For the whole message in the body,
/// [`Error::into_detailed_response`].
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let status = self.status_code();
        match status.as_u16() {
            _ if matches!(self, Error::StaleToken { .. }) => {
                tracing::warn!(status = status.as_u16(), error = %self, "lock error answered")
            }
            409 | 400 => {
                tracing::debug!(status = status.as_u16(), error = %self, "lock error answered")
            }
            503 => tracing::warn!(status = status.as_u16(), error = %self, "lock error answered"),
            _ => tracing::error!(status = status.as_u16(), error = %self, "lock error answered"),
        }
        with_retry_after((status, public_text(status)).into_response())
    }
}

/// What a caller is told for each status: its meaning, nothing of the service's inside.
fn public_text(status: StatusCode) -> &'static str {
    match status.as_u16() {
        409 => "busy: another request is working on this resource; try again later",
        503 => "service unavailable: try again shortly",
        400 => "bad request: this request names a resource that cannot be locked",
        _ => "internal server error",
    }
}

/// `Retry-After: 1` on a 503: nothing ran, and the same request may succeed once Redis is back.
fn with_retry_after(mut response: Response) -> Response {
    if response.status() == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
}

/// The error type of an axum handler that takes locks: any error converts into it with `?`
/// (a [`distlock::Error`](Error) from the attributes or a guard, your database's, a `String`),
/// so a handler needs no error enum, `From` impls or `IntoResponse` of its own.
///
/// It answers a lock error as [`Error`] does (its status, `Retry-After` on 503, a body that
/// names nothing internal) and any other error with `500 Internal Server Error` and the body
/// `internal server error`; in both cases the whole error goes to `tracing`. A handler that
/// needs other statuses for its own errors (404 for a missing record) keeps an error type of
/// its own, with `From<distlock::Error>` and [`Error`]'s `into_response` for the lock errors.
///
/// Like `anyhow::Error`, it is not itself a `std::error::Error` (that is what lets every error
/// convert into it).
///
/// ```no_run
/// use axum::extract::{Path, State};
/// use axum::Json;
/// use distlock::{write_lock, HandlerError};
///
/// #[derive(Clone)]
/// struct App {
///     locks: distlock::Client,
/// }
///
/// async fn add_to_balance(id: u64, amount: u64) -> Result<u64, std::io::Error> {
///     Ok(amount) // ... the database's read-modify-write ...
/// }
///
/// /// 409 while another deposit to the account runs, 503 when Redis is unreachable, 500 for a
/// /// lost lease or a database error.
/// #[write_lock(key = "account:<id>", client = app.locks)]
/// async fn deposit(
///     State(app): State<App>,
///     Path(id): Path<u64>,
///     Json(amount): Json<u64>,
/// ) -> Result<Json<u64>, HandlerError> {
///     Ok(Json(add_to_balance(id, amount).await?))
/// }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub struct HandlerError(Box<dyn std::error::Error + Send + Sync>);

impl HandlerError {
    /// The lock error this is, if it is one.
    pub fn lock_error(&self) -> Option<&Error> {
        self.0.downcast_ref()
    }

    /// The error it was made from.
    pub fn into_inner(self) -> Box<dyn std::error::Error + Send + Sync> {
        self.0
    }
}

impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for HandlerError {
    fn from(error: E) -> Self {
        HandlerError(error.into())
    }
}

impl std::fmt::Debug for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

impl std::fmt::Display for HandlerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl IntoResponse for HandlerError {
    fn into_response(self) -> Response {
        match self.0.downcast::<Error>() {
            Ok(lock_error) => lock_error.into_response(),
            Err(other) => {
                tracing::error!(error = %other, "handler error answered with 500");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    public_text(StatusCode::INTERNAL_SERVER_ERROR),
                )
                    .into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::error::Op;

    const NAME: &str = "account:{7}:secret";

    fn transport() -> Error {
        Error::redis(
            Op::Acquire,
            NAME,
            std::io::Error::from(std::io::ErrorKind::ConnectionReset).into(),
        )
    }

    async fn body(response: Response) -> String {
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 16)
            .await
            .expect("a body");
        String::from_utf8_lossy(&bytes).into_owned()
    }

    #[test]
    fn axum_responses_carry_the_status_and_retry_after_only_when_retrying_helps() {
        let busy = Error::Busy { name: NAME.into() }.into_response();
        assert_eq!(busy.status(), 409);
        assert!(busy.headers().get("retry-after").is_none());
        let down = transport().into_response();
        assert_eq!(down.status(), 503);
        assert_eq!(down.headers()["retry-after"], "1");
        let lost = Error::LeaseLost {
            name: NAME.into(),
            held_for: Duration::from_secs(1),
        }
        .into_response();
        assert_eq!(lost.status(), 500);
        assert!(lost.headers().get("retry-after").is_none());
        let detailed = transport().into_detailed_response();
        assert_eq!(detailed.headers()["retry-after"], "1");
    }

    /// What a caller of the service reads: the status's meaning, never the lock's name (built
    /// from request data), its keys, or where the service's Redis is.
    #[tokio::test]
    async fn response_bodies_name_no_lock_key_or_server() {
        let refused: redis::RedisError =
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        // As a client that cannot reach its server reports it (`nodes::node::connect_error`).
        let unreachable = Error::server(Op::Connect, "redis://10.1.2.3:7411/", refused);
        let cases = [
            (Error::Busy { name: NAME.into() }, 409),
            (
                Error::Timeout {
                    name: NAME.into(),
                    waited: Duration::from_secs(1),
                    attempts: 2,
                },
                409,
            ),
            (unreachable, 503),
            (transport(), 503),
            (
                Error::InvalidName {
                    name: NAME.into(),
                    reason: "too long".into(),
                },
                400,
            ),
            (
                Error::LeaseLost {
                    name: NAME.into(),
                    held_for: Duration::from_secs(1),
                },
                500,
            ),
            (Error::ShutDown { name: NAME.into() }, 503),
            (
                Error::StaleToken {
                    token: crate::token::FencingToken::new(7),
                    highest: crate::token::FencingToken::new(8),
                },
                409,
            ),
            (
                Error::Store {
                    source: "relation \"account_secret\" at 10.1.2.3:7411".into(),
                },
                500,
            ),
        ];
        for (e, status) in cases {
            let shown = e.to_string();
            let response = e.into_response();
            assert_eq!(response.status(), status, "{shown}");
            let body = body(response).await;
            assert!(!body.is_empty(), "{shown}");
            for secret in [
                "account",
                "secret",
                "{7}",
                "distlock:",
                "10.1.2.3",
                "7411",
                "redis",
            ] {
                assert!(
                    !body.contains(secret),
                    "{status} body {body:?} shows {secret:?}"
                );
            }
        }
    }

    /// The whole message is there for a service that asks for it.
    #[tokio::test]
    async fn a_detailed_response_is_the_whole_message() {
        let e = Error::Busy { name: NAME.into() };
        let shown = e.to_string();
        let response = e.into_detailed_response();
        assert_eq!(response.status(), 409);
        assert_eq!(body(response).await, shown);
    }

    /// A handler's error converts from a lock error or any other with `?`, and answers as the
    /// lock error would, or 500, without the other error's text.
    #[tokio::test]
    async fn a_handler_error_answers_lock_errors_by_their_status_and_others_with_500() {
        fn lock_step() -> Result<(), Error> {
            Err(Error::Busy { name: NAME.into() })
        }
        fn db_step() -> Result<(), std::io::Error> {
            Err(std::io::Error::other("db at 10.1.2.3:5432 refused"))
        }
        fn handler(lock: bool) -> Result<(), HandlerError> {
            if lock {
                lock_step()?;
            }
            db_step()?;
            Ok(())
        }
        let busy = handler(true).unwrap_err();
        assert!(matches!(busy.lock_error(), Some(Error::Busy { .. })));
        let response = busy.into_response();
        assert_eq!(response.status(), 409);
        assert!(!body(response).await.contains("account"));
        let db = handler(false).unwrap_err();
        assert!(db.lock_error().is_none());
        assert!(db.to_string().contains("10.1.2.3"), "{db}");
        let response = db.into_response();
        assert_eq!(response.status(), 500);
        assert_eq!(body(response).await, "internal server error");
        let text: HandlerError = "plain text".into();
        assert_eq!(text.into_response().status(), 500);
    }
}
