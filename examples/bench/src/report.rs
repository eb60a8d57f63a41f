//! Collected figures and their output: the markdown table, the JSON file and the chart.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::columns::Kind;
use crate::scenarios::{Metrics, Plan, Scenario, S3B_HOLD, S6_LOCKS};

/// The figures of one scenario for one column, round by round.
#[derive(Debug, Default, Serialize)]
pub struct Cell {
    /// Why the column cannot run this scenario at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub na: Option<String>,
    pub rounds: Vec<Metrics>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// Median across rounds of every figure; for the correctness figures the worst round
    /// (`max_occupancy`, refused releases: the most; locks held, waiters served: the fewest).
    pub median: BTreeMap<&'static str, f64>,
}

impl Cell {
    fn finish(&mut self) {
        let names: std::collections::BTreeSet<&'static str> =
            self.rounds.iter().flat_map(|m| m.keys().copied()).collect();
        for name in names {
            let values: Vec<f64> = self
                .rounds
                .iter()
                .filter_map(|m| m.get(name).copied())
                .collect();
            // A correctness figure: the worst round counts, never hidden by a median.
            let value = match name {
                "max_occupancy" | "release_not_owner" => {
                    values.into_iter().fold(f64::NAN, f64::max)
                }
                "held_at_end" | "served" | "p_served" => {
                    values.into_iter().fold(f64::NAN, f64::min)
                }
                _ => median(values),
            };
            self.median.insert(name, value);
        }
    }

