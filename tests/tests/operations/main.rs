//! What operators see: tracing spans and events, metrics through a real recorder, inspection
//! of every mode, forced unlocks, the CLI, and the minimum hold of scheduled jobs.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use common::{as_other_owner, client, pttl};
use distlock::{Error, LockContext, LockMode};
use distlock_testkit::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Longest wait for something that should happen far sooner; only a broken feature reaches it.
const EVENT_LIMIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// A tracing layer that keeps every event and every closed span with its fields.

#[derive(Debug, Clone)]
struct Captured {
    /// `event` or the span's name.
    kind: String,
    level: Level,
    fields: BTreeMap<String, String>,
    /// The fields of the spans around an event.
    scope: BTreeMap<String, String>,
}

impl Captured {
    fn get(&self, field: &str) -> Option<&str> {
        self.fields
            .get(field)
            .or_else(|| self.scope.get(field))
            .map(String::as_str)
    }
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Captured>>>);

impl Capture {
    fn all(&self) -> Vec<Captured> {
        self.0.lock().unwrap().clone()
    }
    fn events(&self, message: &str) -> Vec<Captured> {
        self.all()
            .into_iter()
            .filter(|c| c.kind == "event" && c.get("message").is_some_and(|m| m.contains(message)))
            .collect()
    }
    fn spans(&self, name: &str) -> Vec<Captured> {
        self.all().into_iter().filter(|c| c.kind == name).collect()
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(fields);
            }
        }
    }
    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let mut scope = BTreeMap::new();
        if let Some(spans) = ctx.event_scope(event) {
            for span in spans.from_root() {
                if let Some(f) = span.extensions().get::<Fields>() {
                    scope.extend(f.0.clone());
                }
            }
        }
        self.0.lock().unwrap().push(Captured {
            kind: "event".into(),
            level: *event.metadata().level(),
            fields: fields.0,
            scope,
        });
    }
    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            let fields = span
                .extensions()
                .get::<Fields>()
                .map(|f| f.0.clone())
                .unwrap_or_default();
            self.0.lock().unwrap().push(Captured {
                kind: span.name().to_owned(),
                level: *span.metadata().level(),
                fields,
                scope: BTreeMap::new(),
            });
        }
    }
}

/// Captures what this test's thread traces (tokio tests run on one thread, spawned tasks
/// included).
fn capture() -> (Capture, tracing::subscriber::DefaultGuard) {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    (capture, tracing::subscriber::set_default(subscriber))
}

// ---------------------------------------------------------------------------------------------
// A real metrics recorder, installed once per process. Its snapshots drain what they read, so
// every reading is added to a running total here; each test uses its own key labels.

type MetricKey = (String, Vec<(String, String)>);

struct Totals {
    snapshotter: Snapshotter,
    counters: HashMap<MetricKey, u64>,
    gauges: HashMap<MetricKey, f64>,
    histograms: HashMap<MetricKey, Vec<f64>>,
}

fn totals() -> &'static Mutex<Totals> {
    static TOTALS: OnceLock<Mutex<Totals>> = OnceLock::new();
    TOTALS.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().expect("the only metrics recorder");
        Mutex::new(Totals {
            snapshotter,
            counters: HashMap::new(),
            gauges: HashMap::new(),
            histograms: HashMap::new(),
        })
    })
}

/// Installs the recorder (before the first lock of a test, so nothing is missed).
fn metrics_on() {
    let _ = totals();
}

fn read_metrics() -> std::sync::MutexGuard<'static, Totals> {
    let mut t = totals().lock().unwrap();
    for (key, _, _, value) in t.snapshotter.snapshot().into_vec() {
        let mut labels: Vec<(String, String)> = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        labels.sort();
        let k = (key.key().name().to_owned(), labels);
        match value {
            DebugValue::Counter(n) => *t.counters.entry(k).or_default() += n,
            DebugValue::Gauge(g) => *t.gauges.entry(k).or_default() += g.into_inner(),
            DebugValue::Histogram(v) => t
                .histograms
                .entry(k)
                .or_default()
                .extend(v.into_iter().map(|x| x.into_inner())),
        }
    }
    t
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    v.sort();
    v
}

