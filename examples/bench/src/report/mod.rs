//! The report of a run: the medians and the targets' verdicts (`finish`), then its output: the
//! markdown table (`table`: its rows and the definitions printed under it), the JSON file and
//! the chart. The targets of S1-S6 are in `targets`; every other scenario's rows, targets and
//! definitions are in its own module.

mod table;
mod targets;

use std::path::Path;

use crate::columns::Kind;
use crate::results::Results;
use crate::scenarios::Scenario;
use targets::TARGETS;

impl Results {
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
            .chain(crate::rwmix::TARGETS)
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
}

/// S1c/S2c figures given over the cluster limit's too, and the names of those ratios.
const RATIOS: [(&str, &str); 3] = [
    ("p50_us", "p50_x_limit"),
    ("p99_us", "p99_x_limit"),
    ("cycles_per_s", "cycles_per_s_x_limit"),
];
