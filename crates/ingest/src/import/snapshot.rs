//! A PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`, a pickle) read once into
//! typed data: its segments with their blocks, each device's trace, the allocator's
//! recorded settings, and the call stacks, named on demand. The schema is spelled here and
//! nowhere else; `oomscope import` makes a dump of it (`import::torch_snapshot`), `oomscope
//! replay` feeds its trace through the caching allocator (`oomscope_sim::torch_replay`).
//!
//! What reading refuses, with the file named: what is not a pickle, a pickle that holds no
//! dict (PyTorch 2.x) or list of segments (before), a dict without `segments`, a segment
//! without `address` or `total_size`, a block without `size`, a trace entry without
//! `action`, and a snapshot that would build more than its budget
//! ([`torch_frames::budget`]) or visit more than [`VISIT_BUDGET`] blocks, frames and events.

use super::torch_frames::{self, Stacks};
use crate::pickle::{self, Value};
use oomscope_format::{Frame, InputError, Kind};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Blocks, frames and trace entries visited before a snapshot is called too large: a pickle
/// that shares one list many times must not make the walk explode. A frames list shared by
/// many blocks is read, and counted, once.
pub const VISIT_BUDGET: u64 = 50_000_000;

/// Which trace entries' stacks are read: every entry's (an import names every event), or
/// the allocations' and OOMs' alone (a replay names what it allocates).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryStacks {
    All,
    Allocations,
}

/// A snapshot, read.
#[derive(Debug)]
pub struct Snapshot {
    pub path: PathBuf,
    /// PyTorch before 2.0 pickled a list of segments alone: no traces, no settings.
    pub list_form: bool,
    /// Every device's segments, in the pickle's order.
    pub segments: Vec<Segment>,
    /// Each device's trace, by device number; a trace the pickle shares between devices is
    /// read once.
    pub traces: Vec<Rc<Vec<Entry>>>,
    /// `allocator_settings` (PyTorch 2.4 and later).
    pub settings: Option<RecordedSettings>,
    stacks: Stacks,
    /// By stack number: what it names, once named.
    named: Vec<Option<Named>>,
    /// Distinct stacks named, in the order they were first asked for.
    frames: Vec<Vec<Frame>>,
    visits: u64,
}

/// A stack, named: the node reports rank it by, what the allocation is for, and its number
/// among the stacks named (`Snapshot::stack_frames`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named {
    pub node: Option<String>,
    pub kind: Kind,
    pub index: u32,
}

/// A segment: memory the allocator took from the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    pub device: i64,
    pub address: u64,
    pub total_size: u64,
    pub stream: Option<u64>,
    /// `segment_type`: `small` or `large` pool, when said.
    pub small: Option<bool>,
    /// `is_expandable`.
    pub expandable: bool,
    pub blocks: Vec<Block>,
}

/// A block of a segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    pub size: u64,
    pub address: Option<u64>,
    pub requested: Option<u64>,
    pub state: BlockState,
    /// Its frames' stack (older snapshots keep them in the block's history).
    pub stack: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockState {
    /// `active_allocated`.
    Allocated,
    /// `active_pending_free`: freed, still in use on another stream.
    PendingFree,
    /// Free (`inactive`), or a state this reader does not know.
    Inactive,
}

/// What a trace entry did (`action`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    /// Before PyTorch 2.1: a free (requested and completed at once).
    Free,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
    /// An action this reader does not know (`snapshot`, later ones): skipped by readers.
    Other,
}

/// One trace entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Entry {
    pub action: Action,
    pub addr: Option<u64>,
    pub size: Option<u64>,
    pub stream: Option<u64>,
    /// `time_us`, in nanoseconds (0 when absent or negative).
    pub t_ns: u64,
    /// An `oom`'s free memory on the device.
    pub device_free: Option<u64>,
    /// Its frames' stack (when the reader asked for it: [`EntryStacks`]), and whether it
    /// had frames at all.
    pub stack: Option<u32>,
    pub framed: bool,
}

/// `allocator_settings` as recorded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RecordedSettings {
    pub max_split_size: Option<i128>,
    pub garbage_collection_threshold: Option<f64>,
    pub expandable_segments: bool,
    /// `roundup_power2_divisions`: (the interval's start in MiB, as its key says, divisions).
    pub roundup_power2_divisions: Vec<(String, u64)>,
}