fn counter(name: &str, pairs: &[(&str, &str)]) -> u64 {
    let t = read_metrics();
    t.counters
        .get(&(name.to_owned(), labels(pairs)))
        .copied()
        .unwrap_or(0)
}

fn gauge(name: &str, pairs: &[(&str, &str)]) -> f64 {
    let t = read_metrics();
    t.gauges
        .get(&(name.to_owned(), labels(pairs)))
        .copied()
        .unwrap_or(0.0)
}

fn histogram(name: &str, pairs: &[(&str, &str)]) -> Vec<f64> {
    let t = read_metrics();
    t.histograms
        .get(&(name.to_owned(), labels(pairs)))
        .cloned()
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Tracing and metrics.

#[tokio::test]
async fn a_contended_acquire_is_traced_and_measured_by_template_not_by_name() {
    metrics_on();
    let (trace, _guard) = capture();
    let server = RedisServer::start();
    let locks = client(&server).await;
    let holder = locks
        .lock("order:7")
        .label("traced-order:<id>")
        .fencing(true)
        .acquire()
        .await
        .expect("free");
    assert_eq!(
        gauge(
            "distlock_locks_held",
            &[("mode", "setnx"), ("label", "traced-order:<id>")]
        ),
        1.0
    );
    let err = as_other_owner(
        locks
            .lock("order:7")
            .label("traced-order:<id>")
            .wait(Duration::from_millis(150))
            .acquire(),
    )
    .await
    .expect_err("held");
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    let busy = as_other_owner(
        locks
            .lock("order:7")
            .label("traced-order:<id>")
            .try_acquire(),
    )
    .await
    .expect_err("held");
    assert!(matches!(busy, Error::Busy { .. }), "{busy:?}");
    holder.release().await.expect("release");

    let spans = trace.spans("distlock.acquire");
    let outcomes: Vec<&str> = spans.iter().filter_map(|s| s.get("outcome")).collect();
    assert_eq!(outcomes, ["acquired", "timeout", "busy"], "{spans:#?}");
    let acquired = &spans[0];
    assert_eq!(acquired.level, Level::INFO);
    assert_eq!(acquired.get("mode"), Some("setnx"));
    assert_eq!(acquired.get("label"), Some("traced-order:<id>"));
    assert!(acquired
        .get("fencing_token")
        .is_some_and(|t| t.parse::<u64>().is_ok()));
    assert_eq!(acquired.get("attempts"), Some("1"));
    let timeout = &spans[1];
    assert!(timeout.get("attempts").unwrap().parse::<u32>().unwrap() >= 1);
    assert!(timeout.get("waited_ms").unwrap().parse::<u64>().unwrap() >= 150);
    // The rendered name never appears unless asked for.
    for c in trace.all() {
        assert!(
            !c.fields
                .values()
                .chain(c.scope.values())
                .any(|v| v.contains("order:7")),
            "the rendered name leaked: {c:?}"
        );
    }
    let waited = trace.events("still busy after waiting");
    assert_eq!(waited.len(), 1);
    assert_eq!(waited[0].level, Level::INFO);
    let released = trace.events("lock released");
    assert_eq!(released.len(), 1);
    assert!(released[0].get("held_ms").is_some());

    let l = |outcome| {
        histogram(
            "distlock_acquire_seconds",
            &[
                ("mode", "setnx"),
                ("label", "traced-order:<id>"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(l("acquired").len(), 1);
    let timeouts = l("timeout");
    assert_eq!(timeouts.len(), 1);
    assert!(timeouts[0] >= 0.15, "{timeouts:?}");
    assert_eq!(l("busy").len(), 1);
    let held = histogram(
        "distlock_hold_seconds",
        &[("mode", "setnx"), ("label", "traced-order:<id>")],
    );
    assert_eq!(held.len(), 1);
    assert_eq!(
        gauge(
            "distlock_locks_held",
            &[("mode", "setnx"), ("label", "traced-order:<id>")]
        ),
        0.0
    );

    // Opting in records the name.
    let g = locks
        .lock("order:8")
        .label("traced-order:<id>")
        .record_name(true)
        .acquire()
        .await
        .expect("free");
    g.release().await.expect("release");
    let last = trace.spans("distlock.acquire").pop().unwrap();
    assert_eq!(last.get("name"), Some("order:8"));
}

#[tokio::test]
async fn a_forced_unlock_and_the_lease_loss_it_causes_are_warned_and_counted() {
    metrics_on();
    let (trace, _guard) = capture();
    let server = RedisServer::start();
    let locks = client(&server).await;
    let name = "forced-job";
    let guard = locks
        .reentrant(name)
        .label("forced-job")
        .ttl(Duration::from_secs(2))
        .renew_every(Duration::from_millis(100))
        .acquire()
        .await
        .expect("free");
    // A waiter in another task: the forced unlock wakes it long before the 2 s lease could end.
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let started = Instant::now();
            let g = locks
                .reentrant(name)
                .wait(EVENT_LIMIT)
                .acquire()
                .await
                .expect("the waiter gets the lock");
            let waited = started.elapsed();
            g.release().await.expect("release");
            waited
        }
    });
    let err = locks
        .force_unlock(name, "  ")
        .await
        .expect_err("a reason is required");
    assert!(matches!(err, Error::InvalidConfig { .. }), "{err:?}");
    assert!(locks
        .force_unlock(name, "holder stuck, ticket 42")
        .await
        .expect("forced"));
    tokio::time::timeout(EVENT_LIMIT, guard.lost())
        .await
        .expect("the holder learns it lost the lock");
    assert!(!guard.is_held());
    waiter.await.expect("waiter");
    drop(guard);

    let forced = trace.events("forcibly unlocked");
    assert_eq!(forced.len(), 1, "{:#?}", trace.all());
    assert_eq!(forced[0].level, Level::WARN);
    assert_eq!(forced[0].get("reason"), Some("holder stuck, ticket 42"));
    assert_eq!(forced[0].get("mode"), Some("reentrant"));
    let lost = trace.events("lease lost");
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].level, Level::WARN);
    assert_eq!(lost[0].get("label"), Some("forced-job"));

    assert_eq!(
        counter("distlock_forced_unlocks_total", &[("mode", "reentrant")]),
        1
    );
    assert_eq!(
        counter(
            "distlock_leases_lost_total",
            &[("mode", "reentrant"), ("label", "forced-job")]
        ),
        1
    );
    let info = locks.inspect(name).await.expect("inspect");
    let record = info.last_forced_unlock.expect("the record is kept");
    assert_eq!(record.reason, "holder stuck, ticket 42");
    assert_eq!(record.mode, Some(distlock::LockMode::Reentrant));
    assert!(record.by.contains(&format!("pid={}", std::process::id())));
    assert!(SystemTime::now().duration_since(record.at).unwrap() < Duration::from_secs(60));
    // Nothing to unlock now.
    assert!(!locks.force_unlock(name, "again").await.expect("nothing"));
}

