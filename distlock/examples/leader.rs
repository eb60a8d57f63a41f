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
    // One Ctrl-C listener for the whole run, polled first.
    let mut stop = std::pin::pin!(tokio::signal::ctrl_c());
    loop {
        println!("campaigning");
        let leadership = tokio::select! {
            biased;
            _ = &mut stop => return Ok(()),
            won = election.campaign() => won?,
        };
        let term = leadership.term();
        println!("leading, term {term}");
        // The job runs only while this instance leads: stopped the moment the lead is lost.
        let job = tokio::spawn(job(term));
        tokio::select! {
            biased;
            _ = &mut stop => {
                job.abort();
                // Hands over at once, rather than after the lease (dropping it would too).
                leadership.resign().await?;
                println!("resigned");
                return Ok(());
            }
            lost = leadership.lost() => {
                job.abort();
                println!("lost the lead: {lost}");
            }
        }
    }
}

/// The leader's work. It passes its term with every write: a store that refuses terms
/// smaller than one it has seen ignores a leader that stalled past its lease while another
/// took over.
async fn job(term: u64) {
    let mut every_second = tokio::time::interval(Duration::from_secs(1));
    loop {
        every_second.tick().await;
        println!("job: working as the leader of term {term}");
    }
}
