//! The overview: the device's figures, the headroom, in-use and pool bytes over time with
//! the peak and the OOM marked, and the verdict.

use super::palette;
use crate::app::App;
use crate::fmt;
use crate::model::{Device, Sample, Status};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style, Stylize};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, Gauge, GraphType, LegendPosition, Paragraph, Wrap};

pub fn draw(frame: &mut Frame, _app: &App, d: &Device, area: Rect) {
    let verdict = verdict_lines(d);
    let oom_rows = u16::from(d.oom.is_some());
    // The verdict gets what it needs, up to a third of the screen; the chart the rest.
    let inner = area.width.saturating_sub(2).max(1) as usize;
    let wrapped: usize = verdict.iter().map(|l| l.width().max(1).div_ceil(inner)).sum();
    let no_chart = d.timeline.samples.is_empty();
    // Without a chart to draw the verdict may take what it needs.
    let cap = if no_chart { area.height.saturating_sub(10) } else { (area.height / 3).max(4) };
    let verdict_rows = (wrapped as u16 + 2).min(cap);
    let chart_rows = if no_chart { Constraint::Length(3) } else { Constraint::Min(3) };
    let [stats, gauge, oom, chart, verdict_area] = Layout::vertical([
        Constraint::Length(5),
        Constraint::Length(1),
        Constraint::Length(oom_rows),
        chart_rows,
        Constraint::Min(verdict_rows),
    ])
    .areas(area);
    draw_stats(frame, d, stats);
    draw_gauge(frame, d, gauge);
    if let Some(o) = &d.oom {
        let mut text = format!(" OOM: {} requested by {}", fmt::bytes(o.requested), oomscope_format::op_text(&o.op));
        if let Some(shape) = &o.shape {
            text.push_str(&format!(" shape {}", oomscope_base::shape::text(shape)));
        }
        if o.step >= 0 {
            let step = o.step;
            text.push_str(&format!(" at step {step}"));
        }
        if d.report.is_some() {
            text.push_str(" · 6: report");
        }
        frame.render_widget(Paragraph::new(text).style(Style::new().fg(Color::White).bg(palette::LIMIT).bold()), oom);
    }
    draw_chart(frame, d, chart);
    let title = match &d.verdict {
        Some(v) => format!(" verdict: {} ", v.kind.name()),
        None => " verdict ".to_string(),
    };
    frame.render_widget(
        Paragraph::new(verdict).wrap(Wrap { trim: false }).block(Block::bordered().title(title)),
        verdict_area,
    );
}

fn figure(label: &str, value: String) -> Vec<Span<'static>> {
    vec![Span::styled(format!("{label} "), Style::new().fg(Color::DarkGray)), Span::raw(value), Span::raw("  ")]
}

fn draw_stats(frame: &mut Frame, d: &Device, area: Rect) {
    let s = &d.stats;
    if !s.known {
        // A partial log: say what it has instead.
        let mut lines = vec![Line::from("no allocator statistics in this source")];
        if !d.nodes.is_empty() {
            let bytes: u64 = d.nodes.iter().map(|n| n.bytes).sum::<u64>() + d.nodes_rest.map_or(0, |r| r.1);
            let count = d.nodes.len() as u64 + d.nodes_rest.map_or(0, |r| r.0);
            lines.push(Line::from(format!("usage by node: {} in {} nodes", fmt::bytes(bytes), fmt::count(count))));
        }
        lines.extend(d.notes.iter().map(|n| Line::from(Span::styled(n.clone(), Style::new().fg(Color::DarkGray)))));
        let p = Paragraph::new(lines).wrap(Wrap { trim: true }).block(Block::bordered().title(format!(" {} ", d.name)));
        frame.render_widget(p, area);
        return;
    }
    let mut l1 = figure("limit", fmt::bytes(s.limit));
    l1.extend(figure("in use", fmt::bytes(s.allocator.bytes_in_use)));
    l1.extend(figure("peak", fmt::bytes(s.allocator.peak_bytes_in_use)));
    l1.extend(figure("pool", fmt::bytes(s.allocator.pool_bytes)));
    let mut l2 = figure("largest free", fmt::bytes(s.allocator.largest_free_block));
    l2.extend(figure("free", fmt::bytes(s.allocator.free_bytes)));
    l2.extend(figure("fragmentation", format!("{:.1}%", s.allocator.fragmentation * 100.0)));
    let mut l3 = figure("live", fmt::count(s.live_allocations));
    l3.extend(figure("allocations", fmt::count(s.allocator.num_allocs)));
    if let Some(step) = s.step.filter(|&st| st >= 0) {
        l3.extend(figure("step", step.to_string()));
    }
    if s.allocator.num_ooms > 0 {
        l3.push(Span::styled(
            format!("OOMs {}  ", fmt::count(s.allocator.num_ooms)),
            Style::new().fg(palette::OOM).bold(),
        ));
    }
    if s.allocator.outside_bytes > 0 {
        l3.extend(figure("outside pool", fmt::bytes(s.allocator.outside_bytes)));
    }
    if s.device_total > 0 {
        l3.extend(figure("device", format!("{} ({} free)", fmt::bytes(s.device_total), fmt::bytes(s.device_free))));
    }
    let p = Paragraph::new(vec![Line::from(l1), Line::from(l2), Line::from(l3)])
        .wrap(Wrap { trim: true })
        .block(Block::bordered().title(format!(" {} ", d.name)));
    frame.render_widget(p, area);
}