    /// The median of `metric`, or why there is none (printed in its place).
    fn get(&self, metric: &str) -> Result<f64, String> {
        if let Some(reason) = &self.na {
            return Err(format!("n/a ({reason})"));
        }
        if let Some(value) = self.median.get(metric) {
            return Ok(*value);
        }
        match self.errors.first() {
            Some(error) => Err(format!("error: {error}")),
            None => Err("n/a".into()),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Meta {
    pub command: String,
    pub date_utc: String,
    pub cores: usize,
    pub redis_server: String,
    /// `/proc/loadavg` before the first and after the last round.
    pub load_average_before: String,
    pub load_average_after: String,
    pub quick: bool,
    pub plan: Plan,
    /// The order in which columns ran in round 1; each later round starts one column later.
    pub columns: Vec<&'static str>,
    pub notes: BTreeMap<&'static str, &'static str>,
    /// The scenarios run (all, unless `--only` picked some).
    pub scenarios: Vec<&'static str>,
    /// The Redis Cluster of S1c/S2c; `None` when neither ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClusterMeta>,
}

/// How the Redis Cluster of S1c/S2c was formed, and how its columns were set up.
#[derive(Debug, Serialize)]
pub struct ClusterMeta {
    pub masters: usize,
    pub replicas_per_master: usize,
    pub node_timeout_ms: u64,
    /// From the first server's start to every node agreeing on the slot map.
    pub start_s: f64,
    /// The fewest masters the 32 S2c keys of any column and round landed on.
    pub s2c_masters_min: Option<usize>,
    pub notes: BTreeMap<&'static str, &'static str>,
}

#[derive(Debug, Serialize)]
pub struct Results {
    pub meta: Meta,
    /// One `PING` round trip, p50 per round.
    pub ping_p50_us: Vec<f64>,
    /// An empty `spawn_blocking` round trip, p50 per round (redlock's per-call overhead).
    pub spawn_blocking_p50_us: Vec<f64>,
    /// scenario id -> column -> figures.
    pub scenarios: BTreeMap<&'static str, BTreeMap<&'static str, Cell>>,
    /// One S3 run per column under MONITOR: client requests and Lua calls per acquisition.
    pub accounting: BTreeMap<&'static str, Cell>,
    pub targets: Vec<Target>,
}

impl Results {
    pub fn new(meta: Meta) -> Results {
        Results {
            meta,
            ping_p50_us: Vec::new(),
            spawn_blocking_p50_us: Vec::new(),
            scenarios: BTreeMap::new(),
            accounting: BTreeMap::new(),
            targets: Vec::new(),
        }
    }

    pub fn cell(&mut self, scenario: Scenario, kind: Kind) -> &mut Cell {
        self.scenarios
            .entry(scenario.id())
            .or_default()
            .entry(kind.name())
            .or_default()
    }

    fn value(&self, scenario: &str, kind: Kind, metric: &str) -> Result<f64, String> {
        self.find(scenario, kind)
            .map_or_else(|| Err("n/a".into()), |cell| cell.get(metric))
    }

    fn find(&self, scenario: &str, kind: Kind) -> Option<&Cell> {
        let cells = if scenario == ACCOUNTING {
            Some(&self.accounting)
        } else {
            self.scenarios.get(scenario)
        };
        cells?.get(kind.name())
    }

    fn ping_us(&self) -> f64 {
        median(self.ping_p50_us.clone())
    }

    /// Acquisitions/s if every hand-off cost exactly one round trip (S3b's yardstick).
    fn s3b_ideal(&self) -> f64 {
        1.0 / (S3B_HOLD.as_secs_f64() + self.ping_us() / 1e6)
    }

    /// Computes the medians and the target verdicts; call once after the last round.
    pub fn finish(&mut self) {
        for cell in self.scenarios.values_mut().flat_map(|c| c.values_mut()) {
            cell.finish();
        }
        for cell in self.accounting.values_mut() {
            cell.finish();
        }
        self.versus_cluster_limit();
        self.targets = TARGETS
            .iter()
            .chain(crate::semaphore::TARGETS)
            .chain(crate::failover::TARGETS)
            .chain(crate::held::TARGETS)
            .chain(crate::herd::TARGETS)
            .chain(crate::memory::TARGETS)
            .map(|t| t.judge(self))
            .collect();
    }

    /// Every column's S1c/S2c medians over the cluster limit's, as figures of their own
    /// (`RATIO_SUFFIX`), so the table and bench.json carry them.
    fn versus_cluster_limit(&mut self) {
        for scenario in [Scenario::S1c, Scenario::S2c] {
            let Some(cells) = self.scenarios.get_mut(scenario.id()) else {
                continue;
            };
            let Some(limit) = cells.get(Kind::Limit.name()).map(|c| c.median.clone()) else {
                continue;
            };
            for cell in cells.values_mut() {
                for (metric, name) in RATIOS {
                    if let (Some(ours), Some(theirs)) = (cell.median.get(metric), limit.get(metric))
                    {
                        cell.median.insert(name, ours / theirs);
                    }
                }
            }
        }
    }

    pub fn write(&self, out: &Path) -> Result<String, String> {
        std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
        let markdown = self.markdown();
        let json = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        for (name, text) in [("bench.md", &markdown), ("bench.json", &json)] {
            let path = out.join(name);
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        crate::chart::draw(self, &out.join("bench.svg"))?;
        Ok(markdown)
    }

    /// (column, value) pairs for the chart.
    pub fn series(&self, scenario: &str, metric: &str) -> Vec<(&'static str, Option<f64>)> {
        Kind::ALL
            .iter()
            .map(|&kind| (kind.name(), self.value(scenario, kind, metric).ok()))
            .collect()
    }

    fn markdown(&self) -> String {
        let m = &self.meta;
        let mut s = String::new();
        let _ = writeln!(s, "# distlock benchmark\n");
        let _ = writeln!(s, "- command: `{}`", m.command);
        let _ = writeln!(
            s,
            "- date: {} · rounds: {}{} · cores: {} · redis-server {}",
            m.date_utc,
            m.plan.rounds,
            if m.quick { " (--quick)" } else { "" },
            m.cores,
            m.redis_server
        );
        let _ = writeln!(
            s,
            "- one round trip (PING p50): {:.1} µs · empty spawn_blocking round trip p50: {:.1} µs",
            self.ping_us(),
            median(self.spawn_blocking_p50_us.clone())
        );
        let _ = writeln!(
            s,
            "- load average (1/5/15 min) before: {} · after: {}",
            m.load_average_before, m.load_average_after
        );
        if let Some(c) = &m.cluster {
            let spread = c.s2c_masters_min.map_or("not checked".to_owned(), |n| {
                format!("at least {n} of {}", c.masters)
            });
            let _ = writeln!(
                s,
                "- Redis Cluster (S1c, S2c): {} masters, {} replicas each, node timeout {} ms, formed in {:.1} s; \
                 S2c's 32 keys of every column and round on {spread} masters",
                c.masters, c.replicas_per_master, c.node_timeout_ms, c.start_s
            );
        }
        if m.scenarios.len() < Scenario::ALL.len() {
            let _ = writeln!(
                s,
                "- only these scenarios ran (--only): {}",
                m.scenarios.join(", ")
            );
        }
        let _ = writeln!(
            s,
            "- all columns run interleaved in one process: each round runs each scenario for each column, \
             the starting column rotating per round; within S1/S4 the columns take turns of 50 cycles, \
             within S2 turns of 250 ms, in an order drawn afresh for every pass through the columns \
             (a column's figures depend on the one that ran before it); figures are medians across rounds\n"
        );

        let mut header = "| scenario | figure |".to_owned();
        let mut rule = "|---|---|".to_owned();
        for kind in Kind::ALL {
            let _ = write!(header, " {} |", kind.name());
            rule.push_str("---:|");
        }
        let _ = writeln!(s, "{header} target |\n{rule}---|");
        for row in self.rows() {
            let _ = write!(s, "| {} | {} |", row.scenario, row.label);
            for value in row.values {
                let _ = write!(s, " {value} |");
            }
            let _ = writeln!(s, " {} |", row.target);
        }

        let _ = writeln!(s, "\n## Targets\n");
        let issue: Vec<&Target> = self
            .targets
            .iter()
            .filter(|t| matches!(t.source, Source::Issue))
            .collect();
        let _ = writeln!(
            s,
            "The issue's targets, each with its ahead-of-every-peer check (peers: {}): {} of {} pass both.\n",
            Kind::ALL
                .iter()
                .filter(|k| k.peer())
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", "),
            issue.iter().filter(|t| t.passed() == Some(true)).count(),
            issue.len()
        );
        for t in &self.targets {
            let verdicts: Vec<String> = t.verdicts.iter().map(Verdict::to_string).collect();
            let figure = all_rows()
                .find(|r| r.scenario == t.scenario && r.metric == t.metric)
                .map_or(t.metric, |r| r.label);
            let mut line = format!(
                "- [{}] {} {figure} {}: {}",
                t.source.tag(),
                t.scenario,
                t.goal,
                verdicts.join("; ")
            );
            if !t.ahead.is_empty() {
                let ahead: Vec<String> = t.ahead.iter().map(Verdict::to_string).collect();
                let _ = write!(line, "; ahead of every peer: {}", ahead.join("; "));
            }
            let _ = writeln!(s, "{line}");
        }

        let _ = writeln!(s, "\n## Definitions\n");
        for line in DEFINITIONS
            .iter()
            .chain(crate::semaphore::DEFINITIONS)
            .chain(crate::failover::DEFINITIONS)
            .chain(crate::held::DEFINITIONS)
            .chain(crate::herd::DEFINITIONS)
            .chain(crate::memory::DEFINITIONS)
        {
            let _ = writeln!(s, "- {line}");
        }
        let _ = writeln!(s, "\n## Columns\n");
        for kind in Kind::ALL {
            let _ = writeln!(s, "- {}", kind.note());
        }
        if m.scenarios.iter().any(|id| *id == "S7" || *id == "S8") {
            let _ = writeln!(
                s,
                "\n## Columns in S7 (semaphore) and S8 (leader failover)\n"
            );
            for note in Kind::ALL.iter().filter_map(|&k| crate::semaphore::note(k)) {
                let _ = writeln!(s, "- {note}");
            }
            let _ = writeln!(s, "- {}", crate::failover::NOTE);
        }
        if let Some(c) = &m.cluster {
            let _ = writeln!(s, "\n## Columns on the Redis Cluster (S1c, S2c)\n");
            for kind in Kind::ALL {
                if let Some(note) = c.notes.get(kind.name()) {
                    let _ = writeln!(s, "- {note}");
                }
            }
        }
        s
    }

    fn rows(&self) -> Vec<Row> {
        let mut rows: Vec<Row> = Vec::new();
        for spec in all_rows() {
            // The scenario's title (and the reason a column has no figures) only on its first
            // row.
            let first = rows.last().is_none_or(|r| r.id != spec.scenario);
            let values = Kind::ALL
                .iter()
                .map(|&kind| match self.value(spec.scenario, kind, spec.metric) {
                    Ok(v) => {
                        // A median over the rounds that worked must not hide the others.
                        let failed = self.find(spec.scenario, kind).map_or(0, |c| c.errors.len());
                        match failed {
                            0 => spec.fmt.show(v),
                            n => format!("{} (failed in {n} rounds)", spec.fmt.show(v)),
                        }
                    }
                    Err(_)
                        if !first
                            && self
                                .find(spec.scenario, kind)
                                .is_some_and(|c| c.na.is_some()) =>
                    {
                        "n/a".to_owned()
                    }
                    Err(why) => why,
                })
                .collect();
            let target = self
                .targets
                .iter()
                .filter(|t| t.scenario == spec.scenario && t.metric == spec.metric)
                .map(Target::cell)
                .collect::<Vec<_>>()
                .join("<br>");
            let label = if spec.scenario == "S3b" && spec.metric == "acq_per_s" {
                format!("{} (ideal {:.0})", spec.label, self.s3b_ideal())
            } else {
                spec.label.to_owned()
            };
            rows.push(Row {
                id: spec.scenario,
                scenario: if first { title(spec.scenario) } else { "" },
                label,
                values,
                target,
            });
        }
        rows
    }
}

/// S1c/S2c figures given over the cluster limit's too, and the names of those ratios.
const RATIOS: [(&str, &str); 3] = [
    ("p50_us", "p50_x_limit"),
    ("p99_us", "p99_x_limit"),
    ("cycles_per_s", "cycles_per_s_x_limit"),
];

/// Scenario id of the MONITOR pass in `Results::value`.
const ACCOUNTING: &str = "S3 MONITOR";

fn title(id: &str) -> &'static str {
    Scenario::ALL
        .iter()
        .find(|s| s.id() == id)
        .map_or("", |s| s.title())
}

struct Row {
    id: &'static str,
    scenario: &'static str,
    label: String,
    values: Vec<String>,
    target: String,
}

pub struct RowSpec {
    scenario: &'static str,
    label: &'static str,
    metric: &'static str,
    fmt: Fmt,
}

pub const fn row(
    scenario: &'static str,
    label: &'static str,
    metric: &'static str,
    fmt: Fmt,
) -> RowSpec {
    RowSpec {
        scenario,
        label,
        metric,
        fmt,
    }
}

/// Every row: the ones here, then S7's and S8's from their modules.
fn all_rows() -> impl Iterator<Item = &'static RowSpec> {
    ROWS.iter()
        .chain(crate::semaphore::ROWS)
        .chain(crate::failover::ROWS)
        .chain(crate::held::ROWS)
        .chain(crate::herd::ROWS)
        .chain(crate::memory::ROWS)
}

const ROWS: &[RowSpec] = &[
    row("S1", "p50 µs / cycle", "p50_us", Fmt::Micros),
    row("S1", "p99 µs / cycle", "p99_us", Fmt::Micros),
    row("S2", "cycles/s", "cycles_per_s", Fmt::Rate),
    row("S1c", "p50 µs / cycle", "p50_us", Fmt::Micros),
    row("S1c", "p99 µs / cycle", "p99_us", Fmt::Micros),
    row("S1c", "p50 ÷ limit's (cluster)", "p50_x_limit", Fmt::Ratio),
    row("S1c", "p99 ÷ limit's (cluster)", "p99_x_limit", Fmt::Ratio),
    row("S2c", "cycles/s", "cycles_per_s", Fmt::Rate),
    row(
        "S2c",
        "cycles/s ÷ limit's (cluster)",
        "cycles_per_s_x_limit",
        Fmt::Ratio,
    ),
    row("S3", "acquisitions/s", "acq_per_s", Fmt::Rate),
    row("S3", "hand-off p99 µs", "handoff_p99_us", Fmt::Micros),
    row(
        "S3",
        "per-task min/max acquisitions",
        "fairness",
        Fmt::Ratio,
    ),
    row(
        "S3",
        "commands/acq (commandstats, incl. Lua calls)",
        "cmds_per_acq",
        Fmt::Ratio,
    ),
    row("S3", "max occupancy", "max_occupancy", Fmt::Count),
    row(
        ACCOUNTING,
        "client requests/acq (MONITOR pass)",
        "requests_per_acq",
        Fmt::Ratio,
    ),
    row(
        ACCOUNTING,
        "Lua calls/acq (MONITOR pass)",
        "lua_calls_per_acq",
        Fmt::Ratio,
    ),
    row("S3b", "acquisitions/s", "acq_per_s", Fmt::Rate),
    row("S3b", "hand-off p99 µs", "handoff_p99_us", Fmt::Micros),
    row(
        "S3b",
        "per-task min/max acquisitions",
        "fairness",
        Fmt::Ratio,
    ),
    row(
        "S3b",
        "commands/acq (commandstats, incl. Lua calls)",
        "cmds_per_acq",
        Fmt::Ratio,
    ),
    row("S3b", "max occupancy", "max_occupancy", Fmt::Count),
    row(
        "S3x",
        "acquisitions/s (both processes)",
        "acq_per_s",
        Fmt::Rate,
    ),
    row(
        "S3x",
        "per-process min/max acquisitions (cross-process fairness)",
        "process_fairness",
        Fmt::Ratio,
    ),
    row(
        "S3x",
        "per-task min/max acquisitions (all 8 tasks)",
        "fairness",
        Fmt::Ratio,
    ),
    row(
        "S3x",
        "max occupancy (across both processes)",
        "max_occupancy",
        Fmt::Count,
    ),
    row("S4", "p50 µs / cycle", "p50_us", Fmt::Micros),
    row("S4", "p99 µs / cycle", "p99_us", Fmt::Micros),
    row(
        "S5",
        "annotated p50 µs / call",
        "annotated_p50_us",
        Fmt::Micros,
    ),
    row(
        "S5",
        "annotated p99 µs / call",
        "annotated_p99_us",
        Fmt::Micros,
    ),
    row(
        "S5",
        "by hand p50 µs / cycle",
        "by_hand_p50_us",
        Fmt::Micros,
    ),
    row(
        "S5",
        "by hand p99 µs / cycle",
        "by_hand_p99_us",
        Fmt::Micros,
    ),
    row(
        "S5",
        "annotated / by hand (p50, per round)",
        "ratio_p50",
        Fmt::Ratio,
    ),
    row(
        "S6",
        "locks still held at the end (of 10,000)",
        "held_at_end",
        Fmt::Count,
    ),
    row(
        "S6",
        "renewal round trips / renewal period (1 s)",
        "round_trips_per_period",
        Fmt::Ratio,
    ),
    row("S6", "renewals / s", "renewals_per_s", Fmt::Rate),
    row(
        "S6",
        "renewals / round trip",
        "renewals_per_round_trip",
        Fmt::Rate,
    ),
    row(
        "S6",
        "client CPU, % of one core",
        "client_cpu_pct",
        Fmt::Percent,
    ),
    row(
        "S6",
        "client CPU µs / held lock / s",
        "client_cpu_us_per_lock_s",
        Fmt::Ratio,
    ),
    row(
        "S6",
        "redis-server CPU, % of one core",
        "server_cpu_pct",
        Fmt::Percent,
    ),
    row(
        "S6",
        "time to take the 10,000 locks, s",
        "acquire_s",
        Fmt::Ratio,
    ),
];

#[derive(Clone, Copy)]
pub enum Fmt {
    Micros,
    Rate,
    Ratio,
    Count,
    Percent,
}

impl Fmt {
    fn show(self, v: f64) -> String {
        match self {
            Fmt::Micros if v < 100.0 => format!("{v:.1}"),
            Fmt::Micros | Fmt::Rate | Fmt::Count => format!("{v:.0}"),
            Fmt::Ratio => format!("{v:.2}"),
            Fmt::Percent => format!("{v:.1} %"),
        }
    }
}

/// Where a target comes from, printed with it.
#[derive(Clone, Copy, Debug, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Stated in the performance issue.
    Issue,
    /// A quality bar of `design.md` the issue does not restate.
    Design,
    /// Mutual exclusion or a held lock: must hold for every column.
    Correctness,
    /// Shown, not part of the issue's list.
    Informational,
    /// Informational, for issue 11 (Redis Cluster): the single-node targets applied to the
    /// cluster columns; issue 11 itself asks only for the figures.
    #[serde(rename = "issue 11, informational")]
    Issue11,
}

