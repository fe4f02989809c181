//! Dumps and live feeds as the UI's model ([`crate::model`]): the one place where the
//! dump's and the live feed's types become what the screen shows. The UI knows no
//! allocator; the words of reports and verdicts come from the renderer, with the data.

use crate::model::{self, Device, Sample, Status};
use oomscope_base::hash::FastMap;
use oomscope_base::shape;
use oomscope_base::size::human;
use oomscope_format::live::{Hello, Message, State};
use oomscope_format::{Dump, EventKind, ImportedFrom, Section};

/// Samples a live timeline keeps; older ones are thinned (each pair of neighbours becomes
/// the higher one), so a long run still fits and its peak stays.
pub const TIMELINE_KEPT: usize = 20_000;

/// A dump as the UI shows it. `origin` says where it came from (`dump unet.dump.json`);
/// `report` is the report as the renderer writes it (TF's text, ranked nodes, verdict),
/// for the Report view.
pub fn from_dump(d: &Dump, origin: &str, report: Option<String>) -> Device {
    let mut dev = Device {
        name: d.allocator.name.clone(),
        origin: origin.to_string(),
        hardware: hardware(&d.device.model, d.device.total),
        status: Status::PostMortem,
        ..Device::default()
    };
    dev.stats = stats(
        &d.stats,
        if d.allocator.limit > 0 { d.allocator.limit } else { d.stats.bytes_limit },
        d.live_chunks().count() as u64,
        (d.device.total, d.device.free),
        d.steps.last().map(|m| m.step).or(d.oom.as_ref().map(|o| o.step)),
        d.has(Section::Stats) || d.has(Section::Totals),
    );
    // A dump of one moment may count its OOMs in either place.
    dev.stats.allocator.num_ooms = d.stats.num_ooms.max(d.ooms_total);
    dev.timeline = timeline(d);
    dev.oom = d.oom.clone();
    dev.verdict = d.verdict.clone();
    dev.nodes = d.usage_by_node.clone();
    dev.nodes_rest = d.imported.as_ref().and_then(|i| i.usage_remaining).map(|r| (r[0], r[1]));
    if d.has(Section::Bins) {
        dev.bins = d.bins.clone();
    }
    let mut tables = Tables::new();
    for r in &d.regions {
        let start = dev.spans.len();
        for c in &r.chunks {
            let used = c.in_use;
            dev.spans.push(model::Span {
                address: c.address,
                size: c.size,
                requested: if used { c.requested } else { 0 },
                in_use: if used { c.size } else { 0 },
                chunks: 1,
                op: if used { tables.op(c.op.as_deref().unwrap_or("")) } else { 0 },
                shape: match (&c.shape, used) {
                    (Some(s), true) => tables.shape(s),
                    _ => 0,
                },
                stack: c.stack.filter(|_| used).map_or(0, |i| i + 1),
                step: c.step.filter(|_| used),
            });
        }
        dev.regions.push(model::Region { address: r.address, size: r.size, spans: start..dev.spans.len() });
    }
    dev.ops = tables.ops;
    dev.shapes = tables.shapes;
    dev.stacks = std::iter::once(Vec::new())
        .chain(d.stacks.iter().map(|s| {
            if s.frames.is_empty() {
                s.ips.iter().map(|ip| format!("{ip:#x}")).collect()
            } else {
                s.frames.iter().map(|f| f.text()).collect()
            }
        }))
        .collect();
    dev.report = report;
    dev.notes = notes(d);
    dev
}

fn hardware(model: &str, total: u64) -> String {
    match (model.is_empty(), total) {
        (true, 0) => String::new(),
        (true, t) => human(t),
        (false, 0) => model.to_string(),
        (false, t) => format!("{model} ({})", human(t)),
    }
}

/// The figures the UI shows, from the allocator's statistics and what the source adds.
fn stats(
    s: &oomscope_format::Stats,
    limit: u64,
    live_allocations: u64,
    (device_total, device_free): (u64, u64),
    step: Option<i64>,
    known: bool,
) -> model::Stats {
    model::Stats { allocator: *s, limit, live_allocations, device_total, device_free, step, known }
}

/// Names interned for the model's spans (index 0: none).
struct Tables {
    ops: Vec<String>,
    shapes: Vec<String>,
    op_index: FastMap<String, u32>,
    shape_index: FastMap<Vec<i64>, u32>,
}

impl Tables {
    fn new() -> Tables {
        Tables {
            ops: vec![String::new()],
            shapes: vec![String::new()],
            op_index: FastMap::default(),
            shape_index: FastMap::default(),
        }
    }

