//! A set excludes each name and each name the set; the same task is refused at once; bad
//! names, other modes and application data are refused; opposite orders never deadlock.

use super::*;

#[tokio::test]
async fn a_set_excludes_each_name_and_each_name_excludes_the_set() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let both = locks
        .lock_many(["a", "b"])
        .try_acquire()
        .await
        .expect("free");
    assert!(both.is_held());
    let held = values(&server, &["a", "b"]).await;
    assert!(
        held[0].is_some() && held[0] == held[1],
        "one token: {held:?}"
    );
    for name in ["a", "b"] {
        let busy = as_other_owner(locks.lock(name).try_acquire())
            .await
            .unwrap_err();
        assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    }
    both.release().await.expect("release");
    assert_eq!(values(&server, &["a", "b"]).await, [None, None]);

    let b = locks.lock("b").try_acquire().await.expect("free");
    let busy = as_other_owner(locks.lock_many(["c", "b"]).try_acquire())
        .await
        .unwrap_err();
    assert!(matches!(busy, Error::Busy { .. }), "{busy}");
    assert_eq!(
        values(&server, &["c"]).await,
        [None],
        "nothing taken in part"
    );
    b.release().await.expect("release");

    // The same name twice is one name.
    let twice = locks
        .lock_many(["d", "d"])
        .try_acquire()
        .await
        .expect("free");
    twice.release().await.expect("release");
}

#[tokio::test]
async fn the_same_task_holding_a_name_is_refused_at_once() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let a = locks.lock("a").try_acquire().await.expect("free");
    let started = Instant::now();
    let err = locks
        .lock_many(["b", "a"])
        .wait(LONG)
        .acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Reentrant { .. }), "{err}");
    assert!(started.elapsed() < EVENT_LIMIT, "it waited on itself");
    a.release().await.expect("release");
    let set = locks
        .lock_many(["a", "b"])
        .try_acquire()
        .await
        .expect("free");
    let err = locks.lock("b").wait(LONG).acquire().await.unwrap_err();
    assert!(matches!(err, Error::Reentrant { .. }), "{err}");
    set.release().await.expect("release");
}

#[tokio::test]
async fn bad_names_other_modes_and_application_data_are_refused() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let empty: [&str; 0] = [];
    let err = locks.lock_many(empty).try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err}");
    let err = locks.lock_many(["a", ""]).try_acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err}");

    let reentrant = as_other_owner(locks.reentrant("r").try_acquire())
        .await
        .expect("free");
    let err = locks.lock_many(["a", "r"]).try_acquire().await.unwrap_err();
    assert!(
        matches!(err, Error::ModeConflict { ref name, .. } if name == "r"),
        "{err}"
    );
    reentrant.release().await.expect("release");

    let mut conn = server.async_connection().await;
    let _: () = conn
        .set(lock_key("data"), "the application's")
        .await
        .expect("SET");
    let err = locks
        .lock_many(["a", "data"])
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::WrongType { ref name, .. } if name == "data"),
        "{err}"
    );
    assert_eq!(values(&server, &["a"]).await, [None], "nothing taken");
    let data: String = conn.get(lock_key("data")).await.expect("GET");
    assert_eq!(data, "the application's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_asking_in_opposite_orders_never_deadlock() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let other = client(&server).await;
    const ROUNDS: usize = 200;
    let started = Instant::now();
    let run = |locks: Client, names: [&'static str; 2]| {
        tokio::spawn(as_other_owner(async move {
            for _ in 0..ROUNDS {
                let both = locks
                    .lock_many(names)
                    .wait(Duration::from_secs(60))
                    .acquire()
                    .await?;
                tokio::task::yield_now().await;
                both.release().await?;
            }
            Ok::<_, Error>(())
        }))
    };
    let forward = run(locks.clone(), ["x", "y"]);
    let backward = run(other.clone(), ["y", "x"]);
    let forward_again = run(locks, ["x", "y"]);
    let backward_again = run(other, ["y", "x"]);
    for task in [forward, backward, forward_again, backward_again] {
        task.await
            .expect("task")
            .expect("every round took both names");
    }
    eprintln!(
        "4 x {ROUNDS} rounds of [x, y] against [y, x] in {:?}",
        started.elapsed()
    );
    assert_eq!(values(&server, &["x", "y"]).await, [None, None]);
}
