//! The collected figures of a run, what a row of the report and a target are (`rows`,
//! `targets`), and the judges of the targets. Every scenario module declares its rows and
//! targets with these; `report` computes the medians and verdicts and writes the output.

mod rows;
mod targets;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::columns::Kind;
use crate::scenarios::{Metrics, Plan, Scenario, S3B_HOLD};
pub use rows::{row, Fmt, RowSpec};
pub use targets::{absolute, versus, versus_limit, Better, Source, Target, TargetSpec, Verdict};

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
    pub fn finish(&mut self) {
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
                "max_occupancy" | "release_not_owner" | "overlaps" | "not_served" => {
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

    pub fn value(&self, scenario: &str, kind: Kind, metric: &str) -> Result<f64, String> {
        self.find(scenario, kind)
            .map_or_else(|| Err("n/a".into()), |cell| cell.get(metric))
    }

    pub fn find(&self, scenario: &str, kind: Kind) -> Option<&Cell> {
        let cells = if scenario == ACCOUNTING {
            Some(&self.accounting)
        } else {
            self.scenarios.get(scenario)
        };
        cells?.get(kind.name())
    }

    pub fn ping_us(&self) -> f64 {
        median(self.ping_p50_us.clone())
    }

    /// Acquisitions/s if every hand-off cost exactly one round trip (S3b's yardstick).
    pub fn s3b_ideal(&self) -> f64 {
        1.0 / (S3B_HOLD.as_secs_f64() + self.ping_us() / 1e6)
    }

    /// (column, value) pairs for the chart.
    pub fn series(&self, scenario: &str, metric: &str) -> Vec<(&'static str, Option<f64>)> {
        Kind::ALL
            .iter()
            .map(|&kind| (kind.name(), self.value(scenario, kind, metric).ok()))
            .collect()
    }
}

/// Scenario id of the MONITOR pass in `Results::value`.
pub const ACCOUNTING: &str = "S3 MONITOR";

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

    #[test]
    fn one_round_with_overlaps_is_not_hidden_by_the_median() {
        let mut cell = Cell::default();
        for overlaps in [0.0, 0.0, 3.0, 0.0, 0.0] {
            cell.rounds.push(Metrics::from([
                ("overlaps", overlaps),
                ("not_served", overlaps),
            ]));
        }
        cell.finish();
        assert_eq!(cell.median["overlaps"], 3.0);
        assert_eq!(cell.median["not_served"], 3.0);
    }
}
