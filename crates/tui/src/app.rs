//! The UI's state and how keys and updates change it. Drawing reads this state
//! (`crate::draw`); nothing here touches the terminal, so every key can be tested.

use crate::model::{Device, Status, Update};
use crate::tree;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::cell::Cell;
use std::collections::HashSet;

/// The views, in Tab order; number keys 1-6 reach them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum View {
    #[default]
    Overview,
    Nodes,
    Bins,
    Map,
    Allocations,
    Report,
    /// A job's ranks side by side (only with a job: `oomscope tui DIR`); key 0.
    Job,
}

impl View {
    pub const ALL: [View; 6] = [View::Overview, View::Nodes, View::Bins, View::Map, View::Allocations, View::Report];

    pub fn title(self) -> &'static str {
        match self {
            View::Overview => "Overview",
            View::Nodes => "Nodes",
            View::Bins => "Bins",
            View::Map => "Map",
            View::Allocations => "Allocations",
            View::Report => "Report",
            View::Job => "Job",
        }
    }

    pub fn index(self) -> usize {
        View::ALL.iter().position(|&v| v == self).unwrap_or(0)
    }
}

/// What a key asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Quit,
    /// Ctrl-C: quit as an interrupted program does (the command exits 130, as a shell
    /// reports SIGINT), where q quits normally.
    Interrupt,
    /// Esc: close what is open (help, a filter or search being typed, detail), then clear
    /// the view's filter or search, or quit when there is none.
    Back,
    Help,
    NextView,
    PrevView,
    Show(View),
    NextDevice,
    PrevDevice,
    Pause,
    Up,
    Down,
    Left,
    Right,
    PageUp,
    PageDown,
    Home,
    End,
    Sort,
    Tree,
    Enter,
    FilterStart,
    FilterInput(char),
    FilterBackspace,
    FilterDone,
    /// n and N: the next and previous match of the report's search or the map's filter.
    SearchNext,
    SearchPrev,
    /// c: the map coloured by op or by state.
    MapColours,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum NodeSort {
    #[default]
    Bytes,
    Count,
    Name,
}

impl NodeSort {
    pub fn name(self) -> &'static str {
        match self {
            NodeSort::Bytes => "bytes",
            NodeSort::Count => "count",
            NodeSort::Name => "name",
        }
    }
    fn next(self) -> Self {
        match self {
            NodeSort::Bytes => NodeSort::Count,
            NodeSort::Count => NodeSort::Name,
            NodeSort::Name => NodeSort::Bytes,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AllocSort {
    #[default]
    Size,
    Address,
    Op,
    Step,
}

impl AllocSort {
    pub fn name(self) -> &'static str {
        match self {
            AllocSort::Size => "size",
            AllocSort::Address => "address",
            AllocSort::Op => "op",
            AllocSort::Step => "step",
        }
    }
    fn next(self) -> Self {
        match self {
            AllocSort::Size => AllocSort::Address,
            AllocSort::Address => AllocSort::Op,
            AllocSort::Op => AllocSort::Step,
            AllocSort::Step => AllocSort::Size,
        }
    }
}

/// A scrolled list: the selected row and the first row shown. The offset is kept by the
/// drawing code (it knows the height) in a `Cell`, so drawing needs only `&App`.
#[derive(Clone, Debug, Default)]
pub struct List {
    pub selected: usize,
    pub offset: Cell<usize>,
    /// Rows the last drawing showed (for page up/down).
    pub page: Cell<usize>,
}

impl List {
    fn reset(&mut self) {
        self.selected = 0;
        self.offset.set(0);
    }

    fn clamp(&mut self, len: usize) {
        self.selected = self.selected.min(len.saturating_sub(1));
    }

    fn apply(&mut self, action: &Action, len: usize) {
        let page = self.page.get().max(1);
        let last = len.saturating_sub(1);
        let s = self.selected;
        self.selected = match action {
            Action::Up => s.saturating_sub(1),
            Action::Down => (s + 1).min(last),
            Action::PageUp => s.saturating_sub(page),
            Action::PageDown => (s + page).min(last),
            Action::Home => 0,
            Action::End => last,
            _ => s,
        };
    }

    /// The first row to draw so that the selection is visible in `height` rows.
    pub fn window(&self, len: usize, height: usize) -> usize {
        self.page.set(height);
        let mut offset = self.offset.get().min(len.saturating_sub(height));
        if self.selected < offset {
            offset = self.selected;
        } else if height > 0 && self.selected >= offset + height {
            offset = self.selected + 1 - height;
        }
        self.offset.set(offset);
        offset
    }
}

/// A filter being typed or applied (case-insensitive substring); the report's search is one
/// too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub text: String,
    pub editing: bool,
}

impl Filter {
    pub fn matches(&self, s: &str) -> bool {
        self.text.is_empty() || contains_ignore_case(s, &self.text)
    }
    pub fn is_active(&self) -> bool {
        !self.text.is_empty()
    }
}

fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    if haystack.is_ascii() && needle.is_ascii() {
        let (h, n) = (haystack.as_bytes(), needle.as_bytes());
        return n.len() <= h.len() && h.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n));
    }
    haystack.to_lowercase().contains(&needle.to_lowercase())
}

