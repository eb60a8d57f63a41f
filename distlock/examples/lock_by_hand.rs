//! Take a lock by hand: a lease renewed while held, a wait for a busy lock, a fencing token
//! for the resource it protects, and what to do with each error.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p distlock --example lock_by_hand
//! ```

use std::time::Duration;

use distlock::{Client, Error};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locks = Client::connect(&url).await?;

    let request = locks
        .lock("invoice:7")
        .ttl(Duration::from_secs(10)) // renewed every ttl/3 while held
        .wait(Duration::from_secs(2)) // how long to wait if someone else holds it
        .fencing(true); // a token the protected resource can check
    let guard = match request.acquire().await {
        Ok(guard) => guard,
        Err(e) if e.is_contended() => {
            println!("someone else is invoicing #7; nothing ran: {e}");
            return Ok(());
        }
        Err(e) if e.is_transient() => {
            println!("Redis is unreachable; nothing ran, try again later: {e}");
            return Ok(());
        }
        Err(e) => return Err(e.into()),
    };
    let token = guard.fencing_token().expect("asked for one");
    println!("holding {} with fencing token {token}", guard.name());

    // A second taker, as another process would be: busy at once with `try_acquire`.
    let other = Client::connect(&url).await?;
    match other.lock("invoice:7").try_acquire().await {
        Err(Error::Busy { .. }) => println!("a second client finds it busy"),
        other => println!("unexpected: {other:?}"),
    }

    // ... the work: send `token` with every write, and have the store refuse smaller ones ...
    if !guard.is_held() {
        // The lease was lost (a long stall, Redis gone): the outcome of the work is unknown.
        return Err("lost the lock while invoicing".into());
    }
    guard.release().await?;
    println!("released; the second client gets it now");
    let again = other.lock("invoice:7").try_acquire().await?;
    again.release().await?;
    Ok(())
}
