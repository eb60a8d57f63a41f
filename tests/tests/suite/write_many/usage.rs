//! The attribute takes a list of keys; `lock_many` over a written name says how to fix it.

use super::*;

#[write_lock(key = ["attr:<from>", "attr:<to>"], client = locks, wait = "30s")]
async fn transfer(locks: &Client, from: u32, to: u32, inside: &Occupancy) -> Result<(), Error> {
    inside.write(0);
    inside.write(1);
    tokio::time::sleep(Duration::from_millis(2)).await;
    inside.write_done(0);
    inside.write_done(1);
    Ok(())
}

#[write_lock(key = "attr:<id>", client = locks, wait = "30s")]
async fn deposit(locks: &Client, id: u32, inside: &Occupancy) -> Result<(), Error> {
    inside.write(id as usize);
    tokio::time::sleep(Duration::from_millis(2)).await;
    inside.write_done(id as usize);
    Ok(())
}

/// The README's design in attributes: `#[write_lock(key = "account:<id>")]` for one account,
/// `#[write_lock(key = [..])]` for a transfer; before, the list was refused at compile time
/// and `#[distributed_lock(key = [..])]` met the single writer with `ModeConflict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_lock_attribute_takes_a_list_of_keys() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let inside = Arc::new(Occupancy::default());
    let mut tasks = Vec::new();
    for t in 0..6u32 {
        let (locks, inside) = (locks.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..10u32 {
                let i = (t + round) % 2;
                if t % 2 == 0 {
                    transfer(&locks, i, 1 - i, &inside).await?;
                } else {
                    deposit(&locks, i, &inside).await?;
                }
            }
            Ok::<(), Error>(())
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("no lock error");
    }
    assert_eq!(inside.overlaps.load(Ordering::SeqCst), 0);
}

/// `lock_many` still takes setnx locks: a name written elsewhere is refused with
/// `ModeConflict`, whose message says the name is used in two modes and what to do.
#[tokio::test]
async fn lock_many_over_a_written_name_says_how_to_fix_it() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let w = as_other_owner(locks.write("m-a").try_acquire())
        .await
        .expect("free");
    let err = locks
        .lock_many(["m-a", "m-b"])
        .try_acquire()
        .await
        .unwrap_err();
    match &err {
        Error::ModeConflict {
            name,
            held_as,
            requested,
        } => {
            assert_eq!(
                (name.as_str(), *held_as, *requested),
                ("m-a", LockMode::Write, LockMode::SetNx)
            );
        }
        other => panic!("{other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("two modes") && text.contains("write_many"),
        "{text}"
    );
    w.release().await.expect("release");
    let set = locks
        .lock_many(["m-a", "m-b"])
        .try_acquire()
        .await
        .expect("free");
    let err = as_other_owner(locks.write_many(["m-b", "m-c"]).try_acquire())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ModeConflict { ref name, held_as: LockMode::SetNx, requested: LockMode::Write } if name == "m-b"),
        "{err}"
    );
    assert!(
        nothing_left(&server, &["m-c"]).await,
        "nothing taken in part"
    );
    set.release().await.expect("release");
}
