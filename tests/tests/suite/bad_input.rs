//! Bad input and bad servers: a clear typed error, no panic, nothing of the user's lost.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use distlock::{Client, Error, Op};
use distlock_testkit::RedisServer;
use redis::AsyncCommands;

async fn client(server: &RedisServer) -> Client {
    Client::connect(&server.url()).await.expect("connect")
}

/// Every command the server has executed, less the INFO calls that read them: proves that
/// a refused request sent nothing.
fn commands_seen(server: &RedisServer) -> BTreeMap<String, u64> {
    let mut stats = server.commandstats();
    stats.remove("info");
    stats
}

#[tokio::test]
async fn zero_ttl_is_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut g = locks.lock("z").try_acquire().await.expect("free");
    let before = commands_seen(&server);
    let err = locks
        .lock("z2")
        .ttl(Duration::ZERO)
        .try_acquire()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    assert!(err.to_string().contains("ttl must be above zero"), "{err}");
    assert!(!err.is_retryable());
    let err = g.extend(Duration::ZERO).await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    assert_eq!(
        commands_seen(&server),
        before,
        "a refused call sent a command"
    );
    assert!(g.is_held(), "a refused extend leaves the lease alone");
    g.release().await.expect("release");
}

#[tokio::test]
async fn empty_long_and_non_utf8_names_are_refused_before_anything_is_sent() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let before = commands_seen(&server);
    let huge = vec![b'k'; 1024 * 1024];
    let cases: [(&[u8], &str); 3] = [
        (b"", "empty"),
        (&huge, "limit is 8192"),
        (b"order:\xff\xfe", "not UTF-8"),
    ];
    for (name, reason) in cases {
        let err = locks.lock(name).try_acquire().await.unwrap_err();
        assert!(matches!(err, Error::InvalidName { .. }), "{err}");
        assert!(err.to_string().contains(reason), "{err}");
        assert!(
            err.to_string().len() < 400,
            "the message stays short: {err}"
        );
    }
    assert_eq!(commands_seen(&server), before);
    let keys: Vec<String> = server
        .async_connection()
        .await
        .keys("*")
        .await
        .expect("KEYS");
    assert!(keys.is_empty(), "nothing written: {keys:?}");
}

#[tokio::test]
async fn a_key_holding_user_data_is_reported_and_left_byte_identical() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let mut raw = server.async_connection().await;
    let _: () = raw
        .hset("distlock:{user:1}", "name", "ada")
        .await
        .expect("HSET");
    let _: () = raw
        .set("distlock:{plain}", "user value")
        .await
        .expect("SET");
    let _: () = raw
        .rpush("distlock:#fence:{fenced}", "x")
        .await
        .expect("RPUSH");
    for (name, key, found) in [
        ("user:1", "distlock:{user:1}", "hash"),
        ("plain", "distlock:{plain}", "string without expiry"),
        (
            "fenced",
            "distlock:#fence:{fenced}",
            "list at its fencing counter",
        ),
    ] {
        let dump = |mut c: redis::aio::MultiplexedConnection| async move {
            let d: Vec<u8> = redis::cmd("DUMP")
                .arg(key)
                .query_async(&mut c)
                .await
                .expect("DUMP");
            d
        };
        let before = dump(raw.clone()).await;
        // The counter is touched only when a token is asked for.
        let err = locks
            .lock(name)
            .wait(Duration::from_millis(200))
            .fencing(name == "fenced")
            .acquire()
            .await
            .unwrap_err();
        match &err {
            Error::WrongType { found: f, .. } => assert!(f.contains(found), "{err}"),
            other => panic!("expected WrongType for {name}, got {other}"),
        }
        assert!(!err.is_retryable());
        // A single try tells the same (the plain acquire's busy answer is not trusted for a
        // value that is not one of ours).
        let once = locks
            .lock(name)
            .fencing(name == "fenced")
            .try_acquire()
            .await
            .unwrap_err();
        assert!(
            matches!(&once, Error::WrongType { found: f, .. } if f.contains(found)),
            "{once}"
        );
        assert_eq!(dump(raw.clone()).await, before, "{key} changed");
    }
    // The counter's data stopped the script before the lock key was written.
    let exists: bool = raw.exists("distlock:{fenced}").await.expect("EXISTS");
    assert!(!exists);
}

#[tokio::test]
async fn no_server_listening_fails_within_the_connect_timeout() {
    // A port that refuses connections ...
    let refused = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    connect_fails_fast(&format!("redis://{refused}")).await;
    // ... and one that accepts but never answers.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind");
    connect_fails_fast(&format!("redis://{}", silent.local_addr().expect("addr"))).await;
}

