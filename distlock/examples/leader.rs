//! A service of which every instance runs this, and only the leader runs the background job:
//! the others wait to take over. Ctrl-C resigns, and another instance takes over at once;
//! an instance that dies (`kill -9`) is replaced once its lease (the ttl) ran out.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p distlock --example leader
//! ```

use std::time::Duration;

use distlock::Client;

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let election = client
        .election("example:report-scheduler")
        .ttl(Duration::from_secs(10));
    println!("campaigning");
    // The job runs only while this instance leads: dropped the moment the lead is lost, run
    // again (with a new term) when this instance wins again.
    let leading = election.lead(|term| async move {
        println!("leading, term {term}");
        job(term).await
    });
    tokio::select! {
        biased;
        _ = tokio::signal::ctrl_c() => {
            // Dropping `leading` resigns in the background; shutting the client down waits for
            // that, so the next instance takes over at once rather than after the lease.
            let _report = client.shutdown(Duration::from_secs(5)).await;
            println!("resigned");
            Ok(())
        }
        // The job never ends by itself: only an error ends the loop (`ShutDown`, a setting).
        ended = leading => ended,
    }
}

/// The leader's work. It passes its term with every write: a store that refuses terms
/// smaller than one it has seen ignores a leader that stalled past its lease while another
/// took over.
async fn job(term: distlock::FencingToken) {
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    loop {
        every_second.tick().await;
        println!("job: working as the leader of term {term}");
    }
}
