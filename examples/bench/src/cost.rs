//! Where a cycle's time goes, in S1 and S2: for each column, over its own turns only, the
//! bench process's CPU time, redis-server's CPU time, the heap allocations, the server's
//! commands and its read events (requests arriving: a round trip each, unless several tasks'
//! requests share one write), each per cycle.
//!
//! Columns take turns within a round and nothing else runs then, so counters read around a
//! turn attribute to that column alone. A reading costs one `INFO` round trip and one
//! `getrusage` per turn end, not per cycle; what the two readings themselves cost (the server
//! formats `INFO` between them, the bench parses it) is measured once, back to back with no
//! turn between, and taken off every turn.

use std::collections::BTreeMap;
use std::time::Duration;

use distlock_testkit::own_cpu_time;

use crate::memory::allocations;
use crate::results::{row, Fmt, RowSpec};
use crate::scenarios::Metrics;

/// Back-to-back reading pairs of the calibration; the median is kept.
const CALIBRATION_PAIRS: usize = 9;

/// Counters at one instant: the bench process's, then the server's.
struct Reading {
    client_cpu: Duration,
    allocations: u64,
    server_cpu_us: f64,
    commands: BTreeMap<String, u64>,
    reads: u64,
    input_bytes: u64,
}

/// Counter deltas of one stretch (a turn, or the sum of a column's turns).
#[derive(Clone, Copy, Debug, Default)]
pub struct Costs {
    client_cpu_us: f64,
    server_cpu_us: f64,
    allocations: f64,
    commands: f64,
    reads: f64,
    input_bytes: f64,
}

impl Costs {
    fn between(a: &Reading, b: &Reading) -> Costs {
        Costs {
            client_cpu_us: b.client_cpu.saturating_sub(a.client_cpu).as_secs_f64() * 1e6,
            server_cpu_us: b.server_cpu_us - a.server_cpu_us,
            allocations: b.allocations.saturating_sub(a.allocations) as f64,
            commands: lock_commands(&a.commands, &b.commands) as f64,
            reads: b.reads.saturating_sub(a.reads) as f64,
            input_bytes: b.input_bytes.saturating_sub(a.input_bytes) as f64,
        }
    }

    fn fields(&mut self) -> [&mut f64; 6] {
        [
            &mut self.client_cpu_us,
            &mut self.server_cpu_us,
            &mut self.allocations,
            &mut self.commands,
            &mut self.reads,
            &mut self.input_bytes,
        ]
    }

    pub fn add(&mut self, other: Costs) {
        let mut other = other;
        for (sum, v) in self.fields().into_iter().zip(other.fields()) {
            *sum += *v;
        }
    }

    /// `self` less `overhead`, never below zero (a turn cannot cost less than nothing).
    fn less(mut self, mut overhead: Costs) -> Costs {
        for (v, o) in self.fields().into_iter().zip(overhead.fields()) {
            *v = (*v - *o).max(0.0);
        }
        self
    }

    /// The figures per cycle, added to `metrics`.
    pub fn per_cycle(self, cycles: u64, metrics: &mut Metrics) {
        let n = cycles.max(1) as f64;
        for (name, v) in [
            ("client_cpu_us_per_cycle", self.client_cpu_us),
            ("server_cpu_us_per_cycle", self.server_cpu_us),
            ("allocs_per_cycle", self.allocations),
            ("cmds_per_cycle", self.commands),
            ("reads_per_cycle", self.reads),
            ("in_bytes_per_cycle", self.input_bytes),
        ] {
            metrics.insert(name, v / n);
        }
    }
}

/// Reads the counters around turns, on a connection of its own to the single node.
pub struct Meter {
    conn: redis::aio::MultiplexedConnection,
    overhead: Costs,
    started: Option<Reading>,
}

