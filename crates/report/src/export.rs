//! oomscope dumps → the viewers people already use.
//!
//! - [`torch_snapshot`]: a pickle in PyTorch's memory-snapshot schema, which
//!   pytorch.org/memory_viz and `torch.cuda._memory_viz` open: regions become segments,
//!   chunks blocks, op names and stacks frames, the event history the device trace.
//! - [`perfetto`]: Chrome trace-event JSON for ui.perfetto.dev: counter tracks of bytes in
//!   use and in the pool, one slice per allocation lifetime named by op, the OOM and step
//!   marks as instant events.
//!
//! The history in a dump is bounded, so both exporters start from the state the history
//! implies (the end state minus what the kept events did) rather than from zero.

use crate::pickle::{self, Out};
use oomscope_format::EventKind;
use oomscope_format::{ChunkInfo, Dump, EventInfo};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{self, Write};

fn s(text: &str) -> Out {
    Out::Str(text.to_string())
}

fn int(n: u64) -> Out {
    Out::Int(n as i128)
}

/// One frame, which memory_viz shows as `filename:line:name` (keeping the file's last path
/// component only): `step:3:shared_model/unet_00/Conv2D float32[2,720,1280,64]`.
fn op_frame(op: &str, shape: Option<&[i64]>, dtype: Option<&str>, step: i64) -> Out {
    let dims = shape.map(oomscope_base::shape::text);
    let tensor = match (dtype, dims) {
        (Some(d), Some(s)) => format!(" {d}{s}"),
        (None, Some(s)) => format!(" {s}"),
        (Some(d), None) => format!(" {d}"),
        (None, None) => String::new(),
    };
    Out::Dict(vec![
        ("filename".into(), s(if step < 0 { "setup" } else { "step" })),
        ("line".into(), int(step.max(0) as u64)),
        ("name".into(), Out::Str(format!("{op}{tensor}"))),
    ])
}

fn chunk_frames(d: &Dump, c: &ChunkInfo) -> Out {
    let mut frames = vec![op_frame(
        c.op.as_deref().unwrap_or("unknown"),
        c.shape.as_deref(),
        c.dtype.as_deref(),
        c.step.unwrap_or(-1),
    )];
    if let Some(stack) = c.stack.and_then(|i| d.stacks.get(i as usize)) {
        for f in &stack.frames {
            frames.push(Out::Dict(vec![
                ("filename".into(), s(f.file.as_deref().unwrap_or("??"))),
                ("line".into(), int(f.line.unwrap_or(0) as u64)),
                ("name".into(), s(f.function.as_deref().unwrap_or("??"))),
            ]));
        }
    }
    Out::List(frames)
}

/// Whether the dump's history has times. Asked once per export: asking per event made an
/// export of a dump without times quadratic in its events.
fn has_times(d: &Dump) -> bool {
    d.events.iter().any(|e| e.t_ns > 0)
}

/// Microseconds for an event: its time, or its position when the dump has no times.
fn time_us(timed: bool, e: &EventInfo) -> u64 {
    if timed { e.t_ns / 1000 } else { e.seq }
}