fn draw_gauge(frame: &mut Frame, d: &Device, area: Rect) {
    let s = &d.stats;
    if !s.known || s.limit == 0 {
        return;
    }
    let ratio = (s.allocator.bytes_in_use as f64 / s.limit as f64).clamp(0.0, 1.0);
    let colour = if ratio > 0.9 {
        palette::LIMIT
    } else if ratio > 0.75 {
        palette::WASTE
    } else {
        palette::IN_USE
    };
    let label = format!(
        "in use {} of {} ({}) · headroom {}",
        fmt::bytes(s.allocator.bytes_in_use),
        fmt::bytes(s.limit),
        fmt::percent(s.allocator.bytes_in_use, s.limit),
        fmt::bytes(s.limit.saturating_sub(s.allocator.bytes_in_use))
    );
    frame.render_widget(
        Gauge::default().ratio(ratio).label(label).gauge_style(Style::new().fg(colour).bg(Color::Black)),
        area,
    );
}

/// At most `buckets` points, each bucket keeping its largest value: a peak between two
/// screen columns stays on the chart.
pub(crate) fn decimate(samples: &[Sample], buckets: usize, value: impl Fn(&Sample) -> u64) -> Vec<(f64, f64)> {
    if samples.len() <= buckets.max(1) * 2 {
        return samples.iter().map(|s| (s.t, value(s) as f64)).collect();
    }
    let (t0, t1) = (samples[0].t, samples[samples.len() - 1].t);
    let width = ((t1 - t0) / buckets as f64).max(f64::MIN_POSITIVE);
    let mut out: Vec<(f64, f64)> = Vec::with_capacity(buckets * 2);
    let mut current: Option<(usize, f64, f64, f64, f64)> = None; // bucket, first t, min, max t, max
    for s in samples {
        let b = (((s.t - t0) / width) as usize).min(buckets - 1);
        let v = value(s) as f64;
        match &mut current {
            Some((cb, _, lo, mt, hi)) if *cb == b => {
                *lo = lo.min(v);
                if v > *hi {
                    *hi = v;
                    *mt = s.t;
                }
            }
            _ => {
                if let Some((_, ft, lo, mt, hi)) = current.take() {
                    out.push((ft, lo));
                    out.push((mt, hi));
                }
                current = Some((b, s.t, v, s.t, v));
            }
        }
    }
    if let Some((_, ft, lo, mt, hi)) = current {
        out.push((ft, lo));
        out.push((mt, hi));
    }
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    out
}