#[tokio::test]
async fn a_failed_renewal_is_warned_and_counted() {
    metrics_on();
    let (trace, _guard) = capture();
    let mut server = RedisServer::start();
    let locks = distlock::Client::builder(&server.url())
        .response_timeout(Duration::from_millis(200))
        .connect()
        .await
        .expect("connect");
    let guard = locks
        .lock("renew-fails")
        .label("renew-fails")
        .ttl(Duration::from_millis(1500))
        .renew_every(Duration::from_millis(100))
        .acquire()
        .await
        .expect("free");
    server.pause();
    tokio::time::timeout(EVENT_LIMIT, guard.lost())
        .await
        .expect("the lease runs out while the server is frozen");
    server.resume();
    assert!(!trace.events("renewal failed").is_empty());
    assert!(trace
        .events("renewal failed")
        .iter()
        .all(|e| e.level == Level::WARN));
    assert_eq!(trace.events("lease lost").len(), 1);
    assert!(
        counter(
            "distlock_renewals_failed_total",
            &[("mode", "setnx"), ("label", "renew-fails")]
        ) >= 1
    );
    drop(guard);
}

// ---------------------------------------------------------------------------------------------
// Inspection.

fn recent(t: Option<SystemTime>) -> bool {
    t.and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|d| d < Duration::from_secs(60))
}

