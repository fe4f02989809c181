//! The OOM report as the terminal printed it (TF's text, the ranked nodes, the verdict),
//! scrollable.

use crate::app::App;
use crate::fmt;
use crate::model::{Device, Status};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph};

pub fn draw(frame: &mut Frame, app: &App, d: &Device, area: Rect) {
    let Some(report) = &d.report else {
        let why = match d.status {
            Status::Live | Status::Replaying => "no OOM so far: the report appears here when an allocation fails",
            _ => "no report: no allocation failed",
        };
        frame.render_widget(Paragraph::new(why).fg(Color::DarkGray).block(Block::bordered().title(" report ")), area);
        return;
    };
    let height = area.height.saturating_sub(2) as usize;
    let starts: &[usize] = app.slot().map_or(&[], |s| s.report_lines.as_slice());
    let total = starts.len();
    let top = app.report.selected.min(total.saturating_sub(height.max(1)));
    app.report.page.set(height);
    let lines: Vec<Line> = (top..(top + height).min(total))
        .map(|i| {
            let end = starts.get(i + 1).map_or(report.len(), |&e| e - 1);
            let line = report[starts[i]..end.max(starts[i])].trim_end_matches('\r');
            Line::from(line.chars().skip(app.report_column).collect::<String>())
        })
        .collect();
    let mut title = format!(
        " report: lines {}-{} of {} ",
        fmt::count((top + 1).min(total) as u64),
        fmt::count((top + height).min(total) as u64),
        fmt::count(total as u64)
    );
    if app.report_column > 0 {
        title.push_str(&format!("· from column {} ", app.report_column + 1));
    }
    frame.render_widget(Paragraph::new(lines).block(Block::bordered().title(title)), area);
}