fn draw_chart(frame: &mut Frame, d: &Device, area: Rect) {
    let tl = &d.timeline;
    let block = Block::bordered().title(if tl.by_event {
        " in use and pool, event by event (the source has no clock) "
    } else {
        " in use and pool over time "
    });
    if tl.samples.is_empty() {
        let why = match d.status {
            Status::Live | Status::Replaying => "waiting for the first samples",
            _ => "no history in this source (a TF log records only the moment of the OOM)",
        };
        frame.render_widget(Paragraph::new(why).fg(Color::DarkGray).block(block), area);
        return;
    }
    let buckets = (area.width as usize).saturating_sub(12).max(8) * 2;
    let in_use = decimate(&tl.samples, buckets, |s| s.in_use);
    let pool = decimate(&tl.samples, buckets, |s| s.pool);
    let t0 = tl.samples[0].t;
    let mut t1 = tl.samples[tl.samples.len() - 1].t;
    if let Some(t) = tl.oom_at {
        t1 = t1.max(t);
    }
    if t1 <= t0 {
        t1 = t0 + 1e-3;
    }
    let top_value = tl.samples.iter().map(|s| s.pool.max(s.in_use)).max().unwrap_or(0).max(d.stats.limit).max(1);
    let top = top_value as f64 * 1.05;
    let limit_line = [(t0, d.stats.limit as f64), (t1, d.stats.limit as f64)];
    let peak = tl.peak().map(|p| [(p.t, p.in_use as f64)]);
    let oom_line = tl.oom_at.map(|t| [(t, 0.0), (t, top)]);
    let mut datasets = vec![
        Dataset::default()
            .name("pool")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(palette::POOL))
            .data(&pool),
        Dataset::default()
            .name("in use")
            .marker(Marker::Braille)
            .graph_type(GraphType::Line)
            .style(Style::new().fg(palette::IN_USE))
            .data(&in_use),
    ];
    if d.stats.limit > 0 {
        datasets.push(
            Dataset::default()
                .name("limit")
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(palette::LIMIT))
                .data(&limit_line),
        );
    }
    if let Some(p) = &peak {
        datasets.push(
            Dataset::default().name("peak").marker(Marker::Dot).style(Style::new().fg(Color::White).bold()).data(p),
        );
    }
    if let Some(o) = &oom_line {
        datasets.push(
            Dataset::default()
                .name("OOM")
                .marker(Marker::Braille)
                .graph_type(GraphType::Line)
                .style(Style::new().fg(palette::OOM))
                .data(o),
        );
    }
    let y_labels = vec![Span::raw("0"), Span::raw(fmt::bytes(top_value / 2)), Span::raw(fmt::bytes(top_value))];
    let x_label = |t: f64| if tl.by_event { format!("event {}", t.round() as u64) } else { fmt::seconds(t) };
    let x_labels = vec![Span::raw(x_label(t0)), Span::raw(x_label((t0 + t1) / 2.0)), Span::raw(x_label(t1))];
    let chart = Chart::new(datasets)
        .block(block)
        .x_axis(Axis::default().bounds([t0, t1]).labels(x_labels).style(Style::new().fg(Color::DarkGray)))
        .y_axis(Axis::default().bounds([0.0, top]).labels(y_labels).style(Style::new().fg(Color::DarkGray)))
        .legend_position(Some(LegendPosition::TopLeft))
        .hidden_legend_constraints((Constraint::Ratio(1, 2), Constraint::Ratio(1, 2)));
    frame.render_widget(chart, area);
}

fn verdict_lines(d: &Device) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    match &d.verdict {
        Some(v) => {
            // The fix before the evidence: on a small screen it is the line that must show.
            lines.push(Line::from(v.headline.clone().bold()));
            if !v.fix.is_empty() {
                lines.push(Line::from(vec![
                    Span::styled("fix: ", Style::new().fg(palette::IN_USE).bold()),
                    Span::raw(v.fix.clone()),
                ]));
            }
            for e in &v.evidence {
                lines.push(Line::from(format!("  · {e}")));
            }
        }
        None => lines.push(Line::from(match d.status {
            Status::Live | Status::Replaying => "no OOM so far; the verdict appears when an allocation fails",
            _ => "no allocation failed: nothing to explain",
        })),
    }
    if d.stats.known {
        // (Without statistics the notes are in the figures' box.)
        for n in &d.notes {
            lines.push(Line::from(Span::styled(n.clone(), Style::new().fg(Color::DarkGray))));
        }
    }
    lines
}