/// `key` of `v`: absent or `None` is `None`; a non-negative integer up to `most` is taken;
/// anything else (a negative size, `"8MB"`, NaN, 2^64, a size beyond any device) is
/// refused with what it was: taken as absent it would become 0 and a wrong answer.
fn int(v: &Value, key: &str, most: u64) -> Result<Option<u64>, oomscope_base::Problem> {
    let Some(x) = v.get(key) else { return Ok(None) };
    if matches!(x, Value::None) {
        return Ok(None);
    }
    match x.as_i128() {
        Some(i) if i < 0 => Err(oomscope_base::problem!("\"{key}\" is {i}: negative")),
        Some(i) => match u64::try_from(i).ok().filter(|&u| u <= most) {
            Some(u) => Ok(Some(u)),
            None if most == ANY => Err(oomscope_base::problem!("\"{key}\" is {i}: past 64 bits")),
            None => Err(oomscope_base::problem!(
                "\"{key}\" is {i} bytes: beyond any device (oomscope takes sizes up to {})",
                oomscope_base::size::human(most)
            )),
        },
        None => Err(oomscope_base::problem!("\"{key}\" is {}: not an integer", x.repr(40))),
    }
}

/// A byte count: at most a device's worth.
const BYTES: u64 = oomscope_base::size::MAX_DEVICE_BYTES;
/// An address or a stream: any 64-bit value.
const ANY: u64 = u64::MAX;

impl Snapshot {
    /// Reads a snapshot pickle of `bytes`, from `path`, with the trace entries' stacks
    /// `which` asks for.
    pub fn read(path: &Path, bytes: &[u8], which: EntryStacks) -> Result<Snapshot, InputError> {
        let err = |m: &str| InputError { path: path.to_path_buf(), line: 0, message: m.to_string() };
        let top = pickle::read(bytes).map_err(|e| InputError {
            path: path.to_path_buf(),
            line: 0,
            message: format!(
                "not a readable pickle ({e}); a PyTorch snapshot is what torch.cuda.memory._dump_snapshot writes"
            ),
        })?;
        let mut s = Snapshot {
            path: path.to_path_buf(),
            list_form: false,
            segments: Vec::new(),
            traces: Vec::new(),
            settings: None,
            stacks: Stacks::new(bytes.len()),
            named: Vec::new(),
            frames: Vec::new(),
            visits: 0,
        };
        let (segments, traces, settings) = match &top {
            Value::List(_) => {
                s.list_form = true;
                (top.items().unwrap_or_default(), Vec::new(), None)
            }
            Value::Dict(_) => (
                top.get("segments").and_then(|s| s.items()).ok_or_else(|| {
                    err("a pickled dict without \"segments\": not a PyTorch memory snapshot (expected segments, device_traces)")
                })?,
                top.get("device_traces").and_then(|t| t.items()).unwrap_or_default(),
                top.get("allocator_settings").filter(Value::is_dict),
            ),
            _ => return Err(err("the pickle holds no dict or list: not a PyTorch memory snapshot")),
        };
        s.visit(segments.len() + traces.len())?;
        if segments.iter().any(|s| !s.is_dict()) {
            return Err(err("\"segments\" holds something other than dicts: not a PyTorch memory snapshot"));
        }
        s.settings = settings.map(|v| recorded_settings(&v));
        for seg in &segments {
            let segment = s.segment(seg)?;
            s.segments.push(segment);
        }
        let mut read: HashMap<usize, Rc<Vec<Entry>>> = HashMap::new();
        for (device, t) in traces.iter().enumerate() {
            if let Some(shared) = t.identity().and_then(|id| read.get(&id)) {
                s.traces.push(Rc::clone(shared));
                continue;
            }
            let entries = Rc::new(s.trace(device, t, which)?);
            if let Some(id) = t.identity() {
                read.insert(id, Rc::clone(&entries));
            }
            s.traces.push(entries);
        }
        Ok(s)
    }

    fn err(&self, message: impl Into<String>) -> InputError {
        InputError { path: self.path.clone(), line: 0, message: message.into() }
    }

    fn visit(&mut self, n: usize) -> Result<(), InputError> {
        self.visits += n as u64;
        if self.visits > VISIT_BUDGET {
            return Err(self.err(format!(
                "the snapshot has more than {VISIT_BUDGET} blocks, frames and events together; it is damaged, or too large to import"
            )));
        }
        Ok(())
    }

