//! What a row of the report's table is: a scenario's figure, its label and how it is shown.
//! The rows themselves are declared beside their scenarios and in `report`.

pub struct RowSpec {
    pub scenario: &'static str,
    pub label: &'static str,
    pub metric: &'static str,
    pub fmt: Fmt,
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

#[derive(Clone, Copy)]
pub enum Fmt {
    Micros,
    Rate,
    Ratio,
    Count,
    Percent,
}

impl Fmt {
    pub fn show(self, v: f64) -> String {
        match self {
            Fmt::Micros if v < 100.0 => format!("{v:.1}"),
            Fmt::Micros | Fmt::Rate | Fmt::Count => format!("{v:.0}"),
            Fmt::Ratio => format!("{v:.2}"),
            Fmt::Percent => format!("{v:.1} %"),
        }
    }
}