/// Where `needle` occurs in `haystack`, ignoring case, without overlaps: (first character,
/// characters) pairs, counted in characters because the report is drawn and scrolled by
/// character.
pub fn find_ignore_case(haystack: &str, needle: &str) -> Vec<(usize, usize)> {
    let mut found = Vec::new();
    if needle.is_empty() {
        return found;
    }
    if haystack.is_ascii() && needle.is_ascii() {
        // The common case, and the one a long report scans line by line: bytes are characters.
        let (h, n) = (haystack.as_bytes(), needle.as_bytes());
        let mut i = 0;
        while i + n.len() <= h.len() {
            if h[i..i + n.len()].eq_ignore_ascii_case(n) {
                found.push((i, n.len()));
                i += n.len();
            } else {
                i += 1;
            }
        }
        return found;
    }
    // One character for one: a fold that changed the length would shift the columns.
    let fold = |c: char| {
        let mut l = c.to_lowercase();
        match (l.next(), l.next()) {
            (Some(one), None) => one,
            _ => c,
        }
    };
    let h: Vec<char> = haystack.chars().map(fold).collect();
    let n: Vec<char> = needle.chars().map(fold).collect();
    let mut i = 0;
    while i + n.len() <= h.len() {
        if h[i..i + n.len()] == n[..] {
            found.push((i, n.len()));
            i += n.len();
        } else {
            i += 1;
        }
    }
    found
}

/// One row of the nodes view.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeRow {
    /// The full name (an op, or a scope prefix in the tree).
    pub name: String,
    /// What to print in the tree: the last part of the name.
    pub label: String,
    pub depth: usize,
    pub bytes: u64,
    pub count: u64,
    /// In the tree: Some(expanded) for a scope with children.
    pub expanded: Option<bool>,
}

/// The nodes view's settings.
#[derive(Clone, Debug, Default)]
pub struct NodesState {
    pub sort: NodeSort,
    pub tree: bool,
    pub filter: Filter,
    pub list: List,
    /// Scopes whose fold state differs from the default (roots open, the rest folded).
    pub toggled: HashSet<String>,
}

#[derive(Clone, Debug, Default)]
pub struct AllocState {
    pub sort: AllocSort,
    pub filter: Filter,
    pub list: List,
    pub detail: bool,
}

/// The memory map's cursor: a span index; the grid size of the last drawing lets the arrow
/// keys move by rows.
#[derive(Clone, Debug, Default)]
pub struct MapState {
    pub cursor: usize,
    pub grid: Cell<(u16, u16)>,
    /// Cells coloured by state (in use, waste, free) rather than by op.
    pub by_state: bool,
    /// Chunks whose op or shape matches stand out; the others are shaded.
    pub filter: Filter,
}

impl MapState {
    /// Whether span `i` of `d` is an in-use chunk the filter matches (any in-use chunk
    /// without a filter).
    pub fn matches(&self, d: &Device, i: usize) -> bool {
        d.spans.get(i).is_some_and(|s| s.is_used() && (self.filter.matches(d.op(s)) || self.shape_matches(d, i)))
    }

    fn shape_matches(&self, d: &Device, i: usize) -> bool {
        let shape = d.shape(&d.spans[i]);
        self.filter.is_active() && !shape.is_empty() && self.filter.matches(shape)
    }
}

/// A device with what the views derive from it.
#[derive(Clone, Debug, Default)]
pub struct Slot {
    pub device: Device,
    /// An update that arrived while paused.
    pub held: Option<Box<Device>>,
    pub held_count: u64,
    /// The nodes view's rows (sorted, filtered, folded).
    pub node_rows: Vec<NodeRow>,
    /// The allocations view's rows: indices of in-use spans, filtered and sorted.
    pub alloc_rows: Vec<u32>,
    /// Byte offsets of the report's lines (a report of a million chunks scrolls without
    /// rescanning it).
    pub report_lines: Vec<usize>,
    /// What the header says of how this device came on screen (`the next process after
    /// pid 4242 ended`).
    pub note: Option<String>,
}

/// The whole UI state.
#[derive(Debug, Default)]
pub struct App {
    pub devices: Vec<Slot>,
    pub current: usize,
    pub view: View,
    pub help: bool,
    pub paused: bool,
    pub quit: bool,
    /// The status bar's last message.
    pub message: Option<String>,
    /// What the empty screen says while no device has arrived: `waiting for ... in DIR`.
    pub waiting: Option<String>,
    pub nodes: NodesState,
    pub allocs: AllocState,
    pub bins: List,
    pub map: MapState,
    /// The report's first line on screen (`selected` is the top line).
    pub report: List,
    /// The report's first column on screen (its lines are wider than most terminals).
    pub report_column: usize,
    /// Columns the report showed last (kept by the drawing code, to bring a match into view).
    pub report_width: Cell<usize>,
    /// The report's search (`/` in the Report view); its matches are highlighted.
    pub search: Filter,
    /// The match the search last went to: (line, first character).
    pub report_match: Option<(usize, usize)>,
    /// Ctrl-C ended the UI rather than q or Esc.
    pub interrupted: bool,
    /// Draw without colour (`--color never`, NO_COLOR): characters and modifiers only.
    pub monochrome: bool,
    /// The user named the process to follow: stay on it when it ends. Otherwise, when the
    /// device on screen has ended, a device that appears next (the user ran the program
    /// again) is shown in its place.
    pub pinned: bool,
    /// While paused: (the device on screen, which ended, and the first device that started
    /// since), followed on resume.
    successor: Option<(usize, usize)>,
    /// A job's failure (`oomscope tui DIR`): its devices are its ranks, in `job.ranks` order.
    pub job: Option<oomscope_format::job::JobReport>,
    /// The rank under the cursor in the Job view.
    pub job_list: List,
}

