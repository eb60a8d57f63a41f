//! The markdown report: its header, the table of figures with the rows every scenario
//! contributes, the targets' list and the definitions.

use std::fmt::Write as _;

use crate::columns::Kind;
use crate::results::{median, row, Fmt, Results, RowSpec, Source, Target, Verdict, ACCOUNTING};
use crate::scenarios::Scenario;

impl Results {
    pub(super) fn markdown(&self) -> String {
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
            .chain(crate::rwmix::DEFINITIONS)
            .chain(crate::fenced_writes::DEFINITIONS)
            .chain(crate::cost::DEFINITIONS)
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
        if m.scenarios.contains(&"S12") {
            let _ = writeln!(s, "\n## Columns in S12 (read/write lock)\n");
            for note in Kind::ALL.iter().filter_map(|&k| crate::rwmix::note(k)) {
                let _ = writeln!(s, "- {note}");
            }
        }
        if m.scenarios.contains(&"S13") {
            let _ = writeln!(s, "\n## Columns in S13 (fenced writes)\n");
            for note in crate::fenced_writes::NOTES {
                let _ = writeln!(s, "- {note}");
            }
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

/// Every row: the ones here (S1's and S2's followed by their cost rows from `cost`), then
/// the other modules' scenarios'.
fn all_rows() -> impl Iterator<Item = &'static RowSpec> {
    ROWS.iter()
        .enumerate()
        .flat_map(|(i, spec)| {
            let last_of = |id: &str| {
                spec.scenario == id && ROWS.get(i + 1).is_none_or(|next| next.scenario != id)
            };
            let costs: &'static [RowSpec] = if last_of("S1") {
                crate::cost::S1_ROWS
            } else if last_of("S2") {
                crate::cost::S2_ROWS
            } else {
                &[]
            };
            std::iter::once(spec).chain(costs)
        })
        .chain(crate::semaphore::ROWS)
        .chain(crate::failover::ROWS)
        .chain(crate::held::ROWS)
        .chain(crate::herd::ROWS)
        .chain(crate::memory::ROWS)
        .chain(crate::rwmix::ROWS)
        .chain(crate::fenced_writes::rows())
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
        "redis-server CPU µs / renewal",
        "server_cpu_us_per_renewal",
        Fmt::Ratio,
    ),
    row(
        "S6",
        "time to take the 10,000 locks, s",
        "acquire_s",
        Fmt::Ratio,
    ),
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
    "S1c/S2c: S1 and S2 (S1's cycles, S2's 32 tasks and 250 ms turns, but 1.5 s per column in the full run instead of 2 s; 0.5 s with --quick) on a local Redis Cluster of 3 masters without replicas, formed once per run (`RedisCluster::start_with(3, 0, 5000 ms node timeout)`: `CLUSTER ADDSLOTS` and `MEET` through `distlock::testing::TestCluster`, slots split evenly), each column connected to it through all nodes' URLs (see Columns on the Redis Cluster). S1c's one key per column and round sits on one master; S2c's 32 keys per column and round are checked against the cluster's slot map to land on all 3 masters (the key each column actually stores, e.g. distlock's `distlock:{name}` hashes on the name). \"÷ limit's (cluster)\": the column's median over the limit column's median on the cluster (below 1 is faster for µs, slower for cycles/s).",
    "S5: one distlock `Client` on the single node; an `#[distributed_lock(key = \"<key>\", client = client, ttl = \"10s\", wait = \"10s\")]` fn with an empty body against `client.lock(key).ttl(10 s).wait(10 s).acquire()` + `release()` on another key, taking turns of 50 sequential calls; the ratio is the annotated p50 over the by-hand p50 of the same round, and the table gives its median over the rounds.",
    "S6: one fresh distlock `Client` on the single node takes 10,000 distinct locks (ttl 3 s, watchdog on at its default period ttl/3 = 1 s) from 50 tasks, holds them all for the window (3 s with --quick, else 6 s) while the process does nothing else, checks `Guard::is_held` on every guard, then releases them all. Round trips: delta of `Client::renewal_round_trips()` over the window; renewals: the server's EVALSHA calls over the window (nothing else reaches it then); client CPU: getrusage(RUSAGE_SELF) user+sys delta over the window; redis-server CPU: /proc/<pid>/stat utime+stime delta; both as % of one core.",
];