    /// Counts what is built against the snapshot's budget.
    pub fn charge(&mut self, bytes: usize) -> Result<(), InputError> {
        self.stacks.charge(bytes).map_err(|e| self.err(e.message()))
    }

    /// The bytes reading built, as counted against the budget.
    pub fn built(&self) -> u64 {
        self.stacks.used()
    }

    /// The stack of a frames value, read (a shared list once, counted once).
    fn stack(&mut self, frames: Option<Value>) -> Result<Option<u32>, InputError> {
        let read = self.stacks.frames_read();
        let id = frames.and_then(|f| self.stacks.stack(&f));
        self.visit((self.stacks.frames_read() - read) as usize)?;
        Ok(id)
    }

    fn segment(&mut self, seg: &Value) -> Result<Segment, InputError> {
        let path = self.path.clone();
        let refused = move |m: String| InputError { path: path.clone(), line: 0, message: m };
        let at = |key, most| int(seg, key, most).map_err(|e| refused(format!("a segment's {e}")));
        let (Some(address), Some(total_size)) = (at("address", ANY)?, at("total_size", BYTES)?) else {
            return Err(self.err("a segment without \"address\" or \"total_size\": not a PyTorch memory snapshot"));
        };
        let items = seg.get("blocks").and_then(|b| b.items()).unwrap_or_default();
        self.visit(items.len())?;
        self.charge(size_of::<Segment>() + items.len() * size_of::<Block>())?;
        let mut blocks = Vec::with_capacity(items.len());
        for b in &items {
            let at = |key, most| int(b, key, most).map_err(|e| refused(format!("a block's {e}")));
            let size = at("size", BYTES)?.ok_or_else(|| self.err("a block without \"size\""))?;
            let (address, requested) = (at("address", ANY)?, at("requested_size", BYTES)?);
            let state = match b.get("state").as_ref().and_then(Value::as_str) {
                Some("active_allocated") => BlockState::Allocated,
                Some("active_pending_free") => BlockState::PendingFree,
                _ => BlockState::Inactive,
            };
            let stack = if state == BlockState::Inactive {
                None
            } else {
                // Older snapshots keep the frames in the block's history.
                self.stack(
                    b.get("frames").or_else(|| b.get("history").and_then(|h| h.item(0)).and_then(|e| e.get("frames"))),
                )?
            };
            blocks.push(Block { size, address, requested, state, stack });
        }
        Ok(Segment {
            device: seg.get("device").and_then(|d| d.as_i128()).map_or(0, |d| d as i64),
            address,
            total_size,
            stream: at("stream", ANY)?,
            small: match seg.get("segment_type").as_ref().and_then(Value::as_str) {
                Some("small") => Some(true),
                Some("large") => Some(false),
                _ => None,
            },
            expandable: seg.get("is_expandable").and_then(|v| v.as_bool()).unwrap_or(false),
            blocks,
        })
    }

    fn trace(&mut self, device: usize, t: &Value, which: EntryStacks) -> Result<Vec<Entry>, InputError> {
        let items = t.items().unwrap_or_default();
        self.visit(items.len())?;
        self.charge(items.len() * size_of::<Entry>())?;
        let mut entries = Vec::with_capacity(items.len());
        for (i, e) in items.iter().enumerate() {
            let name = e.get("action");
            let name = name.as_ref().and_then(Value::as_str);
            let action = match name {
                Some("alloc") => Action::Alloc,
                Some("free_requested") => Action::FreeRequested,
                Some("free_completed") => Action::FreeCompleted,
                Some("free") => Action::Free,
                Some("segment_alloc") => Action::SegmentAlloc,
                Some("segment_free") => Action::SegmentFree,
                Some("segment_map") => Action::SegmentMap,
                Some("segment_unmap") => Action::SegmentUnmap,
                Some("oom") => Action::Oom,
                Some(_) => Action::Other,
                None => return Err(self.err(format!("trace entry {i} of device {device} has no \"action\""))),
            };
            let frames = e.get("frames");
            let framed = frames.as_ref().and_then(Value::item_count).is_some_and(|n| n > 0);
            let wanted = match which {
                EntryStacks::All => action != Action::Other,
                EntryStacks::Allocations => matches!(action, Action::Alloc | Action::Oom),
            };
            let stack = if wanted { self.stack(frames)? } else { None };
            let at = |key, most| {
                int(e, key, most).map_err(|m| {
                    self.err(format!("trace entry {i} of device {device} ({}): {m}", name.unwrap_or_default()))
                })
            };
            entries.push(Entry {
                action,
                addr: at("addr", ANY)?,
                // A failed request may be any size (`torch.empty(2**60)` is recorded too).
                size: at("size", if action == Action::Oom { ANY } else { BYTES })?,
                stream: at("stream", ANY)?,
                t_ns: e.get("time_us").and_then(|t| t.as_f64()).map_or(0, |t| (t.max(0.0) * 1000.0) as u64),
                device_free: at("device_free", BYTES)?,
                stack,
                framed,
            });
        }
        Ok(entries)
    }

