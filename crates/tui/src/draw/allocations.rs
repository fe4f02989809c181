//! The live allocations: one row per in-use chunk, filterable and sortable, with a detail
//! pane that shows the call stack.

use super::palette;
use crate::app::App;
use crate::fmt;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table, Wrap};

pub fn draw(frame: &mut Frame, app: &App, area: Rect) {
    let Some(slot) = app.slot() else { return };
    let d = &slot.device;
    let st = &app.allocs;
    let rows = &slot.alloc_rows;
    let (list_area, detail_area) = if st.detail {
        let [a, b] = Layout::vertical([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area);
        (a, Some(b))
    } else {
        (area, None)
    };
    let live = d.spans.iter().filter(|s| s.is_used()).count();
    let mut title = format!(" allocations: {} live · by {}", fmt::count(live as u64), st.sort.name());
    if st.filter.is_active() {
        title.push_str(&format!(" · filter \"{}\": {}", st.filter.text, fmt::count(rows.len() as u64)));
    }
    title.push(' ');
    let block = Block::bordered().title(title);
    if d.spans.is_empty() {
        super::missing(frame, list_area, "allocations", "the source has no chunk list, so no allocations to list", d);
        return;
    }
    let height = list_area.height.saturating_sub(3) as usize;
    let offset = st.list.window(rows.len(), height);
    let wide = list_area.width >= 120;
    // The op column's share of the row (Fill 3 of 4 after the fixed columns).
    let fixed = 2 + 10 + 10 + 5 + 5 + if wide { 17 } else { 0 };
    let op_width = ((list_area.width as usize).saturating_sub(fixed) * 3 / 4).max(8);
    let body: Vec<Row> = rows
        .iter()
        .enumerate()
        .skip(offset)
        .take(height)
        .map(|(i, &idx)| {
            let s = &d.spans[idx as usize];
            let op = if s.chunks > 1 {
                format!("{} (+{} chunks merged)", d.op(s), s.chunks - 1)
            } else {
                d.op(s).to_string()
            };
            let op = fmt::fit(&op, op_width, true);
            let step = s.step.filter(|&x| x >= 0).map_or(String::new(), |x| x.to_string());
            let mut cells = vec![fmt::bytes(s.in_use), fmt::bytes(s.requested), step, op, d.shape(s).to_string()];
            if wide {
                cells.push(fmt::address(s.address));
            }
            let style = if i == st.list.selected {
                Style::new().bg(palette::ACCENT).fg(Color::Black).add_modifier(Modifier::BOLD)
            } else {
                Style::new()
            };
            Row::new(cells).style(style)
        })
        .collect();
    let mut header = vec!["size", "requested", "step", "op", "shape"];
    let mut widths = vec![
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(5),
        Constraint::Fill(3),
        Constraint::Fill(1),
    ];
    if wide {
        header.push("address");
        widths.push(Constraint::Length(16));
    }
    let header = Row::new(header).style(Style::new().fg(Color::DarkGray).bold());
    frame.render_widget(Table::new(body, widths).header(header).block(block), list_area);

    if let Some(area) = detail_area {
        let lines = match rows.get(st.list.selected) {
            None => vec![Line::from("no allocation selected")],
            Some(&idx) => {
                let s = &d.spans[idx as usize];
                let key = |k: &str| Span::styled(format!("{k:<10}"), Style::new().fg(Color::DarkGray));
                let mut lines = vec![
                    Line::from(vec![key("op"), Span::raw(d.op(s).to_string()).bold()]),
                    Line::from(vec![
                        key("size"),
                        Span::raw(format!(
                            "{} (requested {}, waste {})",
                            fmt::bytes(s.in_use),
                            fmt::bytes(s.requested),
                            fmt::bytes(s.waste())
                        )),
                    ]),
                    Line::from(vec![key("address"), Span::raw(fmt::address(s.address))]),
                ];
                if !d.shape(s).is_empty() {
                    lines.push(Line::from(vec![key("shape"), Span::raw(d.shape(s).to_string())]));
                }
                if let Some(step) = s.step.filter(|&x| x >= 0) {
                    lines.push(Line::from(vec![key("step"), Span::raw(step.to_string())]));
                }
                if s.chunks > 1 {
                    lines.push(Line::from(vec![
                        key("merged"),
                        Span::raw(format!("{} adjacent chunks shown as one by the live feed", s.chunks)),
                    ]));
                }
                let stack = d.stack(s);
                if stack.is_empty() {
                    lines.push(Line::from(vec![
                        key("stack"),
                        // Only a PyTorch snapshot taken with _record_memory_history() brings
                        // stacks (and a Rust program built with `Recording { stacks: true }`);
                        // no command of oomscope records them.
                        Span::styled(
                            "not recorded by this source (a PyTorch snapshot taken with \
                             torch.cuda.memory._record_memory_history() has them)",
                            Style::new().fg(Color::DarkGray),
                        ),
                    ]));
                } else {
                    lines.push(Line::from(key("stack")));
                    for f in stack {
                        lines.push(Line::from(format!("  {f}")));
                    }
                }
                lines
            }
        };
        frame.render_widget(
            Paragraph::new(lines).wrap(Wrap { trim: false }).block(Block::bordered().title(" detail (Enter closes) ")),
            area,
        );
    }
}