/// The dump as a PyTorch memory snapshot (pickle protocol 2).
pub fn torch_snapshot(d: &Dump) -> Vec<u8> {
    let segments: Vec<Out> = d
        .regions
        .iter()
        .map(|r| {
            let blocks: Vec<Out> = r
                .chunks
                .iter()
                .map(|c| {
                    Out::Dict(vec![
                        ("address".into(), int(c.address)),
                        ("size".into(), int(c.size)),
                        ("requested_size".into(), int(if c.in_use { c.requested } else { 0 })),
                        ("state".into(), s(if c.in_use { "active_allocated" } else { "inactive" })),
                        ("frames".into(), if c.in_use { chunk_frames(d, c) } else { Out::List(Vec::new()) }),
                    ])
                })
                .collect();
            let live = r.chunks.iter().filter(|c| c.in_use);
            let allocated: u64 = live.clone().map(|c| c.size).sum();
            let requested: u64 = live.map(|c| c.requested).sum();
            Out::Dict(vec![
                ("device".into(), int(0)),
                ("address".into(), int(r.address)),
                ("total_size".into(), int(r.size)),
                ("allocated_size".into(), int(allocated)),
                ("active_size".into(), int(allocated)),
                ("requested_size".into(), int(requested)),
                ("stream".into(), int(0)),
                // PyTorch's small pool holds blocks up to 1 MiB in 2 MiB segments.
                ("segment_type".into(), s(if r.size <= 2 << 20 { "small" } else { "large" })),
                ("segment_pool_id".into(), Out::Tuple(vec![int(0), int(0)])),
                ("is_expandable".into(), Out::Bool(false)),
                ("frames".into(), Out::List(Vec::new())),
                ("blocks".into(), Out::List(blocks)),
            ])
        })
        .collect();
    let oom_free = d.oom.as_ref().map_or(0, |o| o.device_free);
    let timed = has_times(d);
    let mut trace = Vec::with_capacity(d.events.len());
    for e in &d.events {
        let frames = Out::List(vec![op_frame(e.op.as_deref().unwrap_or("unknown"), None, None, e.step)]);
        let entry = |action: &str, addr: u64, frames: Out| {
            Out::Dict(vec![
                ("action".into(), s(action)),
                ("addr".into(), int(addr)),
                ("size".into(), int(e.size)),
                ("stream".into(), int(0)),
                ("time_us".into(), int(time_us(timed, e))),
                ("frames".into(), frames),
            ])
        };
        match e.kind {
            EventKind::Alloc => trace.push(entry("alloc", e.address, frames)),
            EventKind::Free => {
                trace.push(entry("free_requested", e.address, frames.clone()));
                trace.push(entry("free_completed", e.address, frames));
            }
            EventKind::Extend => trace.push(entry("segment_alloc", e.address, Out::List(Vec::new()))),
            EventKind::RegionFree => trace.push(entry("segment_free", e.address, Out::List(Vec::new()))),
            EventKind::Oom => {
                // PyTorch puts the device's free memory in `addr` of an OOM entry.
                let mut oom = entry("oom", oom_free, frames);
                if let Out::Dict(fields) = &mut oom {
                    fields.push(("device_free".into(), int(oom_free)));
                }
                trace.push(oom);
            }
            EventKind::Step | EventKind::Refused | EventKind::OutsideAlloc | EventKind::OutsideFree => {}
        }
    }
    let snapshot = Out::Dict(vec![
        ("segments".into(), Out::List(segments)),
        ("device_traces".into(), Out::List(vec![Out::List(trace)])),
        (
            "allocator_settings".into(),
            Out::Dict(vec![
                ("PYTORCH_CUDA_ALLOC_CONF".into(), s("")),
                ("expandable_segments".into(), Out::Bool(false)),
                ("oomscope_allocator".into(), s(&d.allocator.name)),
                ("oomscope_limit".into(), int(d.allocator.limit)),
                ("oomscope_source".into(), s(d.source.kind.name())),
            ]),
        ),
    ]);
    let mut bytes = Vec::new();
    pickle::write(&snapshot, &mut bytes);
    bytes
}

/// (bytes in use, pool bytes) before the first kept event: the end state undone.
fn initial_state(d: &Dump) -> (i128, i128) {
    let (mut in_use, mut pool) = (d.stats.bytes_in_use as i128, d.stats.pool_bytes as i128);
    for e in &d.events {
        match e.kind {
            EventKind::Alloc => in_use -= e.size as i128,
            EventKind::Free => in_use += e.size as i128,
            EventKind::Extend => pool -= e.size as i128,
            EventKind::RegionFree => pool += e.size as i128,
            _ => {}
        }
    }
    (in_use.max(0), pool.max(0))
}

