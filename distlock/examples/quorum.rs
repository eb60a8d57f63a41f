//! Redlock: one lock over three (or five) independent Redis masters, held only while a majority
//! granted it. One server failing or restarting empty cannot hand the lock to a second owner.
//!
//! ```text
//! REDIS_URLS=redis://10.0.0.1:6379,redis://10.0.0.2:6379,redis://10.0.0.3:6379 \
//!     cargo run -p distlock --example quorum
//! ```

use std::time::Duration;

use distlock::Client;

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let urls = std::env::var("REDIS_URLS").unwrap_or_else(|_| {
        "redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381".into()
    });
    let locks = Client::quorum_builder(urls.split(','))
        // A node's vote counts only once its server has been up this long: a server that
        // restarted without its data forgot its locks. Set it to your longest ttl. (This
        // example runs against servers that may have just started.)
        .restart_delay(Duration::ZERO)
        .connect()
        .await?;

    let guard = locks
        .lock("payout:7")
        .ttl(Duration::from_secs(10))
        .fencing(true) // the maximum over the granting majority
        .acquire()
        .await?;
    println!(
        "holding payout:7 on a majority, fencing token {:?}, {:?} left",
        guard.fencing_token(),
        guard.remaining()
    );
    guard.release().await?;
    println!("released on every node");
    Ok(())
}
