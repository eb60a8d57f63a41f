//! What operators see: tracing spans and events, metrics through a real recorder, inspection
//! of every mode, forced unlocks, the CLI, and the minimum hold of scheduled jobs.

use distlock_testkit::common;

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

mod inspection;
mod minimum_hold;
mod traces;

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