    fn op(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.op_index.get(name) {
            return i;
        }
        self.ops.push(name.to_string());
        let i = (self.ops.len() - 1) as u32;
        self.op_index.insert(name.to_string(), i);
        i
    }

    fn shape(&mut self, s: &[i64]) -> u32 {
        if let Some(&i) = self.shape_index.get(s) {
            return i;
        }
        self.shapes.push(shape::text(s));
        let i = (self.shapes.len() - 1) as u32;
        self.shape_index.insert(s.to_vec(), i);
        i
    }
}

/// In-use and pool bytes after each kept event, walking back from the dump's figures.
fn timeline(d: &Dump) -> model::Timeline {
    let mut tl = model::Timeline::default();
    if d.events.is_empty() {
        return tl;
    }
    let (mut in_use, mut pool) = (d.stats.bytes_in_use, d.stats.pool_bytes);
    let mut samples = Vec::with_capacity(d.events.len());
    // Without a clock (a trace without times), the events themselves are the axis.
    tl.by_event = d.events.iter().all(|e| e.t_ns == d.events[0].t_ns);
    for e in d.events.iter().rev() {
        let t = if tl.by_event { e.seq as f64 } else { e.t_ns as f64 / 1e9 };
        samples.push(Sample { t, in_use, pool });
        match e.kind {
            EventKind::Alloc => in_use = in_use.saturating_sub(e.size),
            EventKind::Free => in_use += e.size,
            EventKind::Extend => pool = pool.saturating_sub(e.size),
            EventKind::RegionFree => pool += e.size,
            EventKind::Step => tl.steps.push((t, e.step)),
            EventKind::Oom if tl.oom_at.is_none() || d.oom.as_ref().is_some_and(|o| o.seq == e.seq) => {
                tl.oom_at = Some(t)
            }
            _ => {}
        }
    }
    samples.reverse();
    tl.steps.reverse();
    tl.samples = samples;
    tl
}

fn notes(d: &Dump) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(i) = &d.imported {
        let from = match (i.from, i.variant) {
            (ImportedFrom::TfLog, Some(v)) => format!("imported from a TensorFlow log ({} format)", v.release()),
            (ImportedFrom::Message, _) => match &i.message {
                Some(m) => format!("read from an out-of-memory message of {}", m.format.describe()),
                None => "read from an out-of-memory message".to_string(),
            },
            (f, _) => format!("imported from {}", f.name()),
        };
        notes.push(from);
        let absent: Vec<&str> = i.absent.iter().map(|s| s.describe()).collect();
        if !absent.is_empty() {
            notes.push(format!("the input lacks {}", absent.join(", ")));
        }
    }
    if d.events_total > d.events.len() as u64 && !d.events.is_empty() {
        notes.push(format!(
            "the chart shows the last {} of {} events (the dump's history)",
            d.events.len(),
            d.events_total
        ));
    }
    notes
}

/// A live process as the UI shows it, built from its feed's messages.
#[derive(Debug, Default)]
pub struct Live {
    device: Device,
    hello: Option<Hello>,
}

