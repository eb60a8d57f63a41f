//! Test kit for `distlock`: runs **real** `redis-server` processes for
//! integration tests, examples and benchmarks. There are no mocks.
//!
//! * [`RedisServer`] — `distlock::testing::TestServer` with the kit's
//!   extras (TLS, `INFO` readings, panicking shorthands), with fault injection: [`kill`](RedisServer::kill),
//!   [`stop`](RedisServer::stop), [`pause`](RedisServer::pause) /
//!   [`resume`](RedisServer::resume) and [`restart`](RedisServer::restart)
//!   on the same port.
//! * [`RedisServers`] — N independent masters (Redlock nodes).
//! * [`FaultProxy`] — a TCP proxy in front of one server that injects
//!   network faults: lost replies with connection resets, a black hole,
//!   latency with jitter, refused connections and resets on demand.
//! * [`RedisCluster`] — a Redis Cluster (3 masters + 3 replicas by default)
//!   formed by `distlock::testing::TestCluster`, any process of which can be
//!   killed, paused or restarted.
//! * [`RedisSentinel`] — a master, its replicas and the sentinels watching it.
//! * [`Keeper`] — owns one such deployment for a whole test binary.
//! * [`Observer`] — occupancy and lost-update probes for mutual-exclusion
//!   tests, shared by several processes through a separate server.
//! * [`Bank`] — accounts on a server of their own and the transfer locked on
//!   two of them at once (`key = [..]`), for tests of several locks at once.
//! * [`common`] — what this project's integration tests share: a client on a kit server, a
//!   lock name's keys and channels, the `contender` processes, the checks every mode passes.
//! * [`PostgresServer`] — a private PostgreSQL (`initdb` into a temp dir, the
//!   server on a free loopback port) for the fenced-write example.
//!
//! `redis-server` is found through `DISTLOCK_REDIS_SERVER` or `PATH`
//! (see [`ensure_redis_available`]). The servers themselves and the fault
//! proxy are the published `distlock::testing` (feature `testing`); the kit
//! adds what only this project's tests need. Linux only: the kit relies on
//! `/proc`.
//!
//! ```no_run
//! use distlock_testkit::RedisServers;
//!
//! let mut nodes = RedisServers::start(5);
//! let urls = nodes.urls();
//! nodes[2].pause();
//! // ... exercise the lock against `urls` with one node unresponsive ...
//! nodes[2].resume();
//! ```

#![warn(missing_docs)]

mod kit {
    pub(crate) mod bank;
    pub(crate) mod binary;
    pub(crate) mod cluster;
    pub(crate) mod keeper;
    pub(crate) mod observer;
    pub(crate) mod postgres;
    pub(crate) mod procfs;
    pub(crate) mod sentinel;
    pub(crate) mod server;
    pub(crate) mod servers;
    pub(crate) mod wait;
}

/// The fault proxy is the published one (`distlock::testing`, feature `testing`).
pub mod common;

