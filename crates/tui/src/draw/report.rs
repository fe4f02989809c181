//! The OOM report as the terminal printed it (TF's text, the ranked nodes, the verdict),
//! scrollable.

use super::palette;
use crate::app::{App, find_ignore_case};
use crate::fmt;
use crate::model::{Device, Status};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
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
    let width = area.width.saturating_sub(2) as usize;
    app.report_width.set(width);
    let lines: Vec<Line> = (top..(top + height).min(total))
        .map(|i| {
            let end = starts.get(i + 1).map_or(report.len(), |&e| e - 1);
            let line = report[starts[i]..end.max(starts[i])].trim_end_matches('\r');
            let current = app.report_match.filter(|&(l, _)| l == i).map(|(_, c)| c);
            highlighted(line, &find_ignore_case(line, &app.search.text), current, app.report_column)
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
    if app.search.is_active() {
        title.push_str(&format!("· search \"{}\" ", app.search.text));
    }
    frame.render_widget(Paragraph::new(lines).block(Block::bordered().title(title)), area);
}

/// The part of `line` from character `column` on (the paragraph clips it), with the search's
/// `matches` (character ranges) marked; the match the search went to (`current`, its first
/// character) stands out from the others.
fn highlighted(line: &str, matches: &[(usize, usize)], current: Option<usize>, column: usize) -> Line<'static> {
    let visible: Vec<char> = line.chars().skip(column).collect();
    if matches.is_empty() {
        return Line::from(visible.into_iter().collect::<String>());
    }
    let other = Style::new().fg(Color::Black).bg(Color::Yellow);
    let chosen = Style::new().fg(Color::Black).bg(palette::CURSOR).add_modifier(Modifier::BOLD);
    let mut spans = Vec::new();
    let mut at = 0;
    for &(start, len) in matches {
        let (s, e) =
            (start.saturating_sub(column).min(visible.len()), (start + len).saturating_sub(column).min(visible.len()));
        if s >= e {
            continue;
        }
        if s > at {
            spans.push(Span::raw(visible[at..s].iter().collect::<String>()));
        }
        let style = if current == Some(start) { chosen } else { other };
        spans.push(Span::styled(visible[s..e].iter().collect::<String>(), style));
        at = e;
    }
    if at < visible.len() {
        spans.push(Span::raw(visible[at..].iter().collect::<String>()));
    }
    Line::from(spans)
}
