//! A deployment shared by every test of one test binary, owned by a thread of its own.
//!
//! Forming a Redis Cluster or a Sentinel setup takes seconds, so a test binary starts one and
//! its tests share it. The servers must be spawned (and respawned by `restart`) from a thread
//! that lives as long as the process: the kit ties each server's life to its spawning thread
//! (`PR_SET_PDEATHSIG`, see [`RedisServer`](crate::RedisServer)), and a test's own thread ends
//! with the test. A [`Keeper`] is that thread: it builds the deployment, then runs the
//! closures tests send it, one at a time. At process exit (an `atexit` hook) it drops the
//! deployment, which kills the servers and removes their directories; should the process die
//! without running it, the death signal still takes the servers down.

use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, Once};
use std::thread;
use std::time::Duration;

type Job<T> = Box<dyn FnOnce(&mut T) + Send>;

enum Message<T> {
    Run(Job<T>),
    /// Drop the deployment and acknowledge.
    Shutdown(mpsc::Sender<()>),
}

/// A shutdown request for one keeper, run at process exit.
type Stopper = Box<dyn Fn() + Send>;

static STOPPERS: Mutex<Vec<Stopper>> = Mutex::new(Vec::new());
static AT_EXIT: Once = Once::new();

/// How long the exit hook waits for a keeper to take its servers down.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);

/// Owns a deployment `T` on a thread of its own; see the module docs.
///
/// ```no_run
/// use std::sync::LazyLock;
/// use distlock_testkit::{Keeper, RedisCluster};
///
/// static CLUSTER: LazyLock<Keeper<RedisCluster>> = LazyLock::new(|| Keeper::new(RedisCluster::start));
///
/// let urls = CLUSTER.with(|c| c.urls());
/// ```
pub struct Keeper<T> {
    tx: Mutex<mpsc::Sender<Message<T>>>,
    serial: tokio::sync::Mutex<()>,
}

impl<T: 'static> Keeper<T> {
    /// Spawns the keeper thread, builds the deployment there with `make`, and returns once it
    /// is built.
    ///
    /// # Panics
    /// If `make` panics (the deployment could not be formed).
    pub fn new(make: impl FnOnce() -> T + Send + 'static) -> Self {
        let (tx, rx) = mpsc::channel::<Message<T>>();
        let (ready_tx, ready_rx) = mpsc::channel::<()>();
        thread::Builder::new()
            .name("distlock-testkit-keeper".into())
            .spawn(move || {
                let mut deployment = make();
                let _ = ready_tx.send(());
                while let Ok(message) = rx.recv() {
                    match message {
                        Message::Run(job) => job(&mut deployment),
                        Message::Shutdown(ack) => {
                            drop(deployment);
                            let _ = ack.send(());
                            // Keep the thread (and so nothing else) alive until exit.
                            while rx.recv().is_ok() {}
                            return;
                        }
                    }
                }
            })
            .expect("spawn the keeper thread");
        ready_rx
            .recv()
            .expect("the deployment failed to start (see the panic above)");
        let stopper = tx.clone();
        lock(&STOPPERS).push(Box::new(move || {
            let (ack_tx, ack_rx) = mpsc::channel();
            if stopper.send(Message::Shutdown(ack_tx)).is_ok() {
                let _ = ack_rx.recv_timeout(SHUTDOWN_LIMIT);
            }
        }));
        AT_EXIT.call_once(|| {
            // SAFETY: registers a plain `extern "C" fn` that does not unwind.
            unsafe {
                libc::atexit(stop_all);
            }
        });
        Keeper {
            tx: Mutex::new(tx),
            serial: tokio::sync::Mutex::new(()),
        }
    }

    /// Runs `f` on the deployment (on the keeper thread) and returns its result. A panic in
    /// `f` is raised again here, in the caller's thread.
    pub fn with<R: Send + 'static>(&self, f: impl FnOnce(&mut T) -> R + Send + 'static) -> R {
        let (result_tx, result_rx) = mpsc::channel();
        let job: Job<T> = Box::new(move |deployment| {
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(deployment)));
            let _ = result_tx.send(result);
        });
        lock(&self.tx)
            .send(Message::Run(job))
            .expect("the keeper thread is gone");
        match result_rx.recv().expect("the keeper thread is gone") {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Serialises the tests that disturb the deployment (kill, pause, migrate): hold the
    /// guard for the whole test (an async lock: each test has a runtime of its own, and the
    /// guard lives across its awaits). A test that panics releases it.
    pub async fn serial(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.serial.lock().await
    }
}

extern "C" fn stop_all() {
    let stoppers = std::mem::take(&mut *lock(&STOPPERS));
    for stop in stoppers {
        stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