#[tokio::test]
async fn inspection_reports_the_holder_of_every_exclusive_mode() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let free = locks.inspect("nobody").await.expect("inspect");
    assert!(!free.is_held());
    assert_eq!(free.holder, None);
    assert_eq!(free.last_fencing_token, None);

    // setnx
    let g = locks
        .lock("i-setnx")
        .ttl(Duration::from_secs(20))
        .fencing(true)
        .acquire()
        .await
        .expect("free");
    let info = locks.inspect("i-setnx").await.expect("inspect");
    assert_eq!(info.mode, Some(LockMode::SetNx));
    assert_eq!(info.hold_count, 1);
    assert_eq!(info.fencing_token, g.fencing_token());
    assert!(info.fencing_token.is_some());
    assert!(info.remaining.unwrap() <= Duration::from_secs(20));
    let h = info.holder.expect("holder");
    assert_eq!(h.pid, Some(std::process::id()));
    assert!(h.host.is_some_and(|h| !h.is_empty()));
    assert!(
        h.site
            .as_deref()
            .is_some_and(|s| s.contains("operations.rs")),
        "{:?}",
        h.site
    );
    assert!(recent(h.acquired_at));
    let token = g.fencing_token();
    g.release().await.expect("release");
    let after = locks.inspect("i-setnx").await.expect("inspect");
    assert!(!after.is_held());
    assert_eq!(after.last_fencing_token, token);

    // reentrant, entered twice
    let outer = locks.reentrant("i-re").acquire().await.expect("free");
    let info = locks.inspect("i-re").await.expect("inspect");
    assert_eq!(info.fencing_token, None, "taken without fencing");
    let inner = locks
        .reentrant("i-re")
        .fencing(true)
        .acquire()
        .await
        .expect("re-entry");
    let info = locks.inspect("i-re").await.expect("inspect");
    assert_eq!(info.mode, Some(LockMode::Reentrant));
    assert_eq!(info.hold_count, 2);
    assert_eq!(info.fencing_token, inner.fencing_token());
    assert!(info.fencing_token.is_some(), "minted by the re-entry");
    let h = info.holder.expect("holder");
    assert_eq!(h.pid, Some(std::process::id()));
    assert!(recent(h.acquired_at));
    inner.release().await.expect("release");
    assert_eq!(locks.inspect("i-re").await.unwrap().hold_count, 1);
    outer.release().await.expect("release");
    assert!(!locks.inspect("i-re").await.unwrap().is_held());

    // write
    let w = locks
        .write("i-rw")
        .fencing(true)
        .acquire()
        .await
        .expect("free");
    let info = locks.inspect("i-rw").await.expect("inspect");
    assert_eq!(info.mode, Some(LockMode::Write));
    assert_eq!(info.fencing_token, w.fencing_token());
    assert!(info.fencing_token.is_some());
    assert_eq!(
        info.holder.as_ref().and_then(|h| h.pid),
        Some(std::process::id())
    );
    w.release().await.expect("release");
}