impl App {
    /// An app showing `devices` (possibly none yet: a live source may still connect).
    pub fn new(devices: Vec<Device>) -> App {
        let mut app = App::default();
        for (id, d) in devices.into_iter().enumerate() {
            app.set_device(id, d);
        }
        app
    }

    /// An app showing a job's ranks (`devices`, one a rank in `job.ranks` order), the Job
    /// view first, the cursor on the rank that failed first.
    pub fn for_job(job: oomscope_format::job::JobReport, devices: Vec<Device>) -> App {
        let mut app = App::new(devices);
        let first = job.first_failure.as_ref().and_then(|f| job.ranks.iter().position(|r| r.rank == f.rank));
        app.job_list.selected = first.unwrap_or(0);
        app.current = first.unwrap_or(0).min(app.devices.len().saturating_sub(1));
        app.job = Some(job);
        app.view = View::Job;
        app
    }

    /// The views in Tab order: the Job view first when there is a job.
    pub fn views(&self) -> Vec<View> {
        let mut v = Vec::with_capacity(7);
        if self.job.is_some() {
            v.push(View::Job);
        }
        v.extend(View::ALL);
        v
    }

    /// The device on screen.
    pub fn device(&self) -> Option<&Device> {
        self.devices.get(self.current).map(|s| &s.device)
    }

    pub fn slot(&self) -> Option<&Slot> {
        self.devices.get(self.current)
    }

    /// True while some source can still send updates.
    pub fn is_live(&self) -> bool {
        self.devices.iter().any(|s| s.device.status.is_live() || s.held.is_some())
    }

    /// Applies a change from a data source.
    pub fn apply(&mut self, update: Update) {
        match update {
            Update::Device { id, device } => {
                if self.paused && id < self.devices.len() {
                    let slot = &mut self.devices[id];
                    slot.held = Some(device);
                    slot.held_count += 1;
                } else {
                    let new = id >= self.devices.len();
                    self.receive(id, *device);
                    if new {
                        self.arrived(id);
                    }
                }
            }
            Update::Status { id, status } => {
                if let Some(slot) = self.devices.get_mut(id) {
                    if let Some(held) = slot.held.as_mut() {
                        held.status = status.clone();
                    }
                    slot.device.status = status;
                }
            }
            Update::Message(m) => self.message = Some(m),
        }
    }

    /// Device `id` is now `device`, shown at once (live, or on resume with what was held):
    /// the status bar says so when the one on screen ends.
    fn receive(&mut self, id: usize, device: Device) {
        let was_live = self.devices.get(id).is_some_and(|s| s.device.status.is_live());
        let ended = was_live && matches!(device.status, Status::Disconnected(_));
        self.set_device(id, device);
        if ended && id == self.current {
            self.ended();
        }
    }

    /// Device `id` appeared: when the one on screen has ended and the user did not name it,
    /// the new one takes its place (the user ran the program again). While paused the screen
    /// stays, the status bar says so, and resuming moves to it.
    fn arrived(&mut self, id: usize) {
        if self.pinned || id == self.current || self.devices.len() < 2 {
            return;
        }
        let Some(current) = self.devices.get(self.current) else { return };
        // While paused the frame that says it ended may be held, not yet on screen.
        let status = current.held.as_ref().map_or(&current.device.status, |h| &h.status);
        if !matches!(status, Status::Disconnected(_)) {
            return;
        }
        if self.paused {
            let new = short_origin(&self.devices[id].device);
            self.message = Some(format!("{new} started publishing: [ and ] show it"));
            // The first to start is the one to follow; a later one is the user's to pick.
            self.successor.get_or_insert((self.current, id));
            return;
        }
        self.follow(id);
    }

    /// Shows device `id` in place of the one on screen, which ended before `id` started.
    fn follow(&mut self, id: usize) {
        let Some(current) = self.devices.get(self.current) else { return };
        let (old, new) = (short_origin(&current.device), short_origin(&self.devices[id].device));
        self.switch_to(id);
        self.devices[id].note = Some(format!("the next process after {old} ended"));
        self.message = Some(format!("{old} ended; now following {new}, which started since · [ shows {old}"));
    }

    /// The device on screen ended (its feed closed).
    fn ended(&mut self) {
        let Some(slot) = self.devices.get(self.current) else { return };
        let who = short_origin(&slot.device);
        self.message = Some(if self.pinned {
            format!("{who} ended: its last state stays on screen")
        } else {
            format!("{who} ended: its last state stays until another process publishes")
        });
    }

    fn set_device(&mut self, id: usize, device: Device) {
        while self.devices.len() <= id {
            self.devices.push(Slot::default());
        }
        let slot = &mut self.devices[id];
        slot.report_lines = line_starts(device.report.as_deref().unwrap_or(""));
        slot.device = device;
        self.derive(id);
        if id == self.current {
            self.clamp();
        }
    }

    /// Recomputes the rows of device `id` after its data or a view setting changed.
    fn derive(&mut self, id: usize) {
        let Some(slot) = self.devices.get_mut(id) else { return };
        slot.node_rows = node_rows(&slot.device, &self.nodes);
        slot.alloc_rows = alloc_rows(&slot.device, &self.allocs);
    }

