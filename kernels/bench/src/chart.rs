//! The SVG chart: GFLOPS per shape per library, grouped bars, with the FMA peak as a line.
//! Only plotters' SVG backend is used; text goes into the SVG as `<text>` elements, so no
//! system fonts are needed.

use plotters::prelude::*;

use crate::peers::Lib;
use crate::table::Row;

const COLORS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
];

pub fn draw(
    path: &str,
    rows: &[Row],
    libs: &[Lib],
    peak: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1400, 640)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = rows
        .iter()
        .flat_map(|r| r.cells.iter())
        .filter_map(|c| c.gflops.as_ref().ok().map(|g| g.median))
        .fold(peak, f64::max)
        * 1.1;
    let labels: Vec<String> = rows.iter().map(Row::label).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "f32 fully connected, single thread: GFLOPS per shape (MxKxN)",
            ("sans-serif", 24),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..rows.len() as f64, 0f64..top)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(rows.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 1e-6 {
                labels.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("GFLOPS")
        .draw()?;
    let width = 0.8 / libs.len() as f64;
    for (li, &lib) in libs.iter().enumerate() {
        let color = COLORS[li % COLORS.len()];
        let bars = rows.iter().enumerate().filter_map(|(i, row)| {
            let g = row
                .cells
                .iter()
                .find(|c| c.lib == lib)?
                .gflops
                .as_ref()
                .ok()?
                .median;
            let x0 = i as f64 + 0.1 + li as f64 * width;
            Some(Rectangle::new(
                [(x0, 0.0), (x0 + width * 0.9, g)],
                color.filled(),
            ))
        });
        chart
            .draw_series(bars)?
            .label(lib.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .draw_series(LineSeries::new(
            [(0.0, peak), (rows.len() as f64, peak)],
            BLACK.stroke_width(1),
        ))?
        .label(format!("FMA peak {peak:.0}"))
        .legend(|(x, y)| PathElement::new([(x, y), (x + 10, y)], BLACK));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
