//! The memory map: every region laid across the screen, each cell a slice of bytes drawn as
//! in use (`█`), waste (`▓`: handed out but not asked for) or free (`·`), and the chunk
//! under the cursor described below.

use super::palette;
use crate::app::{App, MapLayout};
use crate::fmt;
use crate::model::Device;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

#[derive(Clone, Copy, PartialEq, Eq)]
enum CellState {
    Used,
    Waste,
    Free,
}

pub fn draw(frame: &mut Frame, app: &App, d: &Device, area: Rect) {
    if d.regions.is_empty() || d.spans.is_empty() {
        let what = if d.stats.allocator.pool_bytes == 0 && d.stats.known {
            "the allocator holds no memory yet"
        } else {
            "the source has no chunk list, so there is no map (TF prints chunks only in its full dump)"
        };
        super::missing(frame, area, "memory map", what, d);
        return;
    }
    let detail_rows = 6;
    let [grid_area, detail] = Layout::vertical([Constraint::Min(3), Constraint::Length(detail_rows)]).areas(area);
    let total: u64 = d.regions.iter().map(|r| r.size).sum();
    let block = Block::bordered().title(Line::from(vec![
        Span::raw(format!(" memory map: {} in {} region(s) · ", fmt::bytes(total), d.regions.len())),
        Span::styled("█ in use ", Style::new().fg(palette::IN_USE)),
        Span::styled("▓ waste ", Style::new().fg(palette::WASTE)),
        Span::styled("· free ", Style::new().fg(palette::FREE)),
        Span::styled("▒ cursor ", Style::new().fg(palette::CURSOR)),
    ]));
    let inner = block.inner(grid_area);
    frame.render_widget(block, grid_area);
    app.map.grid.set((inner.width, inner.height));
    let layout = MapLayout::new(d, inner.width, inner.height);
    let cursor = app.map.cursor.min(d.spans.len() - 1);
    let cursor_cells = cursor_cells(d, &layout, cursor);
    let buf = frame.buffer_mut();
    for (r, region) in d.regions.iter().enumerate() {
        let first = layout.region_cell[r];
        let n = ((region.size as f64 / layout.bytes_per_cell).ceil() as usize).max(1);
        let spans = &d.spans[region.spans.clone()];
        let mut j = 0;
        for k in 0..n {
            let cell = first + k;
            let (x, y) = ((cell % layout.cols) as u16, (cell / layout.cols) as u16);
            if y >= inner.height {
                break;
            }
            let start = region.address + (k as f64 * layout.bytes_per_cell) as u64;
            let end =
                (region.address + ((k + 1) as f64 * layout.bytes_per_cell) as u64).min(region.address + region.size);
            let (mut used, mut waste, mut free) = (0f64, 0f64, 0f64);
            let mut i = j;
            while i < spans.len() && spans[i].address < end {
                let s = &spans[i];
                let s_end = s.address + s.size;
                let overlap = s_end.min(end).saturating_sub(s.address.max(start)) as f64;
                if overlap > 0.0 && s.size > 0 {
                    let f = overlap / s.size as f64;
                    used += s.requested.min(s.in_use) as f64 * f;
                    waste += s.waste() as f64 * f;
                    free += (s.size - s.in_use.min(s.size)) as f64 * f;
                }
                if s_end <= end {
                    j = i + 1;
                }
                i += 1;
            }
            let state = if used + waste >= free {
                if waste > used { CellState::Waste } else { CellState::Used }
            } else {
                CellState::Free
            };
            let (mut symbol, colour) = match state {
                CellState::Used => ("█", palette::IN_USE),
                CellState::Waste => ("▓", palette::WASTE),
                CellState::Free => ("·", palette::FREE),
            };
            let mut style = Style::new().fg(colour);
            if cursor_cells.contains(&cell) {
                // Its own character too, so the cursor shows without colour.
                symbol = "▒";
                style = Style::new().fg(palette::CURSOR).bg(Color::White).add_modifier(Modifier::BOLD);
            }
            if let Some(c) = buf.cell_mut((inner.x + x, inner.y + y)) {
                c.set_symbol(symbol).set_style(style);
            }
        }
    }
    draw_detail(frame, d, cursor, detail);
}

/// The cells the cursor's span covers (at least its first).
fn cursor_cells(d: &Device, layout: &MapLayout, cursor: usize) -> std::ops::Range<usize> {
    let first = layout.cell_of(d, cursor);
    let n = ((d.spans[cursor].size as f64 / layout.bytes_per_cell).round() as usize).max(1);
    first..first + n
}

fn draw_detail(frame: &mut Frame, d: &Device, cursor: usize, area: Rect) {
    let s = &d.spans[cursor];
    let region = d.regions.iter().position(|r| r.spans.contains(&cursor)).unwrap_or(0);
    let r = &d.regions[region];
    let mut lines = Vec::new();
    let state = if s.chunks > 1 {
        format!(
            "{} chunks merged by the live feed: {} in use, {} requested",
            fmt::count(s.chunks as u64),
            fmt::bytes(s.in_use),
            fmt::bytes(s.requested)
        )
    } else if s.is_used() {
        format!("in use · requested {} · waste {}", fmt::bytes(s.requested), fmt::bytes(s.waste()))
    } else {
        "free".to_string()
    };
    lines.push(Line::from(vec![
        Span::styled(format!("{} ", fmt::address(s.address)), Style::new().bold()),
        Span::raw(format!("{} · {state}", fmt::bytes(s.size))),
    ]));
    if s.is_used() {
        let mut l = vec![Span::styled("op ", Style::new().fg(Color::DarkGray)), Span::raw(d.op(s).to_string())];
        if !d.shape(s).is_empty() {
            l.push(Span::styled("  shape ", Style::new().fg(Color::DarkGray)));
            l.push(Span::raw(d.shape(s).to_string()));
        }
        if let Some(step) = s.step.filter(|&st| st >= 0) {
            l.push(Span::styled("  step ", Style::new().fg(Color::DarkGray)));
            l.push(Span::raw(step.to_string()));
        }
        lines.push(Line::from(l));
        let stack = d.stack(s);
        if !stack.is_empty() {
            lines.push(Line::from(vec![
                Span::styled("stack ", Style::new().fg(Color::DarkGray)),
                Span::raw(stack.iter().take(3).cloned().collect::<Vec<_>>().join(" ← ")),
            ]));
        }
    }
    lines.push(Line::from(Span::styled(
        format!(
            "region {}/{} at {} ({}) · chunk {} of {}",
            region + 1,
            d.regions.len(),
            fmt::address(r.address),
            fmt::bytes(r.size),
            fmt::count((cursor - r.spans.start + 1) as u64),
            fmt::count(r.spans.len() as u64)
        ),
        Style::new().fg(Color::DarkGray),
    )));
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: true }).block(Block::bordered().title(" under the cursor ")),
        area,
    );
}