    fn derive_all(&mut self) {
        for id in 0..self.devices.len() {
            self.derive(id);
        }
        self.clamp();
    }

    fn clamp(&mut self) {
        let Some(slot) = self.devices.get(self.current) else { return };
        let (nodes, allocs, spans, bins) =
            (slot.node_rows.len(), slot.alloc_rows.len(), slot.device.spans.len(), slot.device.bins.len());
        self.nodes.list.clamp(nodes);
        self.allocs.list.clamp(allocs);
        self.bins.clamp(bins);
        self.map.cursor = self.map.cursor.min(spans.saturating_sub(1));
    }

    /// Turns a key into an action, given what is being edited.
    pub fn key(&self, key: KeyEvent) -> Option<Action> {
        if key.kind == KeyEventKind::Release {
            return None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && key.code == KeyCode::Char('c') {
            return Some(Action::Interrupt);
        }
        if ctrl && key.code == KeyCode::Char('d') {
            return Some(Action::Quit);
        }
        if self.editing() {
            return match key.code {
                KeyCode::Esc => Some(Action::Back),
                KeyCode::Enter => Some(Action::FilterDone),
                KeyCode::Backspace => Some(Action::FilterBackspace),
                KeyCode::Char(c) if !ctrl => Some(Action::FilterInput(c)),
                KeyCode::Up => Some(Action::Up),
                KeyCode::Down => Some(Action::Down),
                _ => None,
            };
        }
        if self.help {
            // Any key closes the help; q still quits.
            return Some(if key.code == KeyCode::Char('q') { Action::Quit } else { Action::Back });
        }
        Some(match key.code {
            KeyCode::Char('q') => Action::Quit,
            KeyCode::Esc => Action::Back,
            KeyCode::Char('?') | KeyCode::F(1) => Action::Help,
            KeyCode::Tab => Action::NextView,
            KeyCode::BackTab => Action::PrevView,
            KeyCode::Char(c @ '1'..='6') => Action::Show(View::ALL[c as usize - '1' as usize]),
            KeyCode::Char('0') if self.job.is_some() => Action::Show(View::Job),
            KeyCode::Char(']') => Action::NextDevice,
            KeyCode::Char('[') => Action::PrevDevice,
            KeyCode::Char(' ') => Action::Pause,
            KeyCode::Up | KeyCode::Char('k') => Action::Up,
            KeyCode::Down | KeyCode::Char('j') => Action::Down,
            KeyCode::Left | KeyCode::Char('h') => Action::Left,
            KeyCode::Right | KeyCode::Char('l') => Action::Right,
            KeyCode::PageUp => Action::PageUp,
            KeyCode::PageDown => Action::PageDown,
            KeyCode::Home | KeyCode::Char('g') => Action::Home,
            KeyCode::End | KeyCode::Char('G') => Action::End,
            KeyCode::Char('s') => Action::Sort,
            KeyCode::Char('t') => Action::Tree,
            KeyCode::Char('c') => Action::MapColours,
            KeyCode::Char('/') => Action::FilterStart,
            KeyCode::Char('n') => Action::SearchNext,
            KeyCode::Char('N') => Action::SearchPrev,
            KeyCode::Enter => Action::Enter,
            _ => return None,
        })
    }

    /// A filter or the report's search is being typed: keys are text.
    pub fn editing(&self) -> bool {
        self.nodes.filter.editing || self.allocs.filter.editing || self.search.editing || self.map.filter.editing
    }

    /// Applies a key.
    pub fn handle_key(&mut self, key: KeyEvent) {
        if let Some(action) = self.key(key) {
            self.update(action);
        }
    }

    /// Applies an action.
    pub fn update(&mut self, action: Action) {
        // A message answers the key before; left up, it would speak of another view or
        // state ("nothing to pause" beside PAUSED). Actions with something to say set it.
        self.message = None;
        match action {
            Action::Quit => self.quit = true,
            Action::Interrupt => {
                self.quit = true;
                self.interrupted = true;
            }
            Action::Back => self.back(),
            Action::Help => self.help = !self.help,
            Action::NextView | Action::PrevView => {
                let views = self.views();
                let at = views.iter().position(|&v| v == self.view).unwrap_or(0);
                let n = views.len();
                self.show(views[if action == Action::NextView { (at + 1) % n } else { (at + n - 1) % n }]);
            }
            Action::Show(v) => self.show(v),
            Action::NextDevice => self.switch_device(true),
            Action::PrevDevice => self.switch_device(false),
            Action::Pause => self.pause(),
            // A new filter replaces the one applied (the one Enter on a node set, say):
            // typing after it would otherwise narrow a filter the user may not see. Every view
            // has one, so that what is typed after `/` is never taken for keys: the overview's
            // is the Nodes view's (the ops it ranks), the bins' the Allocations view's (the
            // chunks they hold).
            Action::FilterStart => match self.view {
                View::Nodes | View::Overview => {
                    self.show(View::Nodes);
                    self.nodes.filter = Filter { text: String::new(), editing: true };
                    self.nodes.list.reset();
                    self.derive_all();
                }
                View::Allocations | View::Bins => {
                    self.show(View::Allocations);
                    self.allocs.filter = Filter { text: String::new(), editing: true };
                    self.allocs.list.reset();
                    self.allocs.detail = false;
                    self.derive_all();
                }
                View::Map => self.map.filter = Filter { text: String::new(), editing: true },
                View::Report => {
                    self.search = Filter { text: String::new(), editing: true };
                    self.report_match = None;
                }
                View::Job => self.message = Some("Enter opens the rank under the cursor; / filters its views".into()),
            },
            Action::FilterInput(c) => self.edit_filter(|t| t.push(c)),
            Action::FilterBackspace => self.edit_filter(|t| {
                t.pop();
            }),
            Action::FilterDone => {
                self.nodes.filter.editing = false;
                self.allocs.filter.editing = false;
                if self.map.filter.editing {
                    self.map.filter.editing = false;
                    self.map_find(true, false);
                }
                if self.search.editing {
                    self.search.editing = false;
                    // From the top line on screen, as a pager searches.
                    self.find(self.report.selected, true, false);
                }
            }
            Action::SearchNext => self.search_again(true),
            Action::SearchPrev => self.search_again(false),
            Action::Sort => self.sort(),
            Action::Tree => {
                if self.view == View::Nodes {
                    self.nodes.tree = !self.nodes.tree;
                    self.nodes.list.reset();
                    self.derive_all();
                } else {
                    self.message = Some("t switches the Nodes view (2) between a list and a tree".into());
                }
            }
            Action::Enter => self.enter(),
            Action::MapColours => self.map_colours(),
            Action::Up
            | Action::Down
            | Action::Left
            | Action::Right
            | Action::PageUp
            | Action::PageDown
            | Action::Home
            | Action::End => self.navigate(&action),
        }
    }

    fn back(&mut self) {
        if self.help {
            self.help = false;
        } else if self.search.editing {
            self.end_search();
        } else if self.map.filter.editing || (self.view == View::Map && self.map.filter.is_active()) {
            self.map.filter = Filter::default();
        } else if self.editing() {
            // Esc while typing drops the filter.
            let f = if self.nodes.filter.editing { &mut self.nodes.filter } else { &mut self.allocs.filter };
            *f = Filter::default();
            self.derive_all();
        } else if self.view == View::Allocations && self.allocs.detail {
            self.allocs.detail = false;
        } else if self.view == View::Allocations && self.allocs.filter.is_active() {
            // A filter applied (typed, or set by Enter on a node) goes before the UI does.
            self.allocs.filter = Filter::default();
            self.allocs.list.reset();
            self.derive_all();
        } else if self.view == View::Nodes && self.nodes.filter.is_active() {
            self.nodes.filter = Filter::default();
            self.nodes.list.reset();
            self.derive_all();
        } else if self.view == View::Report && self.search.is_active() {
            self.end_search();
        } else {
            self.quit = true;
        }
    }

    fn end_search(&mut self) {
        self.search = Filter::default();
        self.report_match = None;
    }

    fn show(&mut self, view: View) {
        self.view = view;
        self.message = None;
    }

    fn switch_device(&mut self, next: bool) {
        let n = self.devices.len();
        if n < 2 {
            self.message = Some("one device: [ and ] switch between devices when several are attached".into());
            return;
        }
        self.switch_to(if next { (self.current + 1) % n } else { (self.current + n - 1) % n });
    }

    fn switch_to(&mut self, id: usize) {
        self.current = id;
        self.nodes.list.reset();
        self.allocs.list.reset();
        self.bins.reset();
        self.report.reset();
        self.report_column = 0;
        // The match was in the other device's report.
        self.report_match = None;
        self.map.cursor = 0;
    }

    fn pause(&mut self) {
        if !self.paused && !self.is_live() {
            self.message = Some("nothing to pause: this state does not change".into());
            return;
        }
        self.paused = !self.paused;
        if self.paused {
            self.message = Some("paused: updates are held until space resumes".into());
        } else {
            // As if the held frames had come now: the status bar says the one on screen
            // ended, and a process that started after it takes its place.
            for id in 0..self.devices.len() {
                if let Some(d) = self.devices[id].held.take() {
                    self.devices[id].held_count = 0;
                    self.receive(id, *d);
                }
            }
            if let Some((from, to)) = self.successor.take() {
                // Unless the user moved to another device meanwhile ([ and ]).
                let ended = self.devices.get(from).is_some_and(|s| matches!(s.device.status, Status::Disconnected(_)));
                if self.current == from && ended && to < self.devices.len() {
                    self.follow(to);
                }
            }
        }
    }

    fn edit_filter(&mut self, edit: impl FnOnce(&mut String)) {
        if self.map.filter.editing {
            // The matching chunks stand out as the text is typed; Enter goes to the first.
            edit(&mut self.map.filter.text);
            return;
        }
        if self.search.editing {
            // Matches are highlighted as the text is typed; Enter goes to the first.
            edit(&mut self.search.text);
            self.report_match = None;
            return;
        }
        if self.nodes.filter.editing {
            edit(&mut self.nodes.filter.text);
            self.nodes.list.reset();
        } else if self.allocs.filter.editing {
            edit(&mut self.allocs.filter.text);
            self.allocs.list.reset();
        }
        self.derive_all();
    }

    fn sort(&mut self) {
        match self.view {
            View::Nodes => {
                self.nodes.sort = self.nodes.sort.next();
                self.message = Some(format!("nodes sorted by {}", self.nodes.sort.name()));
            }
            View::Allocations => {
                self.allocs.sort = self.allocs.sort.next();
                self.message = Some(format!("allocations sorted by {}", self.allocs.sort.name()));
            }
            _ => {
                self.message = Some("s sorts the Nodes (2) and Allocations (5) views".into());
                return;
            }
        }
        self.derive_all();
    }

    fn enter(&mut self) {
        if self.view == View::Job {
            // The rank under the cursor, in the views of one device.
            let n = self.job.as_ref().map_or(0, |j| j.ranks.len());
            if self.job_list.selected < n.min(self.devices.len()) {
                self.switch_to(self.job_list.selected);
                self.show(View::Overview);
            }
            return;
        }
        let Some(slot) = self.devices.get(self.current) else { return };
        match self.view {
            View::Nodes => {
                let Some(row) = slot.node_rows.get(self.nodes.list.selected) else { return };
                if row.expanded.is_some() {
                    let name = row.name.clone();
                    self.toggle_fold(name);
                } else {
                    // A node: its allocations.
                    self.allocs.filter = Filter { text: row.name.clone(), editing: false };
                    self.allocs.list.reset();
                    self.allocs.detail = false;
                    self.show(View::Allocations);
                    self.derive_all();
                }
            }
            View::Allocations => self.allocs.detail = !self.allocs.detail,
            View::Map => {
                // The chunk under the cursor, in the allocations view with its details.
                let Some(span) = slot.device.spans.get(self.map.cursor) else { return };
                if !span.is_used() || span.chunks != 1 {
                    self.message = Some("no single allocation under the cursor".into());
                    return;
                }
                self.allocs.filter = Filter::default();
                self.derive_all();
                let idx = self.map.cursor as u32;
                if let Some(pos) = self.devices[self.current].alloc_rows.iter().position(|&i| i == idx) {
                    self.allocs.list.selected = pos;
                }
                self.allocs.detail = true;
                self.show(View::Allocations);
            }
            _ => {}
        }
    }

    /// c: the map by op or by state.
    fn map_colours(&mut self) {
        if self.view != View::Map {
            self.message = Some("c colours the Map (4) by op or by state".into());
            return;
        }
        self.map.by_state = !self.map.by_state;
        let what = if self.map.by_state { "state (in use, waste, free)" } else { "op" };
        self.message = Some(if self.monochrome {
            format!("map coloured by {what} when colour is on; without colour, characters show the state")
        } else {
            format!("map coloured by {what} · c switches back")
        });
    }

    /// The map's next (or previous) chunk that its filter matches, from the cursor (skipping
    /// the cursor's own chunk when `skip`), wrapping around once.
    fn map_find(&mut self, forward: bool, skip: bool) {
        let text = self.map.filter.text.clone();
        if text.is_empty() {
            return;
        }
        let Some(d) = self.device() else { return };
        let n = d.spans.len();
        let (mut count, mut bytes) = (0u64, 0u64);
        for i in 0..n {
            if self.map.matches(d, i) {
                count += 1;
                bytes += d.spans[i].in_use;
            }
        }
        if count == 0 {
            self.message = Some(format!("no chunk of an op or shape matching \"{text}\""));
            return;
        }
        let from = self.map.cursor.min(n.saturating_sub(1));
        let hit = (0..n)
            .map(|k| {
                let k = k + usize::from(skip);
                if forward { (from + k) % n } else { (from + n * 2 - k) % n }
            })
            .find(|&i| self.map.matches(d, i));
        if let Some(i) = hit {
            self.map.cursor = i;
        }
        self.message = Some(format!(
            "\"{text}\": {count} chunk(s), {} · n N next/previous · Esc clears",
            crate::fmt::bytes(bytes)
        ));
    }

    /// n or N: the next or previous match after the one last found (or the top line).
    fn search_again(&mut self, forward: bool) {
        if self.view == View::Map && self.map.filter.is_active() {
            self.map_find(forward, true);
            return;
        }
        if self.view != View::Report {
            self.message = Some(
                "n and N go to the next and previous match of a search in the Report (6) or a filter in the Map (4)"
                    .into(),
            );
            return;
        }
        if !self.search.is_active() {
            self.message = Some("/ searches the report; then n and N go to the next and previous match".into());
            return;
        }
        let from = self.report_match.map_or(self.report.selected, |(line, _)| line);
        self.find(from, forward, true);
    }

    /// Goes to the first line with a match from line `from` on (or back), skipping `from`
    /// itself when `skip`; wraps around the report once.
    fn find(&mut self, from: usize, forward: bool, skip: bool) {
        let needle = self.search.text.clone();
        if needle.is_empty() {
            return;
        }
        let Some(slot) = self.devices.get(self.current) else { return };
        let Some(report) = slot.device.report.as_deref() else {
            self.message = Some("no report to search".into());
            return;
        };
        let starts = &slot.report_lines;
        let total = starts.len();
        if total == 0 {
            return;
        }
        let line_text = |i: usize| {
            let end = starts.get(i + 1).map_or(report.len(), |&e| e - 1);
            report[starts[i]..end.max(starts[i])].trim_end_matches('\r')
        };
        let from = from.min(total - 1);
        let order = (0..total).map(|k| {
            let k = k + usize::from(skip);
            if forward { (from + k) % total } else { (from + total * 2 - k) % total }
        });
        let mut wrapped = false;
        let mut hit = None;
        for i in order {
            if (forward && i < from) || (!forward && i > from) {
                wrapped = true;
            }
            if let Some(&(col, len)) = find_ignore_case(line_text(i), &needle).first() {
                hit = Some((i, col, len));
                break;
            }
        }
        let Some((line, col, len)) = hit else {
            self.message = Some(format!("no match for \"{needle}\" in the report"));
            return;
        };
        self.report_match = Some((line, col));
        // Scroll only when the match is off screen, as a pager does.
        let page = self.report.page.get().max(1);
        let max_top = total.saturating_sub(page);
        let top = self.report.selected.min(max_top);
        if line < top || line >= top + page {
            self.report.selected = line.min(max_top);
        }
        let width = self.report_width.get().max(1);
        if col < self.report_column || col + len > self.report_column + width {
            self.report_column = if col + len <= width { 0 } else { col / REPORT_STEP * REPORT_STEP };
        }
        // The wrap first: the status bar may be too narrow for the whole line.
        let wrap = match (wrapped, forward) {
            (false, _) => "",
            (true, true) => "wrapped to the top: ",
            (true, false) => "wrapped to the bottom: ",
        };
        self.message = Some(format!("{wrap}\"{needle}\" on line {} · n next · N previous", line + 1));
    }

    fn toggle_fold(&mut self, scope: String) {
        if !self.nodes.toggled.remove(&scope) {
            self.nodes.toggled.insert(scope);
        }
        self.derive_all();
    }

    fn navigate(&mut self, action: &Action) {
        if self.view == View::Job {
            let n = self.job.as_ref().map_or(0, |j| j.ranks.len());
            self.job_list.apply(action, n);
            return;
        }
        let Some(slot) = self.devices.get(self.current) else { return };
        match self.view {
            View::Overview | View::Job => {}
            View::Nodes => {
                let rows = &slot.node_rows;
                let sel = self.nodes.list.selected;
                match (action, rows.get(sel)) {
                    (Action::Right, Some(row)) if row.expanded == Some(false) => {
                        let name = row.name.clone();
                        self.toggle_fold(name);
                    }
                    (Action::Left, Some(row)) if row.expanded == Some(true) => {
                        let name = row.name.clone();
                        self.toggle_fold(name);
                    }
                    (Action::Left, Some(row)) if row.depth > 0 => {
                        // To the parent scope.
                        if let Some(p) = rows[..sel].iter().rposition(|r| r.depth < row.depth) {
                            self.nodes.list.selected = p;
                        }
                    }
                    (Action::Left | Action::Right, _) => {}
                    _ => self.nodes.list.apply(action, rows.len()),
                }
            }
            View::Bins => self.bins.apply(action, slot.device.bins.len()),
            View::Allocations => self.allocs.list.apply(action, slot.alloc_rows.len()),
            View::Report => match action {
                Action::Left => self.report_column = self.report_column.saturating_sub(REPORT_STEP),
                Action::Right => self.report_column = (self.report_column + REPORT_STEP).min(1000),
                _ => {
                    // `selected` is the top line: the report scrolls rather than selects.
                    let max_top = slot.report_lines.len().saturating_sub(self.report.page.get().max(1));
                    self.report.apply(action, max_top + 1);
                }
            },
            View::Map => self.map.cursor = map_move(&slot.device, self.map.cursor, action, self.map.grid.get()),
        }
    }
}

/// `pid 4242` of `pid 4242: python train.py`: how messages name a process.
fn short_origin(d: &Device) -> String {
    let o = d.origin.split(':').next().unwrap_or("").trim();
    if o.is_empty() { d.name.clone() } else { o.to_string() }
}

/// Columns the report moves sideways per key.
pub const REPORT_STEP: usize = 20;

/// Where each line of `text` starts.
fn line_starts(text: &str) -> Vec<usize> {
    if text.is_empty() {
        return Vec::new();
    }
    let mut starts = vec![0];
    starts.extend(text.match_indices('\n').map(|(i, _)| i + 1).filter(|&i| i < text.len()));
    starts
}

/// The nodes view's rows for `device` under the view's settings.
pub fn node_rows(device: &Device, st: &NodesState) -> Vec<NodeRow> {
    let nodes: Vec<&oomscope_format::NodeUsage> = device.nodes.iter().filter(|n| st.filter.matches(&n.op)).collect();
    if st.tree {
        return tree::rows(&nodes, st.sort, &st.toggled, st.filter.is_active());
    }
    let mut rows: Vec<NodeRow> = nodes
        .iter()
        .map(|n| NodeRow {
            name: n.op.clone(),
            label: n.op.clone(),
            depth: 0,
            bytes: n.bytes,
            count: n.count,
            expanded: None,
        })
        .collect();
    sort_rows(&mut rows, st.sort);
    rows
}

/// Sorts in place; ties keep the source's order (stable), which is TF's.
pub fn sort_rows(rows: &mut [NodeRow], sort: NodeSort) {
    rows.sort_by(|a, b| cmp_rows(a, b, sort));
}

/// The order of the nodes view: bytes and count descending, names ascending.
pub fn cmp_rows(a: &NodeRow, b: &NodeRow, sort: NodeSort) -> std::cmp::Ordering {
    match sort {
        NodeSort::Bytes => b.bytes.cmp(&a.bytes),
        NodeSort::Count => b.count.cmp(&a.count).then(b.bytes.cmp(&a.bytes)),
        NodeSort::Name => a.name.cmp(&b.name),
    }
}

/// The allocations view's rows: in-use chunks (and merged runs), filtered by op or shape,
/// sorted.
pub fn alloc_rows(device: &Device, st: &AllocState) -> Vec<u32> {
    // Match the (few) names once, not the (many) spans.
    let op_ok: Vec<bool> = device.ops.iter().map(|o| st.filter.matches(o)).collect();
    let shape_ok: Vec<bool> =
        device.shapes.iter().map(|s| st.filter.is_active() && !s.is_empty() && st.filter.matches(s)).collect();
    let mut rows: Vec<u32> = device
        .spans
        .iter()
        .enumerate()
        .filter(|(_, s)| {
            s.is_used()
                && (!st.filter.is_active()
                    || op_ok.get(s.op as usize).copied().unwrap_or(false)
                    || shape_ok.get(s.shape as usize).copied().unwrap_or(false))
        })
        .map(|(i, _)| i as u32)
        .collect();
    let spans = &device.spans;
    let span = |i: u32| &spans[i as usize];
    match st.sort {
        AllocSort::Size => rows.sort_by(|&a, &b| span(b).in_use.cmp(&span(a).in_use).then(a.cmp(&b))),
        AllocSort::Address => {} // spans are in address order already
        AllocSort::Op => rows.sort_by(|&a, &b| device.op(span(a)).cmp(device.op(span(b))).then(a.cmp(&b))),
        AllocSort::Step => rows.sort_by(|&a, &b| span(b).step.cmp(&span(a).step).then(a.cmp(&b))),
    }
    rows
}

/// Where the map's layout puts things: every region starts on a fresh cell; each cell
/// stands for `bytes_per_cell` bytes of one region.
#[derive(Clone, Debug, PartialEq)]
pub struct MapLayout {
    pub cols: usize,
    pub bytes_per_cell: f64,
    /// First cell of each region.
    pub region_cell: Vec<usize>,
    pub cells: usize,
}

impl MapLayout {
    /// A layout of `device`'s regions in a grid of `cols` × `rows` cells.
    pub fn new(device: &Device, cols: u16, rows: u16) -> MapLayout {
        let cols = cols.max(1) as usize;
        let capacity = (cols * rows.max(1) as usize).max(1);
        let total: u64 = device.regions.iter().map(|r| r.size).sum();
        // Each region may waste up to one cell at its end; leave room for that.
        let usable = capacity.saturating_sub(device.regions.len()).max(1);
        let bytes_per_cell = (total as f64 / usable as f64).max(1.0);
        let mut region_cell = Vec::with_capacity(device.regions.len());
        let mut cell = 0;
        for r in &device.regions {
            region_cell.push(cell);
            cell += ((r.size as f64 / bytes_per_cell).ceil() as usize).max(1);
        }
        MapLayout { cols, bytes_per_cell, region_cell, cells: cell }
    }

