//! The allocator's 21 bins as a table, as TF's `Bin (256): Total Chunks: ...` lines.

use super::palette;
use crate::app::App;
use crate::fmt;
use crate::model::Device;
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::widgets::{Block, Paragraph, Row, Table};

pub fn draw(frame: &mut Frame, app: &App, d: &Device, area: Rect) {
    let block = Block::bordered().title(" bins: chunks by size (free chunks are what the next request searches) ");
    if d.bins.is_empty() {
        super::missing(frame, area, "bins", "the source has no bin list", d);
        return;
    }
    let height = area.height.saturating_sub(3) as usize;
    let offset = app.bins.window(d.bins.len(), height);
    let rows: Vec<Row> = d
        .bins
        .iter()
        .enumerate()
        .skip(offset)
        .take(height)
        .map(|(i, b)| {
            let free_chunks = b.total_chunks - b.chunks_in_use.min(b.total_chunks);
            let free_bytes = b.bytes.saturating_sub(b.bytes_in_use);
            let mut style = Style::new();
            if b.total_chunks == 0 {
                style = style.fg(Color::DarkGray);
            }
            if i == app.bins.selected {
                style = Style::new().bg(palette::ACCENT).fg(Color::Black).add_modifier(Modifier::BOLD);
            }
            Row::new(vec![
                format!("{:>2}", b.index),
                fmt::bytes(b.size),
                fmt::count(b.total_chunks),
                fmt::count(b.chunks_in_use),
                fmt::bytes(b.bytes),
                fmt::bytes(b.bytes_in_use),
                fmt::bytes(b.requested_in_use),
                fmt::count(free_chunks),
                fmt::bytes(free_bytes),
            ])
            .style(style)
        })
        .collect();
    let header = Row::new(["bin", "size", "chunks", "in use", "bytes", "in use", "requested", "free", "free bytes"])
        .style(Style::new().fg(Color::DarkGray).bold());
    let widths = [
        Constraint::Length(3),
        Constraint::Length(9),
        Constraint::Length(7),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(10),
    ];
    if d.bins.iter().all(|b| b.total_chunks == 0) && d.stats.allocator.pool_bytes > 0 {
        let p = Paragraph::new("the bins are empty in this source").fg(Color::DarkGray).block(block);
        frame.render_widget(p, area);
        return;
    }
    frame.render_widget(Table::new(rows, widths).header(header).column_spacing(1).block(block), area);
}