impl Source {
    fn tag(self) -> &'static str {
        match self {
            Source::Issue => "issue",
            Source::Design => "design.md",
            Source::Correctness => "correctness",
            Source::Informational => "informational",
            Source::Issue11 => "issue 11, informational",
        }
    }
}

/// Which way is better for the "ahead of every peer" check.
#[derive(Clone, Copy)]
pub enum Better {
    Higher,
    Lower,
    /// Higher, and 1 is the best possible value, so a tie at 1 counts as ahead (fairness).
    HigherUpTo1,
}

/// One target with its verdict per column, and for our columns whether they are ahead of
/// every peer on the same figure.
#[derive(Debug, Serialize)]
pub struct Target {
    pub scenario: &'static str,
    pub metric: &'static str,
    pub goal: &'static str,
    pub source: Source,
    pub verdicts: Vec<Verdict>,
    /// Ours against every peer crate on the same figure; empty when the target has no such
    /// check.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ahead: Vec<Verdict>,
}

impl Target {
    fn cell(&self) -> String {
        let verdicts: Vec<String> = self.verdicts.iter().map(Verdict::to_string).collect();
        let mut cell = String::new();
        if !matches!(self.source, Source::Issue) {
            let _ = write!(cell, "({}) ", self.source.tag());
        }
        let _ = write!(cell, "{}: {}", self.goal, verdicts.join(", "));
        if !self.ahead.is_empty() {
            let ahead: Vec<String> = self.ahead.iter().map(Verdict::to_string).collect();
            let _ = write!(cell, "<br>ahead of every peer: {}", ahead.join(", "));
        }
        cell
    }

