//! `bench.svg`: one bar panel per latency figure, a bar per column. Panels have their own
//! scales: a slow peer would otherwise flatten every other bar.

use std::path::Path;

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use crate::report::Results;

const PANELS: [(&str, &str, &str); 4] = [
    ("S1 uncontended: p50 µs", "S1", "p50_us"),
    ("S1 uncontended: p99 µs", "S1", "p99_us"),
    ("S1c on a 3-master cluster: p50 µs", "S1c", "p50_us"),
    (
        "S3 8 tasks, 200 µs hold: hand-off p99 µs",
        "S3",
        "handoff_p99_us",
    ),
];

/// A column's name under its bar: a long name would run into its neighbours' (the title
/// spells the short ones out).
fn short(name: &str) -> &str {
    match name {
        "distributed-lock-redis" => "dl-redis",
        name => name,
    }
}

pub fn draw(results: &Results, path: &Path) -> Result<(), String> {
    draw_panels(results, path).map_err(|e| format!("{}: {e}", path.display()))
}

fn draw_panels(results: &Results, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1680, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(36);
    title.titled(
        &format!(
            "distlock benchmark, medians of {} rounds ({} cores; dl-redis: distributed-lock-redis)",
            results.meta.plan.rounds, results.meta.cores
        ),
        ("sans-serif", 20),
    )?;
    for (area, (caption, scenario, metric)) in
        body.split_evenly((1, PANELS.len())).iter().zip(PANELS)
    {
        let series = results.series(scenario, metric);
        let top = series.iter().filter_map(|(_, v)| *v).fold(1.0, f64::max) * 1.15;
        let mut chart = ChartBuilder::on(area)
            .caption(caption, ("sans-serif", 15))
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
            .y_label_formatter(&|v| format!("{v:.0}"))
            .y_desc("µs")
            .draw()?;
        for (i, (_, value)) in series.iter().enumerate() {
            let i = i as i32;
            let color = Palette99::pick(i as usize);
            let label_at = (SegmentValue::CenterOf(i), value.unwrap_or(0.0));
            let label = value.map_or("n/a".to_owned(), |v| format!("{v:.0}"));
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
