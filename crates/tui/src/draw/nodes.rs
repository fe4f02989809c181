//! Usage by node: ops ranked by live bytes with bars, share and counts; flat or folded by
//! scope.

use super::{bar, palette};
use crate::app::App;
use crate::fmt;
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

pub fn draw(frame: &mut Frame, app: &App, area: Rect) {
    let Some(slot) = app.slot() else { return };
    let d = &slot.device;
    let st = &app.nodes;
    let rows = &slot.node_rows;
    let total: u64 = d.nodes.iter().map(|n| n.bytes).sum::<u64>() + d.nodes_rest.map_or(0, |r| r.1);
    let mut title =
        format!(" nodes: {} ops, {} · by {}", fmt::count(d.nodes.len() as u64), fmt::bytes(total), st.sort.name());
    if st.tree {
        title.push_str(" · tree");
    }
    if st.filter.is_active() {
        title.push_str(&format!(" · filter \"{}\": {} rows", st.filter.text, fmt::count(rows.len() as u64)));
    }
    title.push(' ');
    let block = Block::bordered().title(title);
    if d.nodes.is_empty() {
        let why = if d.stats.allocator.bytes_in_use == 0 {
            "nothing is allocated"
        } else {
            "the source did not list usage by node"
        };
        frame.render_widget(Paragraph::new(why).fg(Color::DarkGray).block(block), area);
        return;
    }
    let height = area.height.saturating_sub(3) as usize; // borders and header
    let offset = st.list.window(rows.len(), height);
    let bar_width = if area.width >= 120 { 20 } else { 10 };
    // What the name column gets: the rest of the row after the figures and the spacing.
    let name_width = (area.width as usize).saturating_sub(2 + bar_width + 10 + 6 + 9 + 4).max(8);
    let body: Vec<Row> = rows
        .iter()
        .enumerate()
        .skip(offset)
        .take(height)
        .map(|(i, r)| {
            let label = if st.tree {
                let marker = match r.expanded {
                    Some(true) => "▾ ",
                    Some(false) => "▸ ",
                    None => "  ",
                };
                format!("{}{marker}{}", "  ".repeat(r.depth), r.label)
            } else {
                // Cut at the front: the op, at the end of the name, is what tells nodes apart.
                fmt::fit(&r.name, name_width, true)
            };
            let style = if i == st.list.selected {
                Style::new().bg(palette::ACCENT).fg(Color::Black).add_modifier(Modifier::BOLD)
            } else {
                Style::new()
            };
            Row::new(vec![
                Cell::from(bar(r.bytes, total, bar_width)).style(Style::new().fg(palette::IN_USE)),
                Cell::from(fmt::bytes(r.bytes)),
                Cell::from(fmt::percent(r.bytes, total)),
                Cell::from(fmt::count(r.count)),
                Cell::from(label),
            ])
            .style(style)
        })
        .collect();
    let mut body = body;
    if let Some((n, bytes)) = d.nodes_rest.filter(|_| offset + height >= rows.len() && !st.filter.is_active()) {
        body.push(Row::new(vec![
            Cell::from(""),
            Cell::from(fmt::bytes(bytes)),
            Cell::from(fmt::percent(bytes, total)),
            Cell::from(""),
            Cell::from(Line::from(format!("  Remaining {} nodes", fmt::count(n))).fg(Color::DarkGray)),
        ]));
    }
    let header = Row::new(["share", "bytes", "%", "count", "node"]).style(Style::new().fg(Color::DarkGray).bold());
    let table = Table::new(
        body,
        [
            Constraint::Length(bar_width as u16),
            Constraint::Length(10),
            Constraint::Length(6),
            Constraint::Length(9),
            Constraint::Fill(1),
        ],
    )
    .header(header)
    .block(block);
    frame.render_widget(table, area);
}
