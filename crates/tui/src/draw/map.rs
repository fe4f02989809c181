//! The memory map: every region laid across the screen, each cell a slice of bytes drawn as
//! in use (`█`), waste (`▓`: handed out but not asked for) or free (`·`), and the chunk
//! under the cursor described below. In-use cells take the colour of their op, as PyTorch's
//! memory_viz colours allocations, with the largest ops named in the legend; `c` colours
//! them by state instead. The characters alone tell the states apart, without colour.

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

/// Colours for ops, far apart on a dark or a light background (the 256-colour palette); none
/// is the grey of free cells or the cursor's.
pub const OP_PALETTE: [Color; 12] = [
    Color::Indexed(39),  // blue
    Color::Indexed(208), // orange
    Color::Indexed(41),  // green
    Color::Indexed(161), // deep pink
    Color::Indexed(141), // purple
    Color::Indexed(220), // gold
    Color::Indexed(44),  // turquoise
    Color::Indexed(130), // brown
    Color::Indexed(112), // lime
    Color::Indexed(204), // salmon
    Color::Indexed(27),  // deep blue
    Color::Indexed(180), // tan
];

/// Where an op's colour starts: a hash of its name (FNV-1a, the same in every run and on
/// every machine), so an op keeps its colour from frame to frame and from run to run.
pub fn op_slot(name: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % OP_PALETTE.len() as u64) as usize
}

/// The colour of each of `d`'s ops (by index into `d.ops`), and the ops by in-use bytes,
/// largest first. The largest ops, as many as there are colours, get different ones: each
/// its hash's colour, or the next one no larger op took; the rest keep their hash's.
pub fn op_colours(d: &Device) -> (Vec<Color>, Vec<(usize, u64)>) {
    let mut bytes = vec![0u64; d.ops.len()];
    for s in d.spans.iter().filter(|s| s.is_used()) {
        if let Some(b) = bytes.get_mut(s.op as usize) {
            *b += s.in_use;
        }
    }
    let mut ranked: Vec<(usize, u64)> = bytes.iter().copied().enumerate().filter(|&(_, b)| b > 0).collect();
    // Ties by name, so the order (and so the colours) do not depend on the ops' numbering.
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| d.ops[a.0].cmp(&d.ops[b.0])));
    let mut colours: Vec<Color> = d.ops.iter().map(|o| OP_PALETTE[op_slot(o)]).collect();
    let mut taken = [false; OP_PALETTE.len()];
    for &(op, _) in ranked.iter().take(OP_PALETTE.len()) {
        let first = op_slot(&d.ops[op]);
        let slot = (0..OP_PALETTE.len()).map(|k| (first + k) % OP_PALETTE.len()).find(|&k| !taken[k]).unwrap_or(first);
        taken[slot] = true;
        colours[op] = OP_PALETTE[slot];
    }
    (colours, ranked)
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
    let by_op = !app.map.by_state && !app.monochrome;
    let (colours, ranked) = if by_op { op_colours(d) } else { (Vec::new(), Vec::new()) };
    let filter = &app.map.filter;
    let used_style = if by_op { Style::new() } else { Style::new().fg(palette::IN_USE) };
    let mut title = vec![Span::raw(format!(" memory map: {} in {} region(s) · ", fmt::bytes(total), d.regions.len()))];
    if filter.is_active() {
        let (n, bytes) = (0..d.spans.len())
            .filter(|&i| app.map.matches(d, i))
            .fold((0u64, 0u64), |(n, b), i| (n + 1, b + d.spans[i].in_use));
        title.push(Span::styled(
            format!("\"{}\": {} chunk(s), {} ", filter.text, fmt::count(n), fmt::bytes(bytes)),
            Style::new().add_modifier(Modifier::BOLD),
        ));
        title.push(Span::styled("░ others ", Style::new().fg(palette::FREE)));
    }
    title.extend([
        Span::styled("█ in use ", used_style),
        Span::styled("▓ waste ", if by_op { Style::new() } else { Style::new().fg(palette::WASTE) }),
        Span::styled("· free ", Style::new().fg(palette::FREE)),
        Span::styled("▒ cursor ", Style::new().fg(palette::CURSOR)),
    ]);
    let mut block = Block::bordered().title(Line::from(title));
    if by_op {
        block = block.title_bottom(legend(d, &colours, &ranked, grid_area.width.saturating_sub(2) as usize));
    }
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
            // The in-use span with the most bytes in the cell: whose op colours it. With a
            // filter, the largest the filter matches: a cell with any match shows as one,
            // however small the match, so every chunk the title counts is on screen.
            let (mut top, mut top_bytes) = (None, 0f64);
            let (mut hit, mut hit_bytes) = (None, 0f64);
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
                    let mine = s.in_use as f64 * f;
                    if mine > top_bytes {
                        (top, top_bytes) = (Some(region.spans.start + i), mine);
                    }
                    if filter.is_active() && mine > hit_bytes && app.map.matches(d, region.spans.start + i) {
                        (hit, hit_bytes) = (Some(region.spans.start + i), mine);
                    }
                }
                if s_end <= end {
                    j = i + 1;
                }
                i += 1;
            }
            let mut state = if used + waste >= free {
                if waste > used { CellState::Waste } else { CellState::Used }
            } else {
                CellState::Free
            };
            if hit.is_some() {
                // A match in a mostly free cell shows too; the cell takes the match's colour.
                if state == CellState::Free {
                    state = CellState::Used;
                }
                top = hit;
            }
            let op_colour = top.and_then(|t| colours.get(d.spans[t].op as usize)).copied();
            let (mut symbol, colour) = match state {
                CellState::Used => ("█", if by_op { op_colour.unwrap_or(palette::IN_USE) } else { palette::IN_USE }),
                CellState::Waste => ("▓", if by_op { op_colour.unwrap_or(palette::WASTE) } else { palette::WASTE }),
                CellState::Free => ("·", palette::FREE),
            };
            let mut style = Style::new().fg(colour);
            if filter.is_active() && state != CellState::Free && hit.is_none() {
                // Not the filter's: shaded, so that its chunks stand out (without colour too).
                symbol = "░";
                style = Style::new().fg(palette::FREE);
            }
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