#[tokio::test]
async fn inspection_reports_readers_and_a_waiting_writer() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let r1 = as_other_owner(locks.read("doc").acquire())
        .await
        .expect("read");
    let r2 = as_other_owner(locks.read("doc").acquire())
        .await
        .expect("read");
    let info = locks.inspect("doc").await.expect("inspect");
    assert_eq!(info.mode, Some(LockMode::Read));
    assert_eq!(info.readers.len(), 2);
    assert_eq!(info.hold_count, 2);
    assert!(info.holder.is_none());
    let writer = tokio::spawn({
        let locks = locks.clone();
        async move {
            let w = locks
                .write("doc")
                .wait(EVENT_LIMIT)
                .acquire()
                .await
                .expect("write");
            w.release().await.expect("release");
        }
    });
    // The writer registers its intent on its first attempt.
    let deadline = Instant::now() + EVENT_LIMIT;
    loop {
        let info = locks.inspect("doc").await.expect("inspect");
        if info.waiting_writers.len() == 1 {
            assert_eq!(info.mode, Some(LockMode::Read));
            break;
        }
        assert!(Instant::now() < deadline, "the waiting writer never showed");
        tokio::task::yield_now().await;
    }
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    writer.await.expect("writer");
    let info = locks.inspect("doc").await.expect("inspect");
    assert!(!info.is_held());
}

#[distlock::distributed_lock(key = "job:<n>", client = locks, ttl = "10s")]
async fn inspected_from_inside(
    locks: &distlock::Client,
    n: u32,
) -> Result<distlock::LockInfo, Error> {
    locks.inspect(format!("job:{n}")).await
}

#[tokio::test]
async fn a_locked_fn_is_named_as_the_holder() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let info = inspected_from_inside(&locks, 3).await.expect("locked call");
    let h = info.holder.expect("held while the body runs");
    assert_eq!(h.site.as_deref(), Some("operations::inspected_from_inside"));
}

#[tokio::test]
async fn listing_shows_held_locks_only() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let a = locks.lock("list:a").acquire().await.expect("free");
    let b = locks.reentrant("list:{b}").acquire().await.expect("free");
    let c = locks.read("list:c").acquire().await.expect("free");
    let gone = locks.lock("list:d").acquire().await.expect("free");
    gone.release().await.expect("release");
    assert_eq!(
        locks.list().await.expect("list"),
        ["list:a", "list:c", "list:{b}"]
    );
    // The CLI over the same API.
    let url = server.url();
    let (out, code) = distlock::__cli::run(&["--url".into(), url.clone(), "list".into()]).await;
    assert_eq!((out.as_str(), code), ("list:a\nlist:c\nlist:{b}", 0));
    let (out, code) = distlock::__cli::run(&[
        "--url".into(),
        url.clone(),
        "inspect".into(),
        "list:a".into(),
    ])
    .await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("state: held (setnx)"), "{out}");
    assert!(
        out.contains(&format!("pid: {}", std::process::id())),
        "{out}"
    );
    let (out, code) = distlock::__cli::run(&[
        "--url".into(),
        url.clone(),
        "unlock".into(),
        "list:a".into(),
    ])
    .await;
    assert_eq!(code, 2, "a reason is required: {out}");
    let (out, code) = distlock::__cli::run(&[
        "--url".into(),
        url.clone(),
        "unlock".into(),
        "list:a".into(),
        "--reason".into(),
        "test".into(),
    ])
    .await;
    assert_eq!((out.as_str(), code), ("unlocked list:a", 0));
    assert!(!a.is_held() || a.remaining() > Duration::ZERO); // the guard learns at its next renewal
    assert_eq!(locks.list().await.expect("list"), ["list:c", "list:{b}"]);
    drop((a, b, c));
}

