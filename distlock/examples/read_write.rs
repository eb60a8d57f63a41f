//! A read/write lock: readers share it, a writer is alone, and a waiting writer keeps new
//! readers out so that a stream of readers cannot starve it.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p distlock --example read_write
//! ```

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock::Client;

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let locks = Client::connect(&url).await?;
    // How many tasks are inside at once, readers and writers apart.
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));

    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..6 {
        let (locks, readers, writers) = (locks.clone(), readers.clone(), writers.clone());
        tasks.spawn(async move {
            let writing = i % 3 == 0;
            let request = if writing {
                locks.write("doc:7")
            } else {
                locks.read("doc:7")
            };
            let guard = request.wait(Duration::from_secs(10)).acquire().await?;
            let (mine, theirs) = if writing {
                (&writers, &readers)
            } else {
                (&readers, &writers)
            };
            let inside = mine.fetch_add(1, Ordering::SeqCst) + 1;
            assert_eq!(theirs.load(Ordering::SeqCst), 0, "a reader beside a writer");
            assert!(!writing || inside == 1, "two writers at once");
            println!(
                "task {i}: {} ({inside} inside)",
                if writing { "writing" } else { "reading" }
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
            mine.fetch_sub(1, Ordering::SeqCst);
            guard.release().await
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("task")?;
    }

    // A writer may also take the read side, then drop the write side: it keeps reading.
    let write = locks.write("doc:7").acquire().await?;
    let read = locks.read("doc:7").try_acquire().await?;
    write.release().await?;
    println!("downgraded: still reading, other readers may join");
    read.release().await
}
