//! `bench.svg`: one bar panel per figure, a bar per column; the first row latency, the second
//! throughput and fairness. Panels have their own scales: a slow peer would otherwise flatten
//! every other bar.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::results::Results;

/// One panel: its caption, the figure, and how its values are shown.
struct Panel {
    caption: &'static str,
    scenario: &'static str,
    metric: &'static str,
    scale: Scale,
}

#[derive(Clone, Copy)]
enum Scale {
    /// The figure as it is, with its unit and decimals.
    Plain(&'static str, usize),
    /// The figure over the limit column's (1.00 = the limit).
    VersusLimit,
}

const fn panel(
    caption: &'static str,
    scenario: &'static str,
    metric: &'static str,
    scale: Scale,
) -> Panel {
    Panel {
        caption,
        scenario,
        metric,
        scale,
    }
}

/// The panels, row by row.
const PANELS: [[Panel; 4]; 2] = [
    [
        panel(
            "S1 uncontended: p50 µs",
            "S1",
            "p50_us",
            Scale::Plain("µs", 0),
        ),
        panel(
            "S1 uncontended: p99 µs",
            "S1",
            "p99_us",
            Scale::Plain("µs", 0),
        ),
        panel(
            "S1c on a 3-master cluster: p50 µs",
            "S1c",
            "p50_us",
            Scale::Plain("µs", 0),
        ),
        panel(
            "S3 8 tasks, 200 µs hold: hand-off p99 µs",
            "S3",
            "handoff_p99_us",
            Scale::Plain("µs", 0),
        ),
    ],
    [
        panel(
            "S2 32 tasks, distinct keys: cycles/s ÷ limit",
            "S2",
            "cycles_per_s",
            Scale::VersusLimit,
        ),
        panel(
            "S3 one key: acquisitions/s ÷ limit",
            "S3",
            "acq_per_s",
            Scale::VersusLimit,
        ),
        panel(
            "S3 fairness: per-task min/max",
            "S3",
            "fairness",
            Scale::Plain("min/max", 2),
        ),
        panel(
            "S12 read/write 9:1: reads/s",
            "S12",
            "reads_per_s",
            Scale::Plain("reads/s", 0),
        ),
    ],
];

/// A column's name under its bar: a long name would run into its neighbours' (the title
/// spells the short ones out).
fn short(name: &str) -> &str {
    match name {
        "distributed-lock-redis" => "dl-redis",
        "distlock fenced" => "fenced",
        name => name,
    }
}

pub fn draw(results: &Results, path: &Path) -> Result<(), String> {
    draw_panels(results, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn draw_panels(results: &Results, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1680, 840)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(36);
    title.titled(
        &format!(
            "distlock benchmark, medians of {} rounds ({} cores; fenced: distlock fenced, dl-redis: distributed-lock-redis)",
            results.meta.plan.rounds, results.meta.cores
        ),
        ("sans-serif", 20),
    )?;
    let areas = body.split_evenly((PANELS.len(), PANELS[0].len()));
    for (area, panel) in areas.iter().zip(PANELS.iter().flatten()) {
        let mut series = results.series(panel.scenario, panel.metric);
        let (unit, decimals) = match panel.scale {
            Scale::Plain(unit, decimals) => (unit, decimals),
            Scale::VersusLimit => {
                let limit = series
                    .iter()
                    .find(|(name, _)| *name == crate::columns::Kind::Limit.name())
                    .and_then(|(_, v)| *v);
                for (_, value) in &mut series {
                    *value = value.zip(limit).map(|(v, l)| v / l);
                }
                ("× limit", 2)
            }
        };
        let top = series.iter().filter_map(|(_, v)| *v).fold(1.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(panel.caption, ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d((0..series.len() as i32).into_segmented(), 0.0..top)?;
        let names: Vec<&str> = series.iter().map(|(name, _)| short(name)).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_label_formatter(&|x| match x {
                SegmentValue::CenterOf(i) => {
                    names.get(*i as usize).copied().unwrap_or("").to_owned()
                }
                _ => String::new(),
            })
            .y_label_formatter(&|v| format!("{v:.decimals$}"))
            .y_desc(unit)
            .draw()?;
        for (i, (_, value)) in series.iter().enumerate() {
            let i = i as i32;
            let color = Palette99::pick(i as usize);
            let label_at = (SegmentValue::CenterOf(i), value.unwrap_or(0.0));
            let label = value.map_or("n/a".to_owned(), |v| format!("{v:.decimals$}"));
            if let Some(v) = value {
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), *v),
                    ],
                    color.filled(),
                );
                bar.set_margin(0, 0, 10, 10);
                chart.draw_series(std::iter::once(bar))?;
            }
            chart.draw_series(std::iter::once(Text::new(
                label,
                label_at,
                ("sans-serif", 13).into_font().color(&BLACK).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Center,
                        plotters::style::text_anchor::VPos::Bottom,
                    ),
                ),
            )))?;
        }
    }
    root.present()?;
    Ok(())
}