/// A waiter marks a busy setnx lock as waited for, with a key beside it that lasts as long as
/// the holder's lease; the listing names locks, not their marks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_leaves_out_the_waited_for_mark() {
    let server = RedisServer::start();
    let locks = client(&server).await;
    let held = locks.lock("list:w").acquire().await.expect("free");
    let waiter = common::spawn_waiter(&locks, "list:w", Duration::from_secs(30));
    let mut raw = server.async_connection().await;
    let marked = distlock_testkit::wait_until_async(Duration::from_secs(10), || {
        let mut raw = raw.clone();
        async move {
            redis::cmd("EXISTS")
                .arg(common::waited_key("list:w"))
                .query_async::<bool>(&mut raw)
                .await
                .expect("EXISTS")
        }
    })
    .await;
    assert!(marked, "the waiter marked the lock");
    assert_eq!(locks.list().await.expect("list"), ["list:w"]);
    held.release().await.expect("release");
    waiter
        .await
        .expect("task")
        .expect("the waiter gets the lock");
    assert!(locks.list().await.expect("list").is_empty());
    let left: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut raw)
        .await
        .expect("KEYS");
    // The process's record (who its holds' tags name) stays; nothing of the lock does.
    assert!(
        left.iter().all(|k| k.starts_with("distlock:#process:")),
        "nothing left behind: {left:?}"
    );
}

#[tokio::test]
async fn a_setnx_value_fits_one_server_allocation_and_names_its_holder_through_the_process_record()
{
    let server = RedisServer::start();
    let locks = client(&server).await;
    let first = locks.lock("rec:1").acquire().await.expect("free");
    let mut raw = server.async_connection().await;
    // At most 44 bytes Redis keeps a string in one allocation with its header; every byte of
    // the value is copied, compared and sent back on every acquisition and release.
    let value: String = redis::cmd("GET")
        .arg("distlock:{rec:1}")
        .query_async(&mut raw)
        .await
        .expect("GET");
    assert!(value.len() <= 44, "{value:?} is {} bytes", value.len());
    let encoding: String = redis::cmd("OBJECT")
        .arg("ENCODING")
        .arg("distlock:{rec:1}")
        .query_async(&mut raw)
        .await
        .expect("OBJECT ENCODING");
    assert_eq!(encoding, "embstr");

    let h = locks.inspect("rec:1").await.expect("inspect").holder;
    let h = h.expect("held");
    assert_eq!(h.pid, Some(std::process::id()));
    assert!(h.host.is_some_and(|h| !h.is_empty()));
    assert!(h.site.is_some_and(|s| s.contains("operations.rs")));
    assert!(recent(h.acquired_at));
    let process = h.process.expect("the holder's process tag");
    let record = format!("distlock:#process:{{{process}}}");
    let pid: Option<u32> = redis::cmd("HGET")
        .arg(&record)
        .arg("pid")
        .query_async(&mut raw)
        .await
        .expect("HGET");
    assert_eq!(pid, Some(std::process::id()));
    let kept = redis::cmd("PTTL")
        .arg(&record)
        .query_async::<i64>(&mut raw)
        .await
        .expect("PTTL");
    assert!(kept > 0, "the record expires (PTTL {kept})");
    assert_eq!(locks.list().await.expect("list"), ["rec:1"]);

    // The record lost (a server restarted without persistence, a failover): the holder is
    // still told apart by its process and time.
    let _: () = redis::cmd("DEL")
        .arg(&record)
        .query_async(&mut raw)
        .await
        .expect("DEL");
    let lost = locks.inspect("rec:1").await.expect("inspect").holder;
    let lost = lost.expect("still held");
    assert_eq!(lost.process.as_deref(), Some(process.as_str()));
    assert_eq!(lost.acquired_at, h.acquired_at);
    assert_eq!((lost.host, lost.pid, lost.site), (None, None, None));

    // A hold from a site the server's record lacks writes the whole record again first.
    let second = locks.lock("rec:2").acquire().await.expect("free");
    let again = locks.inspect("rec:1").await.expect("inspect").holder;
    let again = again.expect("still held");
    assert_eq!(again.pid, Some(std::process::id()));
    assert!(again.site.is_some_and(|s| s.contains("operations.rs")));
    first.release().await.expect("release");
    second.release().await.expect("release");
}

