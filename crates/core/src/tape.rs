//! Every request an allocator served, in order, kept whole (the history keeps only the last
//! events): what `oomscope fit` learns a program's step from. A probe run of the program
//! records one, and `fit` replays it at other batches.
//!
//! It is written as the trace format (docs/trace-format.md) with two additions a trace does
//! not have: the `stream` of each allocation (a small number, by order of first use) and
//! `{"ev":"empty_cache"}` where the program called `torch.cuda.empty_cache()`. An
//! allocation's name and kind are the last it was given (weights are named at the first
//! forward, gradients and optimizer state around the optimizer's step), so the tape is
//! written once, at the end.
//!
//! Invariants: an `alloc` entry's id is its index among allocations; a `free` names a live
//! id; a live address maps to exactly one id (a reused address is a new id).

use crate::record::{Meta, Names, Retag};
use std::collections::HashMap;
use std::io::{self, Write};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    Alloc { bytes: u64, stream: u32, meta: Meta },
    Free { alloc: u32 },
    Step { step: i64 },
    EmptyCache,
}

#[derive(Debug, Default)]
pub struct Tape {
    entries: Vec<Entry>,
    /// Where each allocation's entry is.
    allocs: Vec<u32>,
    /// Live address -> allocation id.
    live: HashMap<u64, u32>,
    /// Streams by order of first use (the raw handle is meaningless in another process).
    streams: Vec<u64>,
}

impl Tape {
    pub fn alloc(&mut self, addr: u64, bytes: u64, stream: u64, meta: Meta) {
        let stream = match self.streams.iter().position(|&s| s == stream) {
            Some(i) => i as u32,
            None => {
                self.streams.push(stream);
                (self.streams.len() - 1) as u32
            }
        };
        let id = self.allocs.len() as u32;
        self.allocs.push(self.entries.len() as u32);
        self.entries.push(Entry::Alloc { bytes, stream, meta });
        self.live.insert(addr, id);
    }

    /// A free of `addr`; an address the tape never saw allocated (made before it started)
    /// is not on it.
    pub fn free(&mut self, addr: u64) {
        if let Some(alloc) = self.live.remove(&addr) {
            self.entries.push(Entry::Free { alloc });
        }
    }

    pub fn step(&mut self, step: i64) {
        self.entries.push(Entry::Step { step });
    }

    pub fn empty_cache(&mut self) {
        self.entries.push(Entry::EmptyCache);
    }

    /// What is learned later of the live allocation at `addr` (its name, kind, shape).
    pub fn retag(&mut self, addr: u64, r: Retag) {
        if let Some(&id) = self.live.get(&addr)
            && let Some(Entry::Alloc { meta, .. }) = self.entries.get_mut(self.allocs[id as usize] as usize)
        {
            r.apply(meta);
        }
    }

    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The tape as JSON Lines, names from `names`.
    pub fn write(&self, names: &Names, w: &mut impl Write) -> io::Result<()> {
        let mut id = 0u32;
        for e in &self.entries {
            let line = match *e {
                Entry::Alloc { bytes, stream, meta } => {
                    let mut v = serde_json::json!({"ev": "alloc", "id": id, "bytes": bytes, "step": meta.step});
                    id += 1;
                    if stream != 0 {
                        v["stream"] = stream.into();
                    }
                    if meta.op != 0 {
                        v["op"] = names.op(meta.op).into();
                    }
                    if meta.kind != crate::record::Kind::Unknown {
                        v["kind"] = meta.kind.name().into();
                    }
                    if let Some(shape) = names.shapes.get(meta.shape) {
                        v["shape"] = shape.clone().into();
                    }
                    if let Some(dtype) = names.dtypes.get(meta.dtype) {
                        v["dtype"] = dtype.clone().into();
                    }
                    v
                }
                Entry::Free { alloc } => serde_json::json!({"ev": "free", "id": alloc}),
                Entry::Step { step } => serde_json::json!({"ev": "step", "step": step}),
                Entry::EmptyCache => serde_json::json!({"ev": "empty_cache"}),
            };
            serde_json::to_writer(&mut *w, &line)?;
            w.write_all(b"\n")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reused_address_is_a_new_allocation_and_retags_reach_the_live_one() {
        let mut names = Names::default();
        let w = names.ops.intern("Net.fc/weight");
        let mut t = Tape::default();
        t.alloc(0x1000, 512, 7, Meta { step: -1, ..Meta::default() });
        t.free(0x1000);
        t.alloc(0x1000, 1024, 9, Meta { step: 0, ..Meta::default() });
        t.retag(0x1000, Retag { op: Some(w), kind: Some(crate::record::Kind::Weight), ..Retag::default() });
        t.free(0x2000); // never allocated on the tape: not on it
        t.step(1);
        let mut out = Vec::new();
        t.write(&names, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[0], r#"{"bytes":512,"ev":"alloc","id":0,"step":-1}"#);
        assert_eq!(lines[1], r#"{"ev":"free","id":0}"#);
        assert_eq!(
            lines[2],
            r#"{"bytes":1024,"ev":"alloc","id":1,"kind":"weight","op":"Net.fc/weight","step":0,"stream":1}"#
        );
        assert_eq!(lines[3], r#"{"ev":"step","step":1}"#);
    }
}