impl Live {
    /// A device fed by messages; `origin` names the source (`pid 4242: python train.py`).
    pub fn new(origin: &str, status: Status) -> Live {
        Live { device: Device { origin: origin.to_string(), status, ..Device::default() }, ..Live::default() }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Applies one message; true when the model changed.
    pub fn apply(&mut self, msg: Message) -> bool {
        match msg {
            Message::Hello(h) => {
                self.device.name = match h.process.as_ref().and_then(|p| Some((p.rank?, p.world_size))) {
                    // A rank of a job is named as one.
                    Some((r, Some(w))) => format!("rank {r} of {w} · {}", h.allocator.name),
                    Some((r, None)) => format!("rank {r} · {}", h.allocator.name),
                    None => h.allocator.name.clone(),
                };
                self.device.hardware = hardware(&h.device.model, h.device.total);
                if self.device.origin.is_empty() {
                    self.device.origin = format!("pid {}: {}", h.pid, h.command);
                }
                self.device.stats.limit = h.allocator.limit;
                self.device.stats.known = true;
                self.hello = Some(*h);
            }
            Message::State(s) => self.state(*s),
            Message::Step(s) => {
                let t = Self::seconds(s.t_ns);
                self.device.timeline.steps.push((t, s.step));
            }
            Message::Oom(o) => self.oom(&o.dump, o.report),
            Message::Dropped { frames } => self.device.dropped_frames = frames,
            Message::Bye { reason } => self.device.status = Status::Disconnected(reason),
            Message::Unknown => return false,
        }
        true
    }

    /// Marks the process gone; the last state stays.
    pub fn disconnect(&mut self, why: String) {
        self.device.status = Status::Disconnected(why);
    }

    pub fn set_status(&mut self, status: Status) {
        self.device.status = status;
    }

    fn seconds(t_ns: u64) -> f64 {
        t_ns as f64 / 1e9
    }

    fn state(&mut self, s: State) {
        let samples: Vec<Sample> =
            s.samples.iter().map(|x| Sample { t: Self::seconds(x[0]), in_use: x[1], pool: x[2] }).collect();
        let tl = &mut self.device.timeline;
        // A frame may repeat the last sample ("now"); keep time moving forward.
        for smp in samples {
            if tl.samples.last().is_some_and(|l| l.t > smp.t) {
                continue;
            }
            tl.samples.push(smp);
        }
        if tl.samples.len() > TIMELINE_KEPT {
            thin(&mut tl.samples);
        }
        // An OOM's verdict and report stay while the run goes on (a retry at a smaller
        // batch, say); the state frames keep the rest current.
        let d = &mut self.device;
        let total = self.hello.as_ref().map_or(0, |h| h.device.total);
        // The device's free memory as of the frame: what others held at the start and this
        // pool are taken (exact on the simulated device, close on a real one).
        let free = self
            .hello
            .as_ref()
            .map_or(0, |h| h.device.total.saturating_sub(h.device.others).saturating_sub(s.stats.pool_bytes));
        d.stats = stats(&s.stats, s.stats.bytes_limit, s.live, (total, free), Some(s.step), true);
        d.nodes = s.nodes;
        d.nodes_rest = s.nodes_rest.map(|r| (r[0], r[1]));
        d.bins = s.bins;
        d.spans.clear();
        d.regions.clear();
        for r in s.regions {
            let start = d.spans.len();
            let mut addr = r.address;
            for sp in r.spans {
                d.spans.push(model::Span {
                    address: addr,
                    size: sp.size(),
                    requested: sp.requested(),
                    in_use: sp.in_use(),
                    chunks: sp.chunks(),
                    op: sp.op(),
                    shape: sp.shape(),
                    stack: sp.stack(),
                    step: (sp.in_use() > 0).then_some(sp.step()),
                });
                addr += sp.size();
            }
            d.regions.push(model::Region { address: r.address, size: r.size, spans: start..d.spans.len() });
        }
        d.ops = s.ops;
        d.shapes = s.shapes.iter().map(|x| if x.is_empty() { String::new() } else { shape::text(x) }).collect();
        d.stacks = s.stacks;
        d.notes = if s.merged {
            vec![format!(
                "the feed merges neighbouring chunks past {} to stay small; the dump written at OOM has them all",
                oomscope_format::live::SPANS_SENT
            )]
        } else {
            Vec::new()
        };
    }

    /// The post-mortem replaces the state until the next frame; the live timeline, the
    /// status and the dropped-frame count are kept.
    fn oom(&mut self, dump: &Dump, report: String) {
        let mut post = from_dump(dump, &self.device.origin, Some(report));
        post.timeline = std::mem::take(&mut self.device.timeline);
        post.timeline.oom_at = dump.oom.as_ref().map(|o| Self::seconds(o.t_ns));
        post.status = self.device.status.clone();
        post.dropped_frames = self.device.dropped_frames;
        if post.name.is_empty() {
            post.name = self.device.name.clone();
        }
        self.device = post;
    }
}

/// Halves the samples, keeping the higher of each pair.
fn thin(samples: &mut Vec<Sample>) {
    let kept: Vec<Sample> =
        samples.chunks(2).map(|p| if p.len() == 2 && p[1].in_use > p[0].in_use { p[1] } else { p[0] }).collect();
    *samples = kept;
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_format::ProcessInfo;

    #[test]
    fn a_rank_of_a_job_is_named_as_a_rank() {
        let hello = |process: Option<ProcessInfo>| {
            let mut live = Live::new("", Status::Live);
            let mut h = Hello::default();
            h.allocator.name = "pytorch_caching_allocator".into();
            h.process = process;
            live.apply(Message::Hello(Box::new(h)));
            live.device().name.clone()
        };
        let rank = ProcessInfo { rank: Some(2), world_size: Some(4), ..ProcessInfo::default() };
        assert_eq!(hello(Some(rank)), "rank 2 of 4 · pytorch_caching_allocator");
        assert_eq!(hello(None), "pytorch_caching_allocator");
    }
}