// ---------------------------------------------------------------------------------------------
// The minimum hold.

async fn until_gone(server: &RedisServer, name: &str) -> Duration {
    let start = Instant::now();
    while pttl(server, name).await != -2 {
        assert!(start.elapsed() < EVENT_LIMIT, "{name} never went away");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    start.elapsed()
}

#[tokio::test]
async fn a_release_before_the_minimum_hold_keeps_the_lock_until_then() {
    let server = RedisServer::start();
    let locks = client(&server).await;

    // Longer than the lease: the lease is extended to the minimum hold.
    let g = locks
        .lock("min:long")
        .ttl(Duration::from_millis(500))
        .min_hold(Duration::from_secs(3))
        .acquire()
        .await
        .expect("free");
    let acquired = Instant::now();
    g.release().await.expect("release");
    let left = pttl(&server, "min:long").await;
    assert!(
        left > 1000,
        "the lock must outlive its 500 ms lease: {left} ms"
    );
    let busy = as_other_owner(locks.lock("min:long").try_acquire()).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    until_gone(&server, "min:long").await;
    assert!(acquired.elapsed() >= Duration::from_millis(2900));

    // Shorter than the lease: released when the minimum hold ends, not at the lease's end.
    let g = locks
        .reentrant("min:short")
        .ttl(Duration::from_secs(30))
        .min_hold(Duration::from_millis(800))
        .acquire()
        .await
        .expect("free");
    g.release().await.expect("release");
    assert!(pttl(&server, "min:short").await > 20_000);
    let busy = as_other_owner(locks.reentrant("min:short").try_acquire()).await;
    assert!(matches!(busy, Err(Error::Busy { .. })), "{busy:?}");
    until_gone(&server, "min:short").await; // long before the 30 s lease
    let g = as_other_owner(locks.reentrant("min:short").try_acquire())
        .await
        .expect("free again");
    g.release().await.expect("release");

    // Past the minimum hold already: an ordinary release.
    let g = locks
        .lock("min:past")
        .min_hold(Duration::from_millis(10))
        .acquire()
        .await
        .expect("free");
    tokio::time::sleep(Duration::from_millis(20)).await;
    g.release().await.expect("release");
    assert_eq!(pttl(&server, "min:past").await, -2);
}

#[distlock::distributed_lock(
    key = "report",
    client = locks,
    ttl = "5s",
    wait = "0s",
    min_hold = "2s",
    on_busy = "skip",
    on_error = "log"
)]
async fn nightly(locks: &distlock::Client, ran: &Mutex<u32>) {
    let _ = locks;
    *ran.lock().unwrap() += 1;
}

#[distlock::distributed_lock(key = "report-value", client = locks, on_error = "log")]
async fn answer(locks: Option<&distlock::Client>) -> Option<u32> {
    let _ = locks;
    Some(42)
}

#[tokio::test]
async fn a_skipping_logged_job_runs_once_per_minimum_hold_and_returns_nothing() {
    let (trace, _guard) = capture();
    let server = RedisServer::start();
    let locks = client(&server).await;
    let ran = Mutex::new(0);
    nightly(&locks, &ran).await;
    // Another instance whose timer fires a moment later: skipped, though the first finished.
    LockContext::new().scope(nightly(&locks, &ran)).await;
    assert_eq!(*ran.lock().unwrap(), 1);
    assert_eq!(trace.events("locked call skipped").len(), 1);
    until_gone(&server, "report").await;
    nightly(&locks, &ran).await;
    assert_eq!(*ran.lock().unwrap(), 2);

    // No client: logged, the body is not run, the default is returned.
    assert_eq!(answer(None).await, None);
    assert_eq!(trace.events("locked call not run").len(), 1);
    assert_eq!(answer(Some(&locks)).await, Some(42));
}
