//! The read/write attributes (`#[read_lock]`, `#[write_lock]`).

use super::*;

#[read_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn read_together(locks: &Client, id: u32, both_inside: &Barrier) -> Result<(), AppError> {
    tokio::time::timeout(Duration::from_secs(5), both_inside.wait())
        .await
        .map_err(|_| AppError::Body("the other reader never got in"))?;
    Ok(())
}

#[read_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn read_until(
    locks: &Client,
    id: u32,
    inside: &Notify,
    leave: &Notify,
) -> Result<(), AppError> {
    inside.notify_one();
    leave.notified().await;
    Ok(())
}

#[write_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn write_now(locks: &Client, id: u32) -> Result<(), AppError> {
    Ok(())
}

#[write_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn write_until(
    locks: &Client,
    id: u32,
    inside: &Notify,
    leave: &Notify,
) -> Result<(), AppError> {
    inside.notify_one();
    leave.notified().await;
    Ok(())
}

#[read_lock(key = "doc:<id>", client = locks, wait = "0s")]
async fn read_now(locks: &Client, id: u32) -> Result<(), AppError> {
    Ok(())
}

/// Runs `held` (a locked call that signals `inside` and waits for `leave`) and, while it is
/// inside, `probe`; returns the probe's result.
async fn while_held<H, P, T>(held: H, inside: &Notify, leave: &Notify, probe: P) -> T
where
    H: Future<Output = Result<(), AppError>>,
    P: Future<Output = T>,
{
    let check = async {
        inside.notified().await;
        let result = probe.await;
        leave.notify_one();
        result
    };
    let (held, result) = tokio::join!(held, check);
    held.expect("the holding call");
    result
}

#[tokio::test]
async fn read_locks_share_and_write_locks_exclude() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    // Two readers inside at once (each waits for the other), each its own task.
    let barrier = Arc::new(Barrier::new(2));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (locks, barrier) = (locks.clone(), barrier.clone());
            tokio::spawn(async move { read_together(&locks, 1, &barrier).await })
        })
        .collect();
    for reader in readers {
        reader.await.expect("reader task").expect("readers share");
    }

    let (inside, leave) = (Notify::new(), Notify::new());
    let blocked_writer = while_held(
        read_until(&locks, 2, &inside, &leave),
        &inside,
        &leave,
        async { as_other_owner(write_now(&locks, 2)).await },
    )
    .await;
    assert!(matches!(
        blocked_writer.unwrap_err().lock(),
        Error::Busy { .. }
    ));

    let blocked_reader = while_held(
        write_until(&locks, 3, &inside, &leave),
        &inside,
        &leave,
        async { as_other_owner(read_now(&locks, 3)).await },
    )
    .await;
    assert!(matches!(
        blocked_reader.unwrap_err().lock(),
        Error::Busy { .. }
    ));

    write_now(&locks, 2).await.expect("free after the reader");
    read_now(&locks, 3).await.expect("free after the writer");
}

#[read_lock(key = "rw:<name>", client = locks, wait = "30s")]
async fn probed_read(
    locks: &Client,
    name: &str,
    readers: &Observer,
    writers: &str,
) -> Result<(), AppError> {
    readers.enter_excluding(writers).await;
    tokio::time::sleep(Duration::from_micros(300)).await;
    readers.exit().await;
    Ok(())
}

#[write_lock(key = "rw:<name>", client = locks, wait = "30s")]
async fn probed_write(
    locks: &Client,
    name: &str,
    writers: &Observer,
    readers: &str,
) -> Result<(), AppError> {
    writers.enter_excluding(readers).await;
    writers.bump(Duration::from_micros(300)).await;
    writers.exit().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_readers_and_writers_never_overlap() {
    let (server, probe) = (RedisServer::start(), RedisServer::start());
    let locks = client(&server).await;
    let readers = Observer::connect(&probe.url(), "readers").await;
    let writers = Observer::connect(&probe.url(), "writers").await;
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (locks, readers, writers) = (locks.clone(), readers.clone(), writers.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                if i % 2 == 0 {
                    probed_write(&locks, "x", &writers, "readers")
                        .await
                        .expect("write");
                } else {
                    probed_read(&locks, "x", &readers, "writers")
                        .await
                        .expect("read");
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(
        writers.overlaps().await,
        0,
        "a writer entered beside readers"
    );
    assert_eq!(
        readers.overlaps().await,
        0,
        "a reader entered beside a writer"
    );
    assert_eq!(writers.violations().await, 0, "two writers at once");
    assert_eq!(
        writers.counter().await,
        writers.acked().await,
        "lost updates"
    );
    assert_eq!(writers.acked().await, 60);
}
