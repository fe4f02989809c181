//! Drawing: `App` state in, cells out. One module per view; this one lays out the frame
//! (tabs, device line, body, status bar) and the help.

mod allocations;
mod bins;
mod job;
mod map;
mod nodes;
mod overview;
mod report;

use crate::app::{App, View};
use crate::fmt;
use crate::model::{Device, Status};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Tabs, Wrap};

/// Colours used across views; every state also has its own character, so the screen reads
/// without colour (`--color never`, NO_COLOR, and `tmux capture-pane`). Without colour,
/// [`draw`] takes them all out afterwards: see [`without_colour`].
pub(crate) mod palette {
    use ratatui::style::Color;
    pub const IN_USE: Color = Color::Green;
    pub const WASTE: Color = Color::Yellow;
    pub const FREE: Color = Color::DarkGray;
    pub const POOL: Color = Color::Cyan;
    pub const LIMIT: Color = Color::Red;
    pub const OOM: Color = Color::LightRed;
    pub const ACCENT: Color = Color::LightBlue;
    pub const CURSOR: Color = Color::Magenta;
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, app: &App) {
    let [tabs, device_line, body, status] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1), Constraint::Min(1), Constraint::Length(1)])
            .areas(frame.area());
    draw_tabs(frame, app, tabs);
    draw_device_line(frame, app, device_line);
    match app.device() {
        _ if app.view == View::Job && app.job.is_some() => job::draw(frame, app, body),
        None => draw_empty(frame, app, body),
        Some(device) => match app.view {
            View::Overview => overview::draw(frame, app, device, body),
            View::Nodes => nodes::draw(frame, app, body),
            View::Bins => bins::draw(frame, app, device, body),
            View::Map => map::draw(frame, app, device, body),
            View::Allocations => allocations::draw(frame, app, body),
            View::Report => report::draw(frame, app, device, body),
            View::Job => draw_empty(frame, app, body),
        },
    }
    draw_status(frame, app, status);
    if app.help {
        draw_help(frame, frame.area());
    }
    if app.monochrome {
        without_colour(frame.buffer_mut());
    }
    defuse(frame.buffer_mut());
}

/// The screen without colour: what was set off by a background (the selection, the cursor,
/// the tab on screen, a status badge, a match) is reversed instead, what was grey is dim, and
/// every other colour goes. Black backgrounds (a gauge's empty part) are no emphasis.
/// Every cell without the characters a terminal would act on or reorder text around (an
/// op name from a snapshot with U+202E turns the rest of its line around; an escape sequence
/// would reach the terminal): whatever a view drew, the screen shows text as written.
pub(crate) fn defuse(buf: &mut ratatui::buffer::Buffer) {
    for c in &mut buf.content {
        if c.symbol().contains(oomscope_base::text::unsafe_char) {
            let kept: String = c.symbol().chars().filter(|&ch| !oomscope_base::text::unsafe_char(ch)).collect();
            c.set_symbol(if kept.is_empty() { " " } else { &kept });
        }
    }
}

pub(crate) fn without_colour(buf: &mut ratatui::buffer::Buffer) {
    for c in &mut buf.content {
        if !matches!(c.bg, Color::Reset | Color::Black) {
            c.modifier |= Modifier::REVERSED;
        }
        if c.fg == Color::DarkGray {
            c.modifier |= Modifier::DIM;
        }
        c.fg = Color::Reset;
        c.bg = Color::Reset;
    }
}

fn draw_tabs(frame: &mut Frame, app: &App, area: Rect) {
    let views = app.views();
    let titles: Vec<Line> = views
        .iter()
        .map(|v| Line::from(format!("{} {}", if *v == View::Job { 0 } else { v.index() + 1 }, v.title())))
        .collect();
    let tabs = Tabs::new(titles)
        .select(views.iter().position(|v| *v == app.view).unwrap_or(0))
        .style(Style::new().fg(Color::Gray))
        .highlight_style(Style::new().fg(Color::Black).bg(palette::ACCENT).add_modifier(Modifier::BOLD))
        .divider("│")
        .padding("", "");
    let [name, rest] = Layout::horizontal([Constraint::Length(9), Constraint::Min(1)]).areas(area);
    frame.render_widget(Paragraph::new("oomscope ".bold()), name);
    frame.render_widget(tabs, rest);
}

fn status_style(status: &Status) -> Style {
    match status {
        Status::Live | Status::Replaying => Style::new().fg(Color::Black).bg(Color::Green),
        Status::Disconnected(_) => Style::new().fg(Color::White).bg(Color::Red),
        Status::Finished | Status::PostMortem => Style::new().fg(Color::Black).bg(Color::Gray),
    }
}