    /// The region holding span `i`.
    pub fn region_of(device: &Device, i: usize) -> Option<usize> {
        let r = device.regions.partition_point(|r| r.spans.end <= i);
        (r < device.regions.len() && device.regions[r].spans.contains(&i)).then_some(r)
    }

    /// The cell where span `i` of `device` starts.
    pub fn cell_of(&self, device: &Device, i: usize) -> usize {
        let Some(r) = MapLayout::region_of(device, i) else { return 0 };
        let off = device.spans[i].address.saturating_sub(device.regions[r].address);
        self.region_cell[r] + (off as f64 / self.bytes_per_cell) as usize
    }

    /// The span whose bytes cover the start of `cell`.
    pub fn span_at(&self, device: &Device, cell: usize) -> Option<usize> {
        let r = self.region_cell.partition_point(|&c| c <= cell).checked_sub(1)?;
        let region = &device.regions[r];
        let addr = region.address + ((cell - self.region_cell[r]) as f64 * self.bytes_per_cell) as u64;
        let spans = &device.spans[region.spans.clone()];
        if spans.is_empty() {
            return None;
        }
        let k = spans.partition_point(|s| s.address <= addr).saturating_sub(1);
        Some(region.spans.start + k)
    }
}

fn map_move(device: &Device, cursor: usize, action: &Action, grid: (u16, u16)) -> usize {
    let n = device.spans.len();
    if n == 0 {
        return 0;
    }
    let layout = MapLayout::new(device, grid.0, grid.1);
    let rows_by = |rows: isize| {
        let cell = layout.cell_of(device, cursor) as isize + rows * layout.cols as isize;
        let cell = cell.clamp(0, layout.cells.saturating_sub(1) as isize) as usize;
        let to = layout.span_at(device, cell).unwrap_or(cursor);
        // Always move: a chunk wider than a row would otherwise hold the cursor.
        if to == cursor { if rows > 0 { (cursor + 1).min(n - 1) } else { cursor.saturating_sub(1) } } else { to }
    };
    match action {
        Action::Left => cursor.saturating_sub(1),
        Action::Right => (cursor + 1).min(n - 1),
        Action::Up => rows_by(-1),
        Action::Down => rows_by(1),
        Action::PageUp => rows_by(-(grid.1.max(2) as isize / 2)),
        Action::PageDown => rows_by(grid.1.max(2) as isize / 2),
        Action::Home => 0,
        Action::End => n - 1,
        _ => cursor,
    }
}
