//! Reads a probe's tape (written by `liboomscope.so`, `oomscope_core::tape`) into the
//! requests [`oomscope_replay::scaled`] learns the step from.

use oomscope_base::Problem;
use oomscope_core::record::Kind;
use oomscope_replay::scaled::{Probed, TapeEntry};
use serde::Deserialize;
use std::collections::HashMap;
use std::io::BufRead;
use std::path::Path;

#[derive(Deserialize)]
struct Line {
    ev: String,
    #[serde(default)]
    id: Option<u32>,
    #[serde(default)]
    bytes: Option<u64>,
    #[serde(default)]
    stream: u32,
    #[serde(default)]
    op: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    step: Option<i64>,
}

/// The tape at `path`, probed at `batch`.
pub fn read(path: &Path, batch: u64) -> Result<Probed, Problem> {
    let file = std::fs::File::open(path).map_err(|e| Problem(format!("{}: {e}", path.display())))?;
    let mut p = Probed { batch, entries: Vec::new(), ops: vec![String::new()] };
    let mut ops: HashMap<String, u32> = HashMap::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let at = |what: String| Problem(format!("{}:{}: {what}", path.display(), i + 1));
        let line = line.map_err(|e| at(e.to_string()))?;
        let l: Line = serde_json::from_str(&line).map_err(|e| at(format!("not a tape line: {e}")))?;
        let entry = match l.ev.as_str() {
            "alloc" => {
                let op = match l.op {
                    None => 0,
                    Some(name) => {
                        let next = p.ops.len() as u32;
                        *ops.entry(name.clone()).or_insert_with(|| {
                            p.ops.push(name);
                            next
                        })
                    }
                };
                TapeEntry::Alloc {
                    bytes: l.bytes.ok_or_else(|| at("an alloc without bytes".into()))?,
                    stream: l.stream,
                    op,
                    kind: l.kind.as_deref().and_then(Kind::parse).unwrap_or_default(),
                    step: l.step.unwrap_or(-1),
                }
            }
            "free" => TapeEntry::Free { alloc: l.id.ok_or_else(|| at("a free without an id".into()))? },
            "step" => TapeEntry::Step { step: l.step.ok_or_else(|| at("a step without its number".into()))? },
            "empty_cache" => TapeEntry::EmptyCache,
            other => return Err(at(format!("unknown event {other:?}"))),
        };
        p.entries.push(entry);
    }
    Ok(p)
}