fn draw_device_line(frame: &mut Frame, app: &App, area: Rect) {
    let Some(slot) = app.slot() else {
        frame.render_widget(Paragraph::new(" waiting for data").fg(Color::DarkGray), area);
        return;
    };
    let d = &slot.device;
    let mut spans = Vec::new();
    if app.paused {
        spans.push(Span::styled(" PAUSED ", Style::new().fg(Color::Black).bg(Color::Yellow)));
    } else {
        spans.push(Span::styled(format!(" {} ", d.status.label()), status_style(&d.status)));
    }
    spans.push(Span::raw(" "));
    if app.devices.len() > 1 {
        spans.push(Span::styled(
            format!("[{}/{}] ", app.current + 1, app.devices.len()),
            Style::new().fg(palette::ACCENT),
        ));
    }
    spans.push(Span::styled(d.name.clone(), Style::new().bold()));
    // Before the rest, which a narrow terminal cuts: how this device came on screen.
    if let Some(note) = &slot.note {
        spans.push(Span::styled(format!(" · {note}"), Style::new().fg(palette::ACCENT)));
    }
    let mut rest = String::new();
    if !d.hardware.is_empty() {
        rest.push_str(&format!(" · {}", d.hardware));
    }
    if !d.origin.is_empty() {
        rest.push_str(&format!(" · {}", d.origin));
    }
    if let Status::Disconnected(why) = &d.status {
        rest.push_str(&format!(" · {why}"));
    }
    if slot.held_count > 0 {
        rest.push_str(&format!(" · {} update(s) held", slot.held_count));
    }
    if d.dropped_frames > 0 {
        rest.push_str(&format!(" · {} frame(s) dropped", fmt::count(d.dropped_frames)));
    }
    spans.push(Span::raw(rest));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn draw_empty(frame: &mut Frame, app: &App, area: Rect) {
    let text = app.waiting.clone().unwrap_or_else(|| "no device to show".to_string());
    let p = Paragraph::new(text).wrap(Wrap { trim: true }).block(Block::bordered().title(" waiting "));
    frame.render_widget(p, area);
}

/// The keys of the view on screen, or the filter or search being typed, or the last message.
fn draw_status(frame: &mut Frame, app: &App, area: Rect) {
    let editing = if app.nodes.filter.editing {
        Some(("filter", &app.nodes.filter.text, "Enter keep · Esc clear"))
    } else if app.allocs.filter.editing {
        Some(("filter", &app.allocs.filter.text, "Enter keep · Esc clear"))
    } else if app.search.editing {
        Some(("search", &app.search.text, "Enter find · Esc cancel"))
    } else if app.map.filter.editing {
        Some(("map filter", &app.map.filter.text, "op or shape · Enter go to the first · Esc clear"))
    } else {
        None
    };
    let line = if let Some((what, text, keys)) = editing {
        Line::from(vec![
            Span::styled(format!(" {what}: "), Style::new().fg(Color::Black).bg(palette::ACCENT)),
            Span::raw(format!(" {text}")),
            Span::styled("█", Style::new().fg(palette::ACCENT)),
            Span::styled(format!("  {keys}"), Style::new().fg(Color::DarkGray)),
        ])
    } else if let Some(m) = &app.message {
        Line::from(Span::styled(format!(" {m}"), Style::new().fg(Color::Yellow)))
    } else {
        let keys = match app.view {
            View::Overview => "",
            View::Job => " ↑↓ rank · Enter open it ·",
            View::Nodes if app.nodes.filter.is_active() => {
                " ↑↓ move · s sort · t tree · / new filter · Esc clear filter · Enter allocations ·"
            }
            View::Nodes => " ↑↓ move · s sort · t tree · / filter · Enter allocations ·",
            View::Bins => " ↑↓ move ·",
            View::Map if app.map.filter.is_active() => {
                " ←→ chunk · ↑↓ row · n N next/previous match · Esc clear filter ·"
            }
            View::Map if app.map.by_state => " ←→ chunk · ↑↓ row · Enter allocation · / filter · c colour by op ·",
            View::Map => " ←→ chunk · ↑↓ row · Enter allocation · / filter · c colour by state ·",
            View::Allocations if app.allocs.filter.is_active() => {
                " ↑↓ move · s sort · / new filter · Esc clear filter · Enter detail ·"
            }
            View::Allocations => " ↑↓ move · s sort · / filter · Enter detail ·",
            View::Report if app.search.is_active() => " ↑↓ ←→ scroll · n N next/previous match · Esc end search ·",
            View::Report => " ↑↓ PgUp PgDn ←→ scroll · / search ·",
        };
        // While paused the key resumes, whether or not anything is still live.
        let live = if app.paused {
            " space resume ·"
        } else if app.is_live() {
            " space pause ·"
        } else {
            ""
        };
        let devices = if app.devices.len() > 1 { " [ ] device ·" } else { "" };
        let views = if app.job.is_some() { "Tab/0-6" } else { "Tab/1-6" };
        let mut text = format!("{keys}{live}{devices} {views} views · ? help · q quit");
        // On a narrow terminal the hints are shortened, least needed first, so "? help"
        // and "q quit" stay on screen.
        for (long, short) in FOOTER_SHORTER {
            if text.chars().count() <= usize::from(area.width) {
                break;
            }
            text = text.replace(long, short);
        }
        Line::from(Span::styled(text, Style::new().fg(Color::DarkGray)))
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// Footer hints and their shorter forms, applied in order until the footer fits.
const FOOTER_SHORTER: &[(&str, &str)] = &[
    (" Tab/1-6 views ·", " Tab views ·"),
    (" Tab/0-6 views ·", " Tab views ·"),
    ("Enter open it", "Enter open"),
    ("Enter allocations", "Enter allocs"),
    ("Enter allocation", "Enter alloc"),
    ("c colour by state", "c colours"),
    ("c colour by op", "c colours"),
    ("next/previous match", "match"),
    ("Esc clear filter", "Esc clear"),
    (" / new filter ·", " / filter ·"),
    (" Tab views ·", ""),
    ("PgUp PgDn ", ""),
];

const HELP: &[(&str, &str)] = &[
    ("q  Esc", "quit (Esc first closes help, detail, filter, search)"),
    ("Ctrl-C", "quit as interrupted (exit status 130)"),
    ("?", "this help"),
    ("Tab  1-6", "views: overview nodes bins map allocations report"),
    ("0", "a job's ranks side by side (tui DIR)"),
    ("↑↓ jk PgUp PgDn g G", "move, scroll"),
    ("←→  h l", "map: by chunk; tree: fold; report: sideways"),
    ("/", "nodes, allocations, map: filter; report: search"),
    ("n  N", "report, map: next or previous match"),
    ("c", "map: colour by op or by state"),
    ("s", "sort nodes or allocations"),
    ("t", "nodes: a list or a tree by scope"),
    ("Enter", "node: its allocations; map: the chunk; detail"),
    ("space", "pause or resume a live view"),
    ("[  ]", "previous or next device (attached processes)"),
];

fn draw_help(frame: &mut Frame, area: Rect) {
    let key_width = HELP.iter().map(|(k, _)| k.chars().count()).max().unwrap_or(0);
    let longest = HELP.iter().map(|(_, v)| v.chars().count()).max().unwrap_or(0) + key_width + 3;
    let width = area.width.saturating_sub(4).min(longest as u16 + 2);
    let height = (HELP.len() as u16 + 3).min(area.height);
    let popup = Rect {
        x: area.x + (area.width.saturating_sub(width)) / 2,
        y: area.y + (area.height.saturating_sub(height)) / 2,
        width,
        height,
    };
    let mut lines: Vec<Line> = HELP
        .iter()
        .map(|(k, v)| {
            Line::from(vec![
                Span::styled(format!(" {k:<key_width$}  "), Style::new().fg(palette::ACCENT).bold()),
                Span::raw(*v),
            ])
        })
        .collect();
    lines.push(Line::from(Span::styled(" any key closes this help", Style::new().fg(Color::DarkGray))));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(Block::bordered().title(" keys ")),
        popup,
    );
}

/// A bar of `width` cells filled to `part / whole` with eighth-block precision.
pub(crate) fn bar(part: u64, whole: u64, width: usize) -> String {
    if whole == 0 || width == 0 {
        return " ".repeat(width);
    }
    let eighths = ((part as f64 / whole as f64).clamp(0.0, 1.0) * (width * 8) as f64).round() as usize;
    let mut s = "█".repeat(eighths / 8);
    if !eighths.is_multiple_of(8) {
        s.push(['▏', '▎', '▍', '▌', '▋', '▊', '▉'][eighths % 8 - 1]);
    }
    let used = s.chars().count();
    s.push_str(&" ".repeat(width - used));
    s
}

/// A device's chunk list is missing (a partial log): say so where the view would be.
pub(crate) fn missing(frame: &mut Frame, area: Rect, title: &str, what: &str, device: &Device) {
    let mut lines = vec![Line::from(what.to_string())];
    for n in &device.notes {
        lines.push(Line::from(Span::styled(n.clone(), Style::new().fg(Color::DarkGray))));
    }
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: true }).block(Block::bordered().title(format!(" {title} "))),
        area,
    );
}
