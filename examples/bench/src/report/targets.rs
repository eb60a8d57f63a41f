//! The targets a run is judged against, and the judges that give each column its verdict.

use std::fmt::Write as _;

use serde::Serialize;

use super::Results;
use crate::columns::Kind;
use crate::scenarios::S6_LOCKS;

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
    pub(super) fn tag(self) -> &'static str {
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
    pub(super) fn cell(&self) -> String {
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
    pub(super) fn passed(&self) -> Option<bool> {
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
    pub(super) fn judge(&self, results: &Results) -> Target {
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

/// `ours / base's` figure of the same scenario (`base` another column, e.g. the one peer
/// that has the feature), checked against `bound`.
pub fn versus(
    r: &Results,
    kind: Kind,
    base: Kind,
    scenario: &str,
    metric: &str,
    bound: f64,
    at_most: bool,
) -> Result<(bool, String), String> {
    let ours = r.value(scenario, kind, metric)?;
    let theirs = r
        .value(scenario, base, metric)
        .map_err(|e| format!("{}: {e}", base.name()))?;
    let ratio = ours / theirs;
    let pass = if at_most {
        ratio <= bound
    } else {
        ratio >= bound
    };
    Ok((pass, format!("{ratio:.2}× {}", base.name())))
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
pub(super) const TARGETS: &[TargetSpec] = &[
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