/// The dump as Chrome trace-event JSON (what ui.perfetto.dev and chrome://tracing open),
/// written to `w` event by event: a history of hundreds of thousands of events would
/// otherwise be held whole as a JSON tree, kilobytes an event. The bytes are those of the
/// whole tree serialized at once (top-level keys in serde_json's sorted order).
pub fn write_perfetto(d: &Dump, w: &mut dyn Write) -> io::Result<()> {
    const PID: u64 = 1;
    const TID: u64 = 1;
    let timed = has_times(d);
    let other = json!({
        "tool": d.tool,
        "allocator": d.allocator.name,
        "limit": d.allocator.limit,
        "times": if timed { "microseconds" } else { "event positions (the dump has no times)" },
    });
    w.write_all(b"{\"displayTimeUnit\":\"ms\",\"otherData\":")?;
    serde_json::to_writer(&mut *w, &other)?;
    w.write_all(b",\"traceEvents\":[")?;
    let mut written = 0usize;
    let mut emit = |v: Value| -> io::Result<()> {
        if written > 0 {
            w.write_all(b",")?;
        }
        written += 1;
        serde_json::to_writer(&mut *w, &v).map_err(io::Error::from)
    };
    emit(
        json!({"ph": "M", "pid": PID, "name": "process_name", "args": {"name": format!("{} (oomscope)", d.allocator.name)}}),
    )?;
    emit(json!({"ph": "M", "pid": PID, "tid": TID, "name": "thread_name", "args": {"name": "allocations"}}))?;
    let (mut in_use, mut pool) = initial_state(d);
    let first = d.events.first().map_or(0, |e| time_us(timed, e));
    let last = d.events.last().map_or(0, |e| time_us(timed, e));
    emit(json!({"ph": "C", "pid": PID, "name": "memory", "ts": first, "args": {"in_use": in_use, "pool": pool}}))?;
    // Open slices by address: (slice id, op, start).
    let mut open: HashMap<u64, (u64, String, u64)> = HashMap::new();
    let mut next_id = 1u64;
    let begin = |id: u64, name: &str, ts: u64, args: Value| json!({"ph": "b", "cat": "allocation", "pid": PID, "tid": TID, "id": format!("0x{id:x}"), "name": name, "ts": ts, "args": args});
    let end = |id: u64, name: &str, ts: u64| json!({"ph": "e", "cat": "allocation", "pid": PID, "tid": TID, "id": format!("0x{id:x}"), "name": name, "ts": ts});
    for e in &d.events {
        let ts = time_us(timed, e);
        let op = e.op.clone().unwrap_or_else(|| "unknown".into());
        match e.kind {
            EventKind::Alloc => {
                in_use += e.size as i128;
                let id = next_id;
                next_id += 1;
                emit(begin(
                    id,
                    &op,
                    ts,
                    json!({"address": format!("{:#x}", e.address), "size": e.size, "requested": e.requested, "step": e.step}),
                ))?;
                open.insert(e.address, (id, op, ts));
            }
            EventKind::Free => {
                in_use -= e.size as i128;
                let (id, name) = match open.remove(&e.address) {
                    Some((id, name, _)) => (id, name),
                    None => {
                        // Allocated before the history begins: the slice starts with it.
                        let id = next_id;
                        next_id += 1;
                        emit(begin(
                            id,
                            &op,
                            first,
                            json!({"address": format!("{:#x}", e.address), "size": e.size, "allocated": "before the history"}),
                        ))?;
                        (id, op.clone())
                    }
                };
                emit(end(id, &name, ts))?;
            }
            EventKind::Extend => pool += e.size as i128,
            EventKind::RegionFree => pool -= e.size as i128,
            EventKind::Oom => {
                emit(json!({
                    "ph": "i", "s": "g", "pid": PID, "tid": TID, "ts": ts,
                    "name": format!("OOM: {} for {}", oomscope_base::size::human(e.requested), op),
                    "args": {"requested": e.requested, "rounded": e.size, "step": e.step},
                }))?;
            }
            EventKind::Step => {
                emit(
                    json!({"ph": "i", "s": "p", "pid": PID, "tid": TID, "ts": ts, "name": format!("step {}", e.step)}),
                )?;
            }
            EventKind::Refused | EventKind::OutsideAlloc | EventKind::OutsideFree => {}
        }
        if matches!(e.kind, EventKind::Alloc | EventKind::Free | EventKind::Extend | EventKind::RegionFree) {
            emit(json!({"ph": "C", "pid": PID, "name": "memory", "ts": ts, "args": {"in_use": in_use, "pool": pool}}))?;
        }
    }
    // Still live at the end of the history.
    let mut still: Vec<(u64, String)> = open.into_values().map(|(id, name, _)| (id, name)).collect();
    still.sort();
    for (id, name) in still {
        emit(end(id, &name, last))?;
    }
    w.write_all(b"]}")
}

/// [`write_perfetto`] as one JSON value, for a dump small enough to hold whole.
pub fn perfetto(d: &Dump) -> io::Result<Value> {
    let mut bytes = Vec::new();
    write_perfetto(d, &mut bytes)?;
    serde_json::from_slice(&bytes).map_err(io::Error::from)
}
