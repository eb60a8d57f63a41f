//! A socket closed with calls in flight, a caller parked mid-request.

use super::*;

/// User + system CPU time so far of this process's threads named `name` (to the clock tick):
/// the runtime of one test, whatever other tests of the binary run meanwhile.
fn threads_cpu_time(name: &str) -> Duration {
    let mut ticks = 0;
    for task in std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .flatten()
    {
        let path = task.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // utime and stime: the 12th and 13th fields after the parenthesised name.
        if let Some((_, rest)) = stat.rsplit_once(')') {
            let fields: Vec<u64> = rest
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|f| f.parse().ok())
                .collect();
            ticks += fields.iter().sum::<u64>();
        }
    }
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_nanos(ticks * 1_000_000_000 / per_second)
}

/// A read brings more frames than calls wait for (a second reply to one command), and the
/// server then closes the connection: the calls fail at once with an error, and nothing
/// spins (the CPU time of the client's runtime threads is measured; the process's own,
/// `own_cpu_time`, is printed too). (The answers matched before the extra frame were
/// stranded, their callers waited for ever, and once the socket closed they read
/// end-of-stream in a loop: 100 % of a core.)
#[test]
fn a_closed_socket_with_calls_in_flight_costs_no_cpu() {
    const THREADS: &str = "closed-socket";
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(THREADS)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let server = Hostile::start(move |_, command| {
            let set = command
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case(b"SET"));
            if set {
                // The answer, and one no command asked for.
                return Reply::Bytes(b"_\r\n+OK\r\n".to_vec());
            }
            Reply::Bytes(plausible(command))
        })
        .await;
        let client = Client::builder(&server.url())
            .response_timeout(Duration::from_millis(500))
            .connect()
            .await
            .expect("connect");
        let calls: Vec<_> = (0..4)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move {
                    let call = client.lock(format!("k{i}")).try_acquire();
                    tokio::time::timeout(Duration::from_secs(5), call).await
                })
            })
            .collect();
        // The server closes every connection a moment later.
        tokio::time::sleep(Duration::from_millis(300)).await;
        drop(server);
        let (cpu_before, own_before) = (threads_cpu_time(THREADS), own_cpu_time());
        let wall_before = Instant::now();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu = threads_cpu_time(THREADS) - cpu_before;
        let own = own_cpu_time() - own_before;
        let wall = wall_before.elapsed();
        let mut hung = 0;
        for call in calls {
            if call.await.expect("task").is_err() {
                hung += 1;
            }
        }
        println!(
            "{cpu:?} of CPU on the client's threads ({own:?} in the process) in {wall:?}; \
             {hung} of 4 calls hung"
        );
        assert!(
            cpu < wall / 4,
            "the client's threads used {cpu:?} of CPU in {wall:?} with nothing to do"
        );
        assert_eq!(
            hung, 0,
            "calls still waiting 5 s after the connection closed"
        );
    });
}

/// A release future polled once (so its request went out) and then kept without being polled
/// again, as a `select!` branch or a future parked in a struct can be: the other tasks of the
/// client lock and release as usual, on every connection count. (The parked caller held the
/// connection's reading role: every other call on it timed out until it was polled or dropped.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_caller_does_not_stall_the_others() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(&server.addr()).expect("fault proxy");
    for connections in [1, 2, 3] {
        let client = Client::builder(&proxy.url())
            .connections(connections)
            .connect()
            .await
            .expect("connect");
        let guard = client
            .lock(format!("parked:{connections}"))
            .try_acquire()
            .await
            .expect("free");
        // The release's answer comes late, so that its one poll leaves it waiting.
        proxy.reply_latency(Duration::from_millis(100));
        let mut release = Box::pin(guard.release());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let first = release.as_mut().poll(&mut cx);
        proxy.reply_latency(Duration::ZERO);
        assert!(
            first.is_pending(),
            "connections({connections}): released at the first poll: {first:?}"
        );
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..6 {
            let client = client.clone();
            tasks.spawn(async move {
                for i in 0..20 {
                    let name = format!("other:{t}:{i}");
                    let guard = client
                        .lock(&name)
                        .try_acquire()
                        .await
                        .map_err(|e| format!("{name}: {e:?}"))?;
                    guard
                        .release()
                        .await
                        .map_err(|e| format!("{name} release: {e:?}"))?;
                }
                Ok::<(), String>(())
            });
        }
        let mut failed = Vec::new();
        while let Some(task) = tasks.join_next().await {
            if let Err(e) = task.expect("task") {
                failed.push(e);
            }
        }
        assert!(
            failed.is_empty(),
            "connections({connections}), after {:?}: {failed:?}",
            started.elapsed()
        );
        // Polled at last, the parked release completes.
        within("the parked release", release)
            .await
            .expect("released");
    }
}