    /// Passed by every judged column, the peer check included; `None` if a figure is
    /// missing.
    fn passed(&self) -> Option<bool> {
        self.verdicts
            .iter()
            .chain(&self.ahead)
            .map(|v| v.pass)
            .collect::<Option<Vec<bool>>>()
            .map(|all| all.into_iter().all(|p| p))
    }
}

#[derive(Debug, Serialize)]
pub struct Verdict {
    pub column: &'static str,
    /// `None` when the figure is missing.
    pub pass: Option<bool>,
    pub detail: String,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.pass {
            Some(true) => write!(f, "{} pass ({})", self.column, self.detail),
            Some(false) => write!(f, "{} **miss** ({})", self.column, self.detail),
            // The detail already says why: "n/a (no quorum mode yet)", "error: ...".
            None => write!(f, "{} {}", self.column, self.detail),
        }
    }
}

pub type Judge = fn(&Results, Kind) -> Result<(bool, String), String>;

pub struct TargetSpec {
    pub scenario: &'static str,
    pub metric: &'static str,
    pub goal: &'static str,
    pub source: Source,
    /// Judged for every column (a correctness check), not only ours.
    pub every_column: bool,
    pub judge: Judge,
    /// Also check that ours is ahead of every peer crate on this figure.
    pub ahead: Option<Better>,
}