/// The largest ops with their colours, as many as fit in `width` columns: `■ op 900.00MiB`,
/// long names cut at the front (the op is at the end) to leave room for a few.
fn legend(d: &Device, colours: &[Color], ranked: &[(usize, u64)], width: usize) -> Line<'static> {
    let mut spans = Vec::new();
    let mut used = 1;
    for &(op, bytes) in ranked.iter().take(OP_PALETTE.len()) {
        let name = if d.ops[op].is_empty() { "(no op)".to_string() } else { fmt::fit(&d.ops[op], 24, true) };
        let text = format!("{name} {}", fmt::bytes(bytes));
        // ` ■ text` and the space before the border.
        let w = 3 + text.chars().count() + 1;
        if used + w > width {
            break;
        }
        used += w;
        spans.push(Span::styled(" ■ ", Style::new().fg(colours[op])));
        spans.push(Span::raw(text));
    }
    if !spans.is_empty() {
        spans.push(Span::raw(" "));
    }
    Line::from(spans)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Region, Span};

    /// A device of one region whose in-use chunks are `ops` (name, MiB), in that order.
    fn device(ops: &[(&str, u64)]) -> Device {
        let mut d = Device { ops: vec![String::new()], ..Device::default() };
        let mut addr = 0x1000;
        for &(name, mib) in ops {
            let op = match d.ops.iter().position(|o| o == name) {
                Some(i) => i,
                None => {
                    d.ops.push(name.to_string());
                    d.ops.len() - 1
                }
            };
            let size = mib << 20;
            d.spans.push(Span {
                address: addr,
                size,
                requested: size,
                in_use: size,
                chunks: 1,
                op: op as u32,
                ..Span::default()
            });
            addr += size;
        }
        d.regions.push(Region { address: 0x1000, size: addr - 0x1000, spans: 0..d.spans.len() });
        d
    }

    /// A device of one region of chunks (op, bytes); an empty op is a free chunk.
    fn chunks(list: &[(&str, u64)]) -> Device {
        let mut d = Device { ops: vec![String::new()], ..Device::default() };
        let mut addr = 0x1000;
        for &(name, size) in list {
            let used = !name.is_empty();
            let op = d.ops.iter().position(|o| o == name).unwrap_or_else(|| {
                d.ops.push(name.to_string());
                d.ops.len() - 1
            });
            d.spans.push(Span {
                address: addr,
                size,
                requested: if used { size } else { 0 },
                in_use: if used { size } else { 0 },
                chunks: 1,
                op: if used { op as u32 } else { 0 },
                ..Span::default()
            });
            addr += size;
        }
        d.regions.push(Region { address: 0x1000, size: addr - 0x1000, spans: 0..d.spans.len() });
        d
    }

    /// The map's grid cells as drawn: (symbol, colour).
    fn grid(app: &App, d: &Device) -> Vec<(String, Color)> {
        use ratatui::{Terminal, backend::TestBackend};
        let mut t = Terminal::new(TestBackend::new(40, 16)).unwrap();
        t.draw(|f| draw(f, app, d, f.area())).unwrap();
        let buf = t.backend().buffer().clone();
        let (w, h) = app.map.grid.get();
        (1..=h).flat_map(|y| (1..=w).map(move |x| (x, y))).map(|p| (buf[p].symbol().to_string(), buf[p].fg)).collect()
    }

    /// A small chunk the filter matches, in a cell mostly of a larger chunk it does not or of
    /// free bytes, still shows as a match: the title's count is on screen.
    #[test]
    fn a_small_match_sharing_a_cell_shows_as_a_match() {
        use crate::app::Filter;
        const MIB: u64 = 1 << 20;
        for (case, list) in [
            ("beside larger chunks", [("big/MatMul", 300 * MIB), ("conv/Relu", 64 << 10), ("big/MatMul", 300 * MIB)]),
            ("among free bytes", [("", 300 * MIB), ("conv/Relu", 64 << 10), ("", 300 * MIB)]),
        ] {
            // A free chunk at the end for the cursor, away from the match.
            let mut list = list.to_vec();
            list.push(("", 100 * MIB));
            let d = chunks(&list);
            let mut app = App::new(vec![d.clone()]);
            app.map.cursor = 3;
            app.map.filter = Filter { text: "relu".into(), editing: false };
            let cells = grid(&app, &d);
            let bpc = MapLayout::new(&d, app.map.grid.get().0, app.map.grid.get().1).bytes_per_cell;
            assert!(bpc > (64 << 10) as f64 * 10.0, "{case}: the match is a sliver of its cell");
            let relu = colour_of(&d, "conv/Relu");
            let shown: Vec<&(String, Color)> = cells.iter().filter(|(s, c)| s == "█" && *c == relu).collect();
            assert_eq!(shown.len(), 1, "{case}: the match's cell, in its op's colour: {cells:?}");
            if case == "beside larger chunks" {
                assert!(cells.iter().any(|(s, _)| s == "░"), "{case}: the other chunks are shaded");
            }
            // Without the filter the cell is its larger neighbour's.
            app.map.filter = Filter::default();
            assert!(!grid(&app, &d).iter().any(|(s, c)| s == "█" && *c == relu), "{case}");
        }
    }

    fn colour_of(d: &Device, name: &str) -> Color {
        op_colours(d).0[d.ops.iter().position(|o| o == name).unwrap()]
    }

    #[test]
    fn an_op_keeps_its_colour_whatever_else_is_there() {
        let a = device(&[("model/conv1/Conv2D", 8), ("model/dense/MatMul", 4)]);
        let b = device(&[("input", 1), ("model/dense/MatMul", 2), ("model/conv1/Conv2D", 2), ("loss", 1)]);
        for op in ["model/conv1/Conv2D", "model/dense/MatMul"] {
            assert_eq!(colour_of(&a, op), colour_of(&b, op), "{op}: the same colour in both");
            assert_eq!(colour_of(&a, op), OP_PALETTE[op_slot(op)], "{op}: its hash's colour");
        }
        assert_eq!(op_slot("model/conv1/Conv2D"), op_slot("model/conv1/Conv2D"));
    }

    #[test]
    fn the_largest_ops_have_different_colours_even_when_their_hashes_meet() {
        // Two names whose hashes pick the same colour.
        let names: Vec<String> = (0..100).map(|i| format!("layer_{i}/Conv2D")).collect();
        let first = &names[0];
        let twin = names.iter().skip(1).find(|n| op_slot(n) == op_slot(first)).unwrap();
        let d = device(&[(first, 64), (twin, 32)]);
        assert_ne!(colour_of(&d, first), colour_of(&d, twin));
        assert_eq!(colour_of(&d, first), OP_PALETTE[op_slot(first)], "the larger keeps its own");
        // As many large ops as colours: all different.
        let many: Vec<(&str, u64)> = names.iter().take(OP_PALETTE.len()).map(|n| (n.as_str(), 100)).collect();
        let d = device(&many);
        let mut seen: Vec<Color> = many.iter().map(|(n, _)| colour_of(&d, n)).collect();
        seen.sort_by_key(|c| format!("{c:?}"));
        seen.dedup();
        assert_eq!(seen.len(), OP_PALETTE.len());
    }
}
