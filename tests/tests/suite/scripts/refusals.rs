//! Servers that refuse a command the scripts or the acquisitions use: `PUBLISH` (as a
//! Redis 6 Cluster refuses `SPUBLISH`) and `SET .. NX .. GET` (Redis 6).

use super::*;

/// A server that refuses `PUBLISH` (as a Redis 6 Cluster refuses `SPUBLISH`, unknown there):
/// the release frees the lock, says so, and the waiter gets the lock by its fallback (capped
/// by the holder's lease). Failed on the code whose release ran the publish unprotected: the
/// lock was deleted and the release reported a Redis error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_publish_is_refused_still_reports_the_lock_freed() {
    let server = RedisServer::start_with(&["--rename-command", "publish", ""]);
    let locks = client(&server).await;
    let held = locks
        .lock("p")
        .ttl(Duration::from_secs(1))
        .try_acquire()
        .await
        .expect("free");
    let others = client(&server).await;
    let waiter = tokio::spawn(async move {
        others
            .lock("p")
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    });
    // The waiter marked the lock once it listens (its subscription follows its busy attempt).
    let parked = distlock_testkit::wait_until_async(Duration::from_secs(10), || async {
        let channels: Vec<Vec<u8>> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .query_async(&mut server.async_connection().await)
            .await
            .expect("PUBSUB CHANNELS");
        !channels.is_empty()
    })
    .await;
    assert!(parked);
    held.release()
        .await
        .expect("the release freed the lock, whatever became of its wake-up");
    let g = waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    g.release().await.expect("release");
    // Reentrant and read/write releases publish on every release.
    let g = locks.reentrant("r").try_acquire().await.expect("free");
    g.release().await.expect("reentrant release");
    let g = locks.write("w").try_acquire().await.expect("free");
    g.release().await.expect("write release");
    let g = locks.read("w").try_acquire().await.expect("free");
    g.release().await.expect("read release");
    let g = locks.semaphore("s", 2).try_acquire().await.expect("free");
    g.release().await.expect("semaphore release");
    let g = locks.lock("f").try_acquire().await.expect("free");
    assert!(locks.force_unlock("f", "test").await.expect("force unlock"));
    drop(g);
}

/// Forwards connections to `upstream`, answering as a Redis 6 server would: `SET .. GET` is a
/// syntax error there. Each command is rewritten whole (`GET` becomes `GETX`, an option the
/// real server refuses with the same error), so pipelined answers keep their order.
async fn redis6_front(upstream: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
            tokio::spawn(async move {
                let mut pending = Vec::new();
                let mut buf = vec![0; 64 * 1024];
                loop {
                    let n = match from_client.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    pending.extend_from_slice(&buf[..n]);
                    let mut out = Vec::new();
                    while let Some((command, used)) = parse_command(&pending) {
                        out.extend(encode(&refuse_set_get(command)));
                        pending.drain(..used);
                    }
                    if to_server.write_all(&out).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    format!("redis://{addr}/")
}

/// One whole RESP array of bulk strings from the front of `buf`, and its length in bytes.
fn parse_command(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
        let end = buf[at..].windows(2).position(|w| w == b"\r\n")? + at;
        Some((&buf[at..end], end + 2))
    }
    let (head, mut at) = line(buf, 0)?;
    let count: usize = std::str::from_utf8(head.strip_prefix(b"*")?)
        .ok()?
        .parse()
        .ok()?;
    let mut args = Vec::with_capacity(count);
    for _ in 0..count {
        let (len, next) = line(buf, at)?;
        let len: usize = std::str::from_utf8(len.strip_prefix(b"$")?)
            .ok()?
            .parse()
            .ok()?;
        if buf.len() < next + len + 2 {
            return None;
        }
        args.push(buf[next..next + len].to_vec());
        at = next + len + 2;
    }
    Some((args, at))
}

fn encode(args: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n", a.len()).bytes());
        out.extend(a);
        out.extend(b"\r\n");
    }
    out
}

fn refuse_set_get(mut args: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let is_set = args.first().is_some_and(|c| c.eq_ignore_ascii_case(b"SET"));
    let nx = args.iter().any(|a| a.eq_ignore_ascii_case(b"NX"));
    if is_set && nx && args.len() > 3 {
        for a in &mut args[3..] {
            if a.eq_ignore_ascii_case(b"GET") {
                *a = b"GETX".to_vec();
            }
        }
    }
    args
}

fn count(server: &RedisServer, command: &str) -> u64 {
    server.commandstats().get(command).copied().unwrap_or(0)
}

/// Script calls a server ran for locks: `EVALSHA` and `EVAL`, less the writes of the process
/// record (`nodes/record.lua`, one script call and one `HSET` each, which no lock script
/// sends), made before a call site's first hold on a server.
fn lock_scripts(server: &RedisServer) -> u64 {
    count(server, "evalsha") + count(server, "eval") - count(server, "hset")
}

/// One client meets a server that refuses `SET .. NX .. GET`: it takes that server's locks
/// with the acquire script. Another client, on a server that accepts it, keeps sending the
/// plain command. Failed on the code that kept the refusal in one flag for the whole process:
/// the second client sent the script too.
#[tokio::test]
async fn a_server_refusing_set_get_changes_only_the_acquisitions_sent_to_it() {
    let old = RedisServer::start();
    let new = RedisServer::start();
    let old_locks = Client::connect(&redis6_front(old.addr()).await)
        .await
        .expect("connect through the front");
    let g = old_locks.lock("a").try_acquire().await.expect("free");
    assert!(
        count(&old, "evalsha") + count(&old, "eval") >= 1,
        "the refusal sent the acquisition to the script: {:?}",
        old.commandstats()
    );
    g.release().await.expect("release");
    let new_locks = client(&new).await;
    // The first release loads its script (`NOSCRIPT`, then `EVAL`): counted apart.
    let g = new_locks.lock("b").try_acquire().await.expect("free");
    g.release().await.expect("release");
    let before = lock_scripts(&new);
    for _ in 0..3 {
        let g = as_other_owner(new_locks.lock("b").try_acquire())
            .await
            .expect("free");
        g.release().await.expect("release");
    }
    let scripts = lock_scripts(&new) - before;
    // Each cycle: the plain `SET .. GET` and the release script.
    assert_eq!(
        scripts,
        3,
        "acquisitions on the other server went to the script: {:?}",
        new.commandstats()
    );
    // The old server still gets the script, every time.
    let g = old_locks.lock("a").try_acquire().await.expect("free");
    g.release().await.expect("release");
}