impl TargetSpec {
    fn judge(&self, results: &Results) -> Target {
        let verdict = |kind: Kind, judged: Result<(bool, String), String>| match judged {
            Ok((pass, detail)) => Verdict {
                column: kind.name(),
                pass: Some(pass),
                detail,
            },
            Err(why) => Verdict {
                column: kind.name(),
                pass: None,
                detail: why,
            },
        };
        let verdicts = Kind::ALL
            .iter()
            .filter(|k| k.ours() || self.every_column)
            .map(|&kind| verdict(kind, (self.judge)(results, kind)))
            .collect();
        let ahead = match self.ahead {
            None => Vec::new(),
            Some(better) => Kind::ALL
                .iter()
                .filter(|k| k.ours())
                .map(|&kind| verdict(kind, self.ahead_of_peers(results, kind, better)))
                .collect(),
        };
        Target {
            scenario: self.scenario,
            metric: self.metric,
            goal: self.goal,
            source: self.source,
            verdicts,
            ahead,
        }
    }

    /// `kind`'s figure against every peer's: passes if it is better than each peer that has
    /// the figure. A peer that cannot run the scenario (n/a) or failed in every round is
    /// named and left out.
    fn ahead_of_peers(
        &self,
        r: &Results,
        kind: Kind,
        better: Better,
    ) -> Result<(bool, String), String> {
        let ours = r.value(self.scenario, kind, self.metric)?;
        let (mut pass, mut compared, mut detail) = (true, 0, Vec::new());
        for peer in Kind::ALL.iter().filter(|k| k.peer()) {
            match r.value(self.scenario, *peer, self.metric) {
                Ok(theirs) => {
                    compared += 1;
                    pass &= match better {
                        Better::Higher => ours > theirs,
                        Better::Lower => ours < theirs,
                        Better::HigherUpTo1 => ours > theirs || ours >= 1.0,
                    };
                    detail.push(format!("{:.2}× {}", ours / theirs, peer.name()));
                }
                Err(_) => detail.push(format!("{} has no figure", peer.name())),
            }
        }
        if compared == 0 {
            return Err(format!("no peer figure ({})", detail.join(", ")));
        }
        Ok((pass, detail.join(", ")))
    }
}