impl Meter {
    pub async fn connect(url: &str) -> Result<Meter, String> {
        let conn = redis::Client::open(url)
            .map_err(|e| e.to_string())?
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| e.to_string())?;
        let mut meter = Meter {
            conn,
            overhead: Costs::default(),
            started: None,
        };
        let mut pairs = Vec::with_capacity(CALIBRATION_PAIRS);
        for _ in 0..CALIBRATION_PAIRS {
            meter.start().await?;
            pairs.push(meter.stop().await?);
        }
        let median = |f: fn(&Costs) -> f64| crate::results::median(pairs.iter().map(f).collect());
        meter.overhead = Costs {
            client_cpu_us: median(|c| c.client_cpu_us),
            server_cpu_us: median(|c| c.server_cpu_us),
            allocations: median(|c| c.allocations),
            commands: median(|c| c.commands),
            reads: median(|c| c.reads),
            input_bytes: median(|c| c.input_bytes),
        };
        Ok(meter)
    }

    /// Before a turn: the server's counters first, then the process's, so the bench's work on
    /// the reading falls outside the turn.
    pub async fn start(&mut self) -> Result<(), String> {
        let server = self.server().await?;
        self.started = Some(Reading {
            client_cpu: own_cpu_time(),
            allocations: allocations(),
            ..server
        });
        Ok(())
    }

    /// After a turn: the process's counters first, then the server's; the turn's costs, less
    /// the readings' own.
    pub async fn stop(&mut self) -> Result<Costs, String> {
        let (client_cpu, allocs) = (own_cpu_time(), allocations());
        let server = self.server().await?;
        let ended = Reading {
            client_cpu,
            allocations: allocs,
            ..server
        };
        let started = self.started.take().ok_or("Meter::stop without start")?;
        Ok(Costs::between(&started, &ended).less(self.overhead))
    }

    /// One `INFO` with the sections the figures need (its CPU figures are the server's
    /// getrusage, to the microsecond).
    async fn server(&mut self) -> Result<Reading, String> {
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .arg("cpu")
            .arg("commandstats")
            .query_async(&mut self.conn)
            .await
            .map_err(|e| format!("INFO: {e}"))?;
        let field = |name: &str| -> Result<f64, String> {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .ok_or_else(|| format!("no {name} in INFO"))
        };
        let commands = info
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest
                    .strip_prefix("calls=")?
                    .split(',')
                    .next()?
                    .parse()
                    .ok()?;
                Some((name.to_owned(), calls))
            })
            .collect();
        Ok(Reading {
            client_cpu: Duration::ZERO,
            allocations: 0,
            server_cpu_us: (field("used_cpu_sys")? + field("used_cpu_user")?) * 1e6,
            commands,
            reads: field("total_reads_processed")? as u64,
            input_bytes: field("total_net_input_bytes")? as u64,
        })
    }
}

/// A column's costs per turn summed, for every column of a round; without a meter (none
/// asked for, or it failed) it adds no figures.
pub struct Ledger {
    meter: Option<Meter>,
    costs: Vec<Costs>,
}

impl Ledger {
    /// A ledger for `columns` columns, metering the server at `url` if given.
    pub async fn new(url: Option<String>, columns: usize) -> Ledger {
        let meter = match url {
            Some(url) => Meter::connect(&url)
                .await
                .map_err(|e| eprintln!("cost meter: {e}; no cost rows this round"))
                .ok(),
            None => None,
        };
        Ledger {
            meter,
            costs: vec![Costs::default(); columns],
        }
    }

    pub async fn start(&mut self) {
        if let Some(meter) = &mut self.meter {
            if let Err(e) = meter.start().await {
                eprintln!("cost meter: {e}; no cost rows this round");
                self.meter = None;
            }
        }
    }

    /// After column `i`'s turn.
    pub async fn stop(&mut self, i: usize) {
        if let Some(meter) = &mut self.meter {
            match meter.stop().await {
                Ok(costs) => self.costs[i].add(costs),
                Err(e) => {
                    eprintln!("cost meter: {e}; no cost rows this round");
                    self.meter = None;
                }
            }
        }
    }

    /// Column `i`'s figures per cycle over its `cycles`, if metered throughout.
    pub fn per_cycle(&self, i: usize, cycles: u64, metrics: &mut Metrics) {
        if self.meter.is_some() {
            self.costs[i].per_cycle(cycles, metrics);
        }
    }
}