    /// What stack `id` names: its node and kind, and its number among the stacks named
    /// (its frames are copied out once, charged).
    pub fn name(&mut self, id: u32) -> Result<Named, InputError> {
        let i = id as usize;
        if self.named.len() <= i {
            self.named.resize(i + 1, None);
        }
        if let Some(n) = &self.named[i] {
            return Ok(n.clone());
        }
        let frames = self.stacks.frames(id).map_err(|e| self.err(e.message()))?;
        let n = Named {
            node: torch_frames::node(&frames),
            kind: torch_frames::kind(&frames),
            index: self.frames.len() as u32,
        };
        self.frames.push(frames);
        self.named[i] = Some(n.clone());
        Ok(n)
    }

    /// The frames of the stacks named so far, in their [`Named::index`] order.
    pub fn take_frames(&mut self) -> Vec<Vec<Frame>> {
        std::mem::take(&mut self.frames)
    }

    /// The device to read when none is asked for, for import and replay alike: the first
    /// that ran out of memory (an `oom` in its trace), else the first with a trace, else the
    /// first segment's, else 0.
    pub fn default_device(&self) -> i64 {
        let position = |p: &dyn Fn(&Vec<Entry>) -> bool| self.traces.iter().position(|t| p(t)).map(|d| d as i64);
        position(&|t| t.iter().any(|e| e.action == Action::Oom))
            .or_else(|| position(&|t| !t.is_empty()))
            .or_else(|| self.segments.first().map(|s| s.device))
            .unwrap_or(0)
    }

    /// The devices the snapshot records: one a trace (PyTorch writes one per device, empty
    /// when nothing was recorded there) and those its segments are on, in order.
    pub fn devices(&self) -> Vec<i64> {
        let mut v: Vec<i64> = (0..self.traces.len() as i64).chain(self.segments.iter().map(|s| s.device)).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Refuses a device the snapshot does not record (asked for with `--gpu`).
    pub fn check_device(&self, device: i64) -> Result<(), InputError> {
        let devices = self.devices();
        if devices.is_empty() || devices.contains(&device) {
            return Ok(());
        }
        let list: Vec<String> = devices.iter().map(i64::to_string).collect();
        Err(self.err(format!(
            "no device {device} in this snapshot: it records device{} {}; pick one with --gpu",
            if list.len() == 1 { "" } else { "s" },
            list.join(", ")
        )))
    }

    /// Device `device`'s trace (empty when it has none).
    pub fn trace_of(&self, device: i64) -> Rc<Vec<Entry>> {
        usize::try_from(device).ok().and_then(|d| self.traces.get(d)).cloned().unwrap_or_default()
    }
}

/// `allocator_settings`: the figures as recorded.
fn recorded_settings(s: &Value) -> RecordedSettings {
    let mut out = RecordedSettings {
        max_split_size: s.get("max_split_size").and_then(|v| v.as_i128()),
        garbage_collection_threshold: s.get("garbage_collection_threshold").and_then(|v| v.as_f64()),
        expandable_segments: s.get("expandable_segments").and_then(|v| v.as_bool()).unwrap_or(false),
        roundup_power2_divisions: Vec::new(),
    };
    if let Some(Value::Dict(d)) = s.get("roundup_power2_divisions") {
        for (k, v) in d.entries().iter() {
            if let (Some(k), Some(n)) = (k.as_str(), v.as_u64()) {
                out.roundup_power2_divisions.push((k.to_string(), n));
            }
        }
    }
    out
}