/// `ours / limit's` figure of the same scenario, checked against `bound`.
pub fn versus_limit(
    r: &Results,
    kind: Kind,
    scenario: &str,
    metric: &str,
    bound: f64,
    at_most: bool,
) -> Result<(bool, String), String> {
    let ours = r.value(scenario, kind, metric)?;
    let limit = r
        .value(scenario, Kind::Limit, metric)
        .map_err(|e| format!("limit: {e}"))?;
    let ratio = ours / limit;
    let pass = if at_most {
        ratio <= bound
    } else {
        ratio >= bound
    };
    let name = match scenario {
        "S4" => "limit-quorum",
        "S1c" | "S2c" => "limit on the cluster",
        _ => "limit",
    };
    Ok((pass, format!("{ratio:.2}× {name}")))
}

pub fn absolute(
    r: &Results,
    kind: Kind,
    scenario: &str,
    metric: &str,
    pass: fn(f64) -> bool,
) -> Result<(bool, String), String> {
    let value = r.value(scenario, kind, metric)?;
    Ok((pass(value), format!("{value:.2}")))
}

/// The issue's targets first, in its order; then design.md's bars it does not restate, the
/// correctness checks and the informational ones.
const TARGETS: &[TargetSpec] = &[
    TargetSpec {
        scenario: "S1",
        metric: "p50_us",
        goal: "≤ 1.03× limit",
        source: Source::Issue,
        every_column: false,
        judge: |r, k| versus_limit(r, k, "S1", "p50_us", 1.03, true),
        ahead: Some(Better::Lower),
    },
    TargetSpec {
        scenario: "S1",
        metric: "p99_us",
        goal: "≤ 1.10× limit",
        source: Source::Issue,
        every_column: false,
        judge: |r, k| versus_limit(r, k, "S1", "p99_us", 1.10, true),
        ahead: Some(Better::Lower),
    },
    TargetSpec {
        scenario: "S2",
        metric: "cycles_per_s",
        goal: "≥ 0.90× limit",
        source: Source::Issue,
        every_column: false,
        judge: |r, k| versus_limit(r, k, "S2", "cycles_per_s", 0.90, false),
        ahead: Some(Better::Higher),
    },
    TargetSpec {
        scenario: "S3",
        metric: "acq_per_s",
        goal: "≥ 1.10× limit",
        source: Source::Issue,
        every_column: false,
        judge: |r, k| versus_limit(r, k, "S3", "acq_per_s", 1.10, false),
        ahead: Some(Better::Higher),
    },
    TargetSpec {
        scenario: "S3",
        metric: "fairness",
        goal: "≥ 0.9",
        source: Source::Issue,
        every_column: false,
        judge: |r, k| absolute(r, k, "S3", "fairness", |v| v >= 0.9),
        ahead: Some(Better::HigherUpTo1),
    },
    TargetSpec {
        scenario: "S3b",
        metric: "acq_per_s",
        goal: "≥ 0.95× ideal",
        source: Source::Issue,
        every_column: false,
        judge: |r, k| {
            let ratio = r.value("S3b", k, "acq_per_s")? / r.s3b_ideal();
            Ok((ratio >= 0.95, format!("{ratio:.2}× ideal")))
        },
        ahead: Some(Better::Higher),
    },
    TargetSpec {
        scenario: "S4",
        metric: "p50_us",
        goal: "≤ 1.0× limit-quorum (and below rslock: the peer check)",
        source: Source::Issue,
        every_column: false,
        judge: |r, k| versus_limit(r, k, "S4", "p50_us", 1.0, true),
        ahead: Some(Better::Lower),
    },
    TargetSpec {
        scenario: "S1c",
        metric: "p50_us",
        goal: "≤ 1.03× limit on the cluster",
        source: Source::Issue11,
        every_column: false,
        judge: |r, k| versus_limit(r, k, "S1c", "p50_us", 1.03, true),
        ahead: Some(Better::Lower),
    },
    TargetSpec {
        scenario: "S2c",
        metric: "cycles_per_s",
        goal: "≥ 0.90× limit on the cluster",
        source: Source::Issue11,
        every_column: false,
        judge: |r, k| versus_limit(r, k, "S2c", "cycles_per_s", 0.90, false),
        ahead: Some(Better::Higher),
    },
    TargetSpec {
        scenario: "S3x",
        metric: "process_fairness",
        goal: "≥ 0.9",
        source: Source::Informational,
        every_column: false,
        judge: |r, k| absolute(r, k, "S3x", "process_fairness", |v| v >= 0.9),
        ahead: Some(Better::HigherUpTo1),
    },
    TargetSpec {
        scenario: "S5",
        metric: "ratio_p50",
        goal: "≤ 1.05× by hand",
        source: Source::Design,
        every_column: false,
        judge: |r, k| absolute(r, k, "S5", "ratio_p50", |v| v <= 1.05),
        ahead: None,
    },
    TargetSpec {
        scenario: "S6",
        metric: "renewals_per_round_trip",
        goal: "≥ 1,000 (batched: a few round trips per tick, not one per lock)",
        source: Source::Design,
        every_column: false,
        judge: |r, k| absolute(r, k, "S6", "renewals_per_round_trip", |v| v >= 1_000.0),
        ahead: None,
    },
    TargetSpec {
        scenario: "S3",
        metric: "max_occupancy",
        goal: "= 1",
        source: Source::Correctness,
        every_column: true,
        judge: |r, k| absolute(r, k, "S3", "max_occupancy", |v| v == 1.0),
        ahead: None,
    },
    TargetSpec {
        scenario: "S3b",
        metric: "max_occupancy",
        goal: "= 1",
        source: Source::Correctness,
        every_column: true,
        judge: |r, k| absolute(r, k, "S3b", "max_occupancy", |v| v == 1.0),
        ahead: None,
    },
    TargetSpec {
        scenario: "S3x",
        metric: "max_occupancy",
        goal: "= 1",
        source: Source::Correctness,
        every_column: true,
        judge: |r, k| absolute(r, k, "S3x", "max_occupancy", |v| v == 1.0),
        ahead: None,
    },
    TargetSpec {
        scenario: "S6",
        metric: "held_at_end",
        goal: "= 10,000",
        source: Source::Correctness,
        every_column: false,
        judge: |r, k| absolute(r, k, "S6", "held_at_end", |v| v == S6_LOCKS as f64),
        ahead: None,
    },
];

