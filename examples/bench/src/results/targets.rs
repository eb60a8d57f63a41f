//! What a target is (its figure, its goal, its judge) and the judges that give each column its
//! verdict. The targets themselves are declared beside their scenarios and in `report`.

use std::fmt::Write as _;

use serde::Serialize;

use super::Results;
use crate::columns::Kind;

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
    pub fn tag(self) -> &'static str {
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
    pub fn cell(&self) -> String {
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
    pub fn passed(&self) -> Option<bool> {
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
    pub fn judge(&self, results: &Results) -> Target {
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
    let (pass, ratio) = ratio(r, kind, Kind::Limit, scenario, metric, bound, at_most)?;
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
    let (pass, ratio) = ratio(r, kind, base, scenario, metric, bound, at_most)?;
    Ok((pass, format!("{ratio:.2}× {}", base.name())))
}

/// `ours / base's` figure, and whether it is within `bound` (at most, or at least).
fn ratio(
    r: &Results,
    kind: Kind,
    base: Kind,
    scenario: &str,
    metric: &str,
    bound: f64,
    at_most: bool,
) -> Result<(bool, f64), String> {
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
    Ok((pass, ratio))
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