pub use distlock::testing::FaultProxy;
pub use kit::bank::{Bank, TransferError};
pub use kit::binary::{ensure_redis_available, redis_server_path, REDIS_SERVER_ENV};
pub use kit::cluster::RedisCluster;
pub use kit::keeper::Keeper;
pub use kit::observer::Observer;
pub use kit::postgres::{ensure_postgres_available, PostgresServer, PG_BINDIR_ENV, PG_USER_ENV};
pub use kit::procfs::{cpu_time, own_cpu_time};
pub use kit::sentinel::RedisSentinel;
pub use kit::server::{RedisServer, RedisServerBuilder};
pub use kit::servers::RedisServers;
pub use kit::wait::{wait_until, wait_until_async};

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use std::net::TcpListener;
    use std::thread;
    use std::time::{Duration, Instant};

    fn set(server: &RedisServer, key: &str, value: &str) {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .exec(&mut server.connection())
            .expect("SET");
    }

    fn get(server: &RedisServer, key: &str) -> Option<String> {
        redis::cmd("GET")
            .arg(key)
            .query(&mut server.connection())
            .expect("GET")
    }

    fn process_exists(pid: u32) -> bool {
        let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
        // SAFETY: signal 0 only checks for existence and permission.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    #[test]
    fn starts_and_answers_ping() {
        let server = RedisServer::start();
        server.ping(Duration::from_secs(1)).expect("raw PING");
        let pong: String = redis::cmd("PING")
            .query(&mut server.connection())
            .expect("PING");
        assert_eq!(pong, "PONG");
        assert_eq!(server.addr(), format!("127.0.0.1:{}", server.port()));
        assert_eq!(
            server.url(),
            format!("redis://127.0.0.1:{}/", server.port())
        );
        let save: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("save")
            .query(&mut server.connection())
            .expect("CONFIG GET save");
        assert_eq!(save, ["save", ""]);
        assert!(server.log_path().exists());
        assert!(server.is_running());
    }

    #[test]
    fn five_servers_have_distinct_ports_and_run_ids() {
        let started = Instant::now();
        let servers = RedisServers::start(5);
        eprintln!("5 servers up in {:?}", started.elapsed());
        assert_eq!(servers.len(), 5);
        let ports: BTreeSet<u16> = servers.iter().map(RedisServer::port).collect();
        let run_ids: BTreeSet<String> = servers.iter().map(RedisServer::run_id).collect();
        assert_eq!(ports.len(), 5);
        assert_eq!(run_ids.len(), 5);
        assert_eq!(servers.urls().len(), 5);
        for server in &servers {
            server.ping(Duration::from_secs(1)).expect("PING");
        }
    }

    #[test]
    fn kill_and_restart_keeps_port_and_loses_data() {
        let mut server = RedisServer::start();
        let (port, run_id, old_pid) = (server.port(), server.run_id(), server.pid());
        set(&server, "k", "v");

        server.kill();
        assert!(!server.is_running());
        assert!(!process_exists(old_pid));
        assert!(server.ping(Duration::from_millis(300)).is_err());
        server.kill(); // idempotent

        server.restart();
        assert!(server.is_running());
        assert_eq!(server.port(), port);
        assert_ne!(server.pid(), old_pid);
        assert_ne!(server.run_id(), run_id);
        assert_eq!(get(&server, "k"), None);
    }

    #[test]
    fn graceful_stop_then_restart() {
        let mut server = RedisServer::start();
        let pid = server.pid();
        server.stop();
        assert!(!server.is_running());
        assert!(!process_exists(pid));
        server.stop(); // idempotent
        server.restart();
        server
            .ping(Duration::from_secs(1))
            .expect("PING after restart");
    }

    #[test]
    fn restarting_a_running_server_is_an_error() {
        let mut server = RedisServer::start();
        let err = server.try_restart().expect_err("restart while running");
        assert!(err.contains("still running"), "{err}");
        assert!(server.is_running());
    }

    #[test]
    fn restart_waits_for_a_busy_port() {
        let mut server = RedisServer::start();
        server.kill();
        let squatter = TcpListener::bind(("127.0.0.1", server.port())).expect("squat port");
        // Plays an unrelated process that releases the port a bit later.
        let releaser = thread::spawn(move || {
            thread::sleep(Duration::from_millis(200));
            drop(squatter);
        });
        server.restart();
        releaser.join().expect("releaser thread");
        server
            .ping(Duration::from_secs(1))
            .expect("PING after rebinding");
    }

    #[test]
    fn pause_blocks_replies_until_resume() {
        let mut server = RedisServer::start();
        server.pause();
        assert!(server.is_paused());
        assert!(server.is_running());
        assert!(server.ping(Duration::from_millis(300)).is_err());
        server.resume();
        assert!(!server.is_paused());
        server
            .ping(Duration::from_secs(1))
            .expect("PING after resume");
    }

    #[test]
    fn dropping_a_paused_server_leaves_no_process() {
        let mut server = RedisServer::start();
        let pid = server.pid();
        server.pause();
        drop(server);
        assert!(!process_exists(pid));
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn dropping_a_server_leaves_no_process() {
        let server = RedisServer::start();
        let pid = server.pid();
        let dir = server.log_path().parent().expect("log dir").to_owned();
        assert!(process_exists(pid));
        drop(server);
        assert!(!process_exists(pid));
        assert!(!dir.exists());
    }

    #[test]
    fn server_outlives_its_spawning_thread() {
        // Servers are spawned from distlock::testing's long-lived thread, so the death signal
        // (PR_SET_PDEATHSIG) comes with the process's end, not the starting thread's.
        let server = thread::spawn(RedisServer::start)
            .join()
            .expect("spawning thread");
        server
            .ping(Duration::from_secs(1))
            .expect("alive after its thread ended");
        assert!(server.is_running());
    }

    #[test]
    fn commandstats_counts_sets() {
        let server = RedisServer::start();
        let mut conn = server.connection();
        for i in 0..3 {
            redis::cmd("SET")
                .arg("k")
                .arg(i)
                .exec(&mut conn)
                .expect("SET");
        }
        let stats = server.commandstats();
        assert_eq!(stats.get("set"), Some(&3), "{stats:?}");
    }

    #[test]
    fn password_protected_server() {
        let server = RedisServer::builder()
            .arg("--requirepass")
            .arg("s3cret")
            .start();
        let pong: String = redis::cmd("PING")
            .query(&mut server.connection())
            .expect("authenticated PING");
        assert_eq!(pong, "PONG");
        let anonymous = redis::Client::open(server.url())
            .expect("client")
            .get_connection()
            .and_then(|mut c| redis::cmd("GET").arg("k").query::<Option<String>>(&mut c));
        assert!(anonymous.is_err());
    }

    #[test]
    fn bad_arguments_report_the_server_output() {
        let err = RedisServer::builder()
            .arg("--no-such-option")
            .arg("1")
            .try_start()
            .expect_err("invalid option must fail");
        assert!(err.contains("no-such-option"), "{err}");
    }

    #[test]
    fn observer_detects_overlap_and_lost_updates() {
        let server = RedisServer::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        rt.block_on(async {
            let a = Observer::connect(&server.url(), "t").await;
            let b = Observer::connect(&server.url(), "t").await;

            assert_eq!(a.enter().await, 1);
            a.bump(Duration::ZERO).await;
            assert_eq!(a.exit().await, 0);
            assert_eq!(b.enter().await, 1);
            b.bump(Duration::ZERO).await;
            assert_eq!(b.exit().await, 0);
            assert_eq!(a.violations().await, 0);
            assert_eq!(a.max_occupancy().await, 1);
            assert_eq!((a.counter().await, a.acked().await), (2, 2));

            a.reset().await;
            assert_eq!(a.enter().await, 1);
            assert_eq!(b.enter().await, 2);
            // Both read the counter before either writes it back.
            tokio::join!(
                a.bump(Duration::from_millis(50)),
                b.bump(Duration::from_millis(50))
            );
            a.exit().await;
            b.exit().await;
            assert_eq!(a.violations().await, 1);
            assert_eq!(a.max_occupancy().await, 2);
            assert_eq!(a.occupancy().await, 0);
            assert_eq!((a.counter().await, a.acked().await), (1, 2));

            let other = Observer::connect(&server.url(), "other").await;
            assert_eq!(other.violations().await, 0);
            assert_eq!(other.counter().await, 0);
        });
    }

    #[test]
    fn a_cluster_forms_and_fails_over() {
        let started = Instant::now();
        let mut cluster = RedisCluster::start();
        eprintln!("cluster up in {:?}", started.elapsed());
        assert_eq!(cluster.len(), 6);
        let slot = RedisCluster::slot_of(b"distlock:{x}");
        let master = cluster.master_of_slot(slot);
        let replicas = cluster.replicas_of_slot(slot);
        assert_eq!(replicas.len(), 1, "one replica per master");
        cluster.server_mut(master).kill();
        let (promoted, took) = cluster.wait_failover(slot, master);
        eprintln!("failover in {took:?}");
        assert_eq!(promoted, replicas[0]);
        cluster.server_mut(master).restart();
        cluster.wait_settled();
        assert_eq!(cluster.replicas_of_slot(slot), vec![master]);
    }

    #[test]
    fn a_sentinel_deployment_forms_and_fails_over() {
        let started = Instant::now();
        let mut deployment = RedisSentinel::start();
        eprintln!("sentinels up in {:?}", started.elapsed());
        assert_eq!(deployment.master(), Some(0));
        deployment.server_mut(0).kill();
        let (promoted, took) = deployment.wait_failover(0);
        eprintln!("failover in {took:?}");
        assert_ne!(promoted, 0);
        deployment.server_mut(0).restart();
        deployment.wait_settled();
        assert_eq!(deployment.master(), Some(promoted));
    }

    #[test]
    fn private_postgres_starts_and_leaves_nothing_behind() {
        let pg = PostgresServer::start();
        let (pid, dir) = (pg.pid(), pg.socket_dir().to_owned());
        assert!(pg.is_running());
        assert!(dir.join(format!(".s.PGSQL.{}", pg.port())).exists());
        std::net::TcpStream::connect(("127.0.0.1", pg.port())).expect("TCP connect");
        assert!(pg.conninfo().contains(&format!("port={}", pg.port())));
        drop(pg);
        assert!(!process_exists(pid));
        assert!(!dir.exists());
    }

    #[test]
    fn async_connection_works() {
        let server = RedisServer::start();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let pong: String = rt.block_on(async {
            let mut conn = server.async_connection().await;
            redis::cmd("PING")
                .query_async(&mut conn)
                .await
                .expect("PING")
        });
        assert_eq!(pong, "PONG");
    }
}