const DEFINITIONS: &[&str] = &[
    "targets: tagged [issue] (the performance issue's list, in its order), [design.md] (a quality bar the issue does not restate), [correctness] (must hold for every column), [informational] or [issue 11, informational] (S1's p50 and S2's targets applied to S1c/S2c on the cluster; issue 11 asks for the figures, not for a bound); ratios are against the `limit` column of the same run (limit-quorum in S4, limit on the cluster in S1c/S2c). \"ahead of every peer\": distlock's figure is better than that of every peer crate in the table (lower µs, higher rates and fairness; a fairness of 1.00 counts as ahead even on a tie, as nothing beats it); a peer without the figure (n/a, or failed in every round) is named and left out.",
    "p50/p99 µs / cycle: one `acquire` (wait 10 s, ttl 10 s) plus `release`, timed from the acquire call to the release's return; nearest-rank percentiles per round.",
    "S2 cycles/s: all cycles of the 32 tasks divided by the time the column's turns took, each turn until its last task finished (tasks start no new cycle after the turn's 250 ms).",
    "S3/S3b: each task loops acquire, spin for the hold, release; acquisitions/s over the time until the last task finished.",
    "hand-off: from the instant holder k is about to call release (timestamp taken just before the call) to the return of the next successful acquire, by whichever task; recorded on one shared timeline.",
    "per-task min/max acquisitions: fewest acquisitions of any of the 8 tasks divided by the most.",
    "commands/acq (commandstats): `INFO commandstats` calls delta over the timed run, without the snapshots' own INFO and CLIENT SETINFO, divided by acquisitions. Redis counts every `redis.call` inside a script as a command, so a Lua release alone counts 3 (EVALSHA, GET, DEL).",
    "client requests/acq (MONITOR pass): one extra untimed 200 µs-hold run per column with MONITOR attached, counting the commands clients sent (lines not tagged `lua`), divided by acquisitions; Lua calls/acq counts the `lua`-tagged lines.",
    "max occupancy: most tasks inside the critical section at once, from an in-process atomic counter, the most in any round (not a median); anything but 1 is a mutual-exclusion failure.",
    "S3b ideal: 1 / (5 ms hold + one PING round trip), the rate if each hand-off cost a single round trip.",
    "S3x: the bench starts two child processes of its own binary for a column; each connects the column on its own (its own client, connections and runtime), warms up, and when both are ready both are told to go at once; each runs 4 tasks on the same key with S3's 200 µs hold for the run's length (1 s with --quick, else 1.5 s). acquisitions/s: both processes' acquisitions over the longer of their run times; cross-process fairness: the process with fewer acquisitions over the one with more; per-task: fewest over most of all 8 tasks; max occupancy counts the tasks of both processes inside the critical section at once, on two atomics in a file both children map shared (mmap).",
    "S4: the same sequential cycle against five independent redis-server nodes (quorum 3); the limit column there is limit-quorum (see Columns).",
    "S1c/S2c: S1 and S2 (S1's cycles, S2's 32 tasks and 250 ms turns, but 1.5 s per column in the full run instead of 2 s; 0.5 s with --quick) on a local Redis Cluster of 3 masters without replicas, formed once per run (`RedisCluster::start_with(3, 0, 5000 ms node timeout)`: `redis-cli --cluster create`, slots split evenly), each column connected to it through all nodes' URLs (see Columns on the Redis Cluster). S1c's one key per column and round sits on one master; S2c's 32 keys per column and round are checked against the cluster's slot map to land on all 3 masters (the key each column actually stores, e.g. distlock's `distlock:{name}` hashes on the name). \"÷ limit's (cluster)\": the column's median over the limit column's median on the cluster (below 1 is faster for µs, slower for cycles/s).",
    "S5: one distlock `Client` on the single node; an `#[distributed_lock(key = \"<key>\", client = client, ttl = \"10s\", wait = \"10s\")]` fn with an empty body against `client.lock(key).ttl(10 s).wait(10 s).acquire()` + `release()` on another key, taking turns of 50 sequential calls; the ratio is the annotated p50 over the by-hand p50 of the same round, and the table gives its median over the rounds.",
    "S6: one fresh distlock `Client` on the single node takes 10,000 distinct locks (ttl 3 s, watchdog on at its default period ttl/3 = 1 s) from 50 tasks, holds them all for the window (3 s with --quick, else 6 s) while the process does nothing else, checks `Guard::is_held` on every guard, then releases them all. Round trips: delta of `Client::renewal_round_trips()` over the window; renewals: the server's EVALSHA calls over the window (nothing else reaches it then); client CPU: getrusage(RUSAGE_SELF) user+sys delta over the window; redis-server CPU: /proc/<pid>/stat utime+stime delta; both as % of one core.",
];

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_round_over_the_limit_is_not_hidden_by_the_median() {
        let mut cell = Cell::default();
        for inside in [4.0, 4.0, 6.0, 4.0, 4.0] {
            cell.rounds.push(Metrics::from([
                ("max_occupancy", inside),
                ("acq_per_s", inside),
            ]));
        }
        cell.finish();
        assert_eq!(cell.median["max_occupancy"], 6.0);
        assert_eq!(cell.median["acq_per_s"], 4.0);
    }
}