/// Commands the server executed between two `INFO commandstats` snapshots, without the
/// snapshots' own (`INFO`, and `CLIENT SETINFO` from the kit's fresh connection). Calls made
/// inside Lua scripts count: Redis counts them like any other command.
pub fn lock_commands(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>) -> u64 {
    after
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "client|setinfo"))
        .map(|(name, calls)| calls - before.get(name).copied().unwrap_or(0))
        .sum()
}

/// The cost rows of `scenario` (S1 or S2).
macro_rules! cost_rows {
    ($scenario:literal) => {
        [
            row(
                $scenario,
                "client CPU µs / cycle (bench process, getrusage)",
                "client_cpu_us_per_cycle",
                Fmt::Ratio,
            ),
            row(
                $scenario,
                "redis-server CPU µs / cycle (INFO cpu)",
                "server_cpu_us_per_cycle",
                Fmt::Ratio,
            ),
            row(
                $scenario,
                "heap allocations / cycle (bench process)",
                "allocs_per_cycle",
                Fmt::Ratio,
            ),
            row(
                $scenario,
                "server commands / cycle (commandstats, incl. Lua calls)",
                "cmds_per_cycle",
                Fmt::Ratio,
            ),
            row(
                $scenario,
                "server read events / cycle (requests arriving)",
                "reads_per_cycle",
                Fmt::Ratio,
            ),
            row(
                $scenario,
                "bytes sent to the server / cycle",
                "in_bytes_per_cycle",
                Fmt::Count,
            ),
        ]
    };
}

pub const S1_ROWS: &[RowSpec] = &cost_rows!("S1");
pub const S2_ROWS: &[RowSpec] = &cost_rows!("S2");

pub const DEFINITIONS: &[&str] = &[
    "S1/S2 cost rows (where a cycle's time goes): read around every turn of a column (S1: 50 cycles, S2: 250 ms) and summed over the column's turns in a round, divided by its cycles in that round; medians over rounds. Client CPU: getrusage(RUSAGE_SELF) user+sys of the bench process (all its threads: the runtime's I/O driver and the column's connections included; nothing else runs during a turn). redis-server CPU: `INFO cpu` used_cpu_sys + used_cpu_user (the server's own getrusage, to the µs). Heap allocations: calls to alloc, alloc_zeroed and realloc in the bench process, counted by the bench binary's global allocator (S11's, counting calls in per-thread slots). Server commands: `INFO commandstats` calls, without INFO and CLIENT SETINFO; every `redis.call` inside a script counts, so a Lua compare-and-delete counts 3. Read events: `INFO stats` total_reads_processed, the server's reads from client sockets: one per request that arrives alone, so an uncontended S1 cycle of two sequential requests shows 2.0 (two round trips); in S2 the 32 tasks share connections, and requests written together (pipelined by a multiplexed connection) arrive in one read, so S2's figure is round trips as the server sees them, below the 2 a task waits for. Bytes: `INFO stats` total_net_input_bytes (requests as sent, RESP). The readings' own cost (one INFO each, the parse, one getrusage) is measured back to back 9 times when the meter connects, and the median is taken off every turn.",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readings_own_cost_comes_off_and_no_figure_goes_below_zero() {
        let turn = Costs {
            client_cpu_us: 500.0,
            server_cpu_us: 300.0,
            allocations: 1_000.0,
            commands: 400.0,
            reads: 201.0,
            input_bytes: 30_000.0,
        };
        let overhead = Costs {
            client_cpu_us: 20.0,
            server_cpu_us: 400.0,
            allocations: 10.0,
            commands: 0.0,
            reads: 1.0,
            input_bytes: 100.0,
        };
        let mut metrics = Metrics::new();
        let mut sum = Costs::default();
        sum.add(turn.less(overhead));
        sum.add(turn.less(overhead));
        sum.per_cycle(200, &mut metrics);
        assert_eq!(metrics["client_cpu_us_per_cycle"], 4.8);
        assert_eq!(metrics["server_cpu_us_per_cycle"], 0.0);
        assert_eq!(metrics["allocs_per_cycle"], 9.9);
        assert_eq!(metrics["cmds_per_cycle"], 4.0);
        assert_eq!(metrics["reads_per_cycle"], 2.0);
        assert_eq!(metrics["in_bytes_per_cycle"], 299.0);
    }
}
