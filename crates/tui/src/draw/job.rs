//! A job's ranks side by side (`oomscope tui DIR`): the job's verdict, then one row a rank at
//! the failure (the first to fail marked), then what sets that rank apart. Enter opens the
//! rank under the cursor in the other views.

use super::palette;
use crate::app::App;
use crate::fmt;
use oomscope_format::Kind;
use oomscope_format::job::DifferenceKind;
use oomscope_format::job::{JobRank, JobReport};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table, Wrap};

fn kind_bytes(r: &JobRank, k: Kind) -> u64 {
    r.by_kind.iter().filter(|b| b.kind == k).map(|b| b.bytes).sum()
}

pub fn draw(frame: &mut Frame, app: &App, area: Rect) {
    let Some(job) = &app.job else { return };
    let verdict = verdict_lines(job);
    // The verdict's lines as wrapped in the box.
    let inner = usize::from(area.width.saturating_sub(2)).max(1);
    let wrapped: usize = verdict.iter().map(|l| l.width().div_ceil(inner).max(1)).sum();
    let top = (wrapped as u16 + 2).min(area.height / 2);
    let rows = (job.ranks.len() as u16 + 3).min(area.height.saturating_sub(top + 3)).max(4);
    let [head, table, diffs] =
        Layout::vertical([Constraint::Length(top), Constraint::Length(rows), Constraint::Min(3)]).areas(area);
    let title = match &job.job {
        Some(j) => format!(" job {j}: {} ranks ", job.ranks.len()),
        None => format!(" job: {} ranks ", job.ranks.len()),
    };
    frame.render_widget(Paragraph::new(verdict).wrap(Wrap { trim: false }).block(Block::bordered().title(title)), head);
    draw_ranks(frame, app, job, table);
    let lines: Vec<Line> = job
        .differences
        .iter()
        .map(|d| {
            let text = match d.what {
                DifferenceKind::Shape => format!(
                    "{}: shape {} here, {} on the others",
                    d.name,
                    d.shape.as_deref().map_or(String::new(), oomscope_base::shape::text),
                    d.usual.as_deref().map_or(String::new(), oomscope_base::shape::text)
                ),
                DifferenceKind::Request => format!(
                    "the request that failed: {}{}; the largest tensor on the others: {} (median)",
                    fmt::bytes(d.bytes),
                    if d.name.is_empty() { String::new() } else { format!(" for {}", d.name) },
                    fmt::bytes(d.median.unwrap_or(0))
                ),
                _ => format!(
                    "{}: {} here, {} on the others (median)",
                    d.name,
                    fmt::bytes(d.bytes),
                    fmt::bytes(d.median.unwrap_or(0))
                ),
            };
            Line::from(format!(" {text}"))
        })
        .collect();
    let who = job.first_failure.as_ref().map_or(String::new(), |f| format!(" what sets rank {} apart ", f.rank));
    frame.render_widget(Paragraph::new(lines).block(Block::bordered().title(who)), diffs);
}

fn verdict_lines(job: &JobReport) -> Vec<Line<'static>> {
    let mut lines = Vec::new();
    match &job.first_failure {
        Some(f) => lines.push(Line::from(vec![
            Span::styled(" OOM ", Style::new().fg(Color::Black).bg(palette::OOM).bold()),
            Span::raw(format!(
                " rank {} ran out of memory first{}{}: {} ({})",
                f.rank,
                if f.host.is_empty() { String::new() } else { format!(" on {}", f.host) },
                f.gpu.map_or(String::new(), |g| format!(", GPU {g}")),
                f.verdict.kind.name(),
                f.request.map_or(String::new(), |q| format!("{} requested", fmt::bytes(q)))
            )),
        ])),
        None => lines.push(Line::from(" no rank ran out of memory in these dumps")),
    }
    if let Some(v) = &job.verdict {
        lines.push(Line::from(vec![
            Span::styled(" Verdict: ", Style::new().fg(palette::OOM).bold()),
            Span::raw(v.headline.clone()),
        ]));
        lines.push(Line::from(vec![
            Span::styled(" Fix: ", Style::new().fg(palette::IN_USE).bold()),
            Span::raw(v.fix.clone()),
        ]));
    }
    lines
}

fn draw_ranks(frame: &mut Frame, app: &App, job: &JobReport, area: Rect) {
    let kinds: Vec<Kind> = Kind::ALL.into_iter().filter(|k| job.ranks.iter().any(|r| kind_bytes(r, *k) > 0)).collect();
    let height = area.height.saturating_sub(3) as usize;
    let offset = app.job_list.window(job.ranks.len(), height);
    let first = job.first_failure.as_ref().map(|f| f.rank);
    let rows: Vec<Row> = job
        .ranks
        .iter()
        .enumerate()
        .skip(offset)
        .take(height)
        .map(|(i, r)| {
            let mark = if Some(r.rank) == first {
                "!"
            } else if r.oom {
                "x"
            } else {
                " "
            };
            let mut cells = vec![
                format!("{mark}{}", r.rank),
                r.host.clone(),
                r.gpu.map_or("?".into(), |g| g.to_string()),
                if r.oom { "OOM".into() } else { "state".into() },
                fmt::bytes(r.allocated),
                fmt::bytes(r.reserved),
                if r.step >= 0 { r.step.to_string() } else { "-".into() },
            ];
            cells.extend(kinds.iter().map(|k| fmt::bytes(kind_bytes(r, *k))));
            let mut style = Style::new();
            if r.oom {
                style = style.fg(palette::OOM);
            }
            if i == app.job_list.selected {
                style = Style::new().bg(palette::ACCENT).fg(Color::Black).add_modifier(Modifier::BOLD);
            }
            Row::new(cells).style(style)
        })
        .collect();
    let mut header: Vec<String> =
        ["rank", "host", "GPU", "dump", "allocated", "reserved", "step"].map(String::from).to_vec();
    header.extend(kinds.iter().map(|k| k.name().to_string()));
    let mut widths = vec![
        Constraint::Length(6),
        Constraint::Length(10),
        Constraint::Length(3),
        Constraint::Length(5),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(5),
    ];
    widths.extend(kinds.iter().map(|_| Constraint::Length(11)));
    let table = Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().fg(Color::DarkGray).bold()))
        .block(Block::bordered().title(" ranks at the failure (! first to fail, x ran out of memory) "));
    frame.render_widget(table, area);
}