/// A server that cannot be reached concerns no lock: `name()` is the lock's name, not the
/// server's address; the address stays in the message for the service's logs, and out of the
/// HTTP answer the error makes.
#[tokio::test]
async fn an_unreachable_server_is_named_in_the_log_not_as_a_lock_nor_to_http_callers() {
    use axum::response::IntoResponse;
    let refused = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let err = Client::builder(&format!("redis://{refused}"))
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap_err();
    assert_eq!(err.name(), None, "{err}");
    let port = refused.port().to_string();
    assert!(err.to_string().contains(&port), "{err}");
    let response = err.into_response();
    assert_eq!(response.status(), 503);
    let body = axum::body::to_bytes(response.into_body(), 1 << 16)
        .await
        .expect("body");
    let body = String::from_utf8_lossy(&body);
    assert!(
        !body.contains(&port) && !body.contains("127.0.0.1") && !body.contains("redis"),
        "{body}"
    );
}

/// Connecting to `url` fails with a retryable connect error, within the 300 ms connect
/// timeout plus generous slack: the point is that it does not hang.
async fn connect_fails_fast(url: &str) {
    let started = Instant::now();
    let err = Client::builder(url)
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Redis {
                op: Op::Connect,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.is_retryable(), "a connection failure may pass: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "no hang: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_server_refusing_auth_is_a_clear_error_and_the_password_is_not_shown() {
    let server = RedisServer::start_with(&["--requirepass", "right-password"]);
    let port = server.port();
    let err = Client::connect(&format!("redis://:wrong-password@127.0.0.1:{port}"))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            Error::Redis {
                op: Op::Connect,
                ..
            }
        ),
        "{text}"
    );
    assert!(!text.contains("wrong-password"), "{text}");
    let ok = Client::connect(&format!("redis://:right-password@127.0.0.1:{port}"))
        .await
        .expect("the right password works");
    ok.lock("auth")
        .try_acquire()
        .await
        .expect("free")
        .release()
        .await
        .expect("release");
}

#[tokio::test]
async fn a_bad_url_or_prefix_is_a_config_error() {
    let err = Client::connect("http://127.0.0.1:1").await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
    let err = Client::builder("redis://127.0.0.1:1")
        .prefix("a{b}")
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err}");
}

/// Every builder setting that one deployment shape would ignore is refused by that shape,
/// naming the setting and the shape, before anything is sent (the URLs point nowhere).
#[tokio::test]
async fn a_setting_the_deployment_would_ignore_is_refused() {
    let one = || Client::builder("redis://127.0.0.1:1");
    let quorum = || {
        Client::quorum_builder([
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:2",
            "redis://127.0.0.1:3",
        ])
    };
    let cluster = || Client::cluster_builder(["redis://127.0.0.1:1"]);
    let sentinel = || Client::sentinel_builder(["redis://127.0.0.1:1"], "locks");
    let ms = Duration::from_millis(50);
    let cases = [
        ("connections", quorum().connections(2), "quorum"),
        ("connections", cluster().connections(2), "Cluster"),
        ("connections", sentinel().connections(2), "Sentinel"),
        ("node_timeout", one().node_timeout(ms), "single-node"),
        ("node_timeout", cluster().node_timeout(ms), "Cluster"),
        ("node_timeout", sentinel().node_timeout(ms), "Sentinel"),
        ("restart_delay", one().restart_delay(ms), "single-node"),
        ("restart_delay", cluster().restart_delay(ms), "Cluster"),
        ("restart_delay", sentinel().restart_delay(ms), "Sentinel"),
        ("local_handoff", quorum().local_handoff(0, ms), "quorum"),
        ("replicas", quorum().replicas(1, ms), "quorum"),
    ];
    for (setting, builder, shape) in cases {
        let err = builder.connect().await.unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(err, Error::InvalidConfig { .. }),
            "{setting} on {shape}: {err}"
        );
        assert!(
            text.contains(setting) && text.contains(shape),
            "{setting} on {shape}: {text}"
        );
    }
    // Where a setting applies it is taken (and the connection then fails: nothing listens).
    let applies = [
        one().connections(1).local_handoff(0, ms).replicas(1, ms),
        quorum().node_timeout(ms).restart_delay(ms),
        cluster().local_handoff(0, ms).replicas(1, ms),
    ];
    for builder in applies {
        let err = builder.connect_timeout(ms).connect().await.unwrap_err();
        assert!(!matches!(err, Error::InvalidConfig { .. }), "{err}");
    }
}

#[tokio::test]
async fn the_client_reconnects_after_a_server_restart() {
    let mut server = RedisServer::start();
    let locks = client(&server).await;
    locks
        .lock("r")
        .try_acquire()
        .await
        .expect("free")
        .release()
        .await
        .expect("release");
    server.kill();
    let err = locks.lock("r").try_acquire().await.unwrap_err();
    assert!(
        err.is_retryable(),
        "a dead server is a transient error: {err}"
    );
    server.restart();
    // The restarted server is empty: it has lost the scripts too, which redis::Script reloads.
    let g = locks
        .lock("r")
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("the client reconnects within the wait");
    assert!(g.is_held());
    g.release().await.expect("release after reconnect");
}
