//! Hostile input: see docs/hostile-input.md.
//!
//! PyTorch snapshots made to hurt the reader: values that contain themselves, nesting a
//! million levels deep, one long string shared by a million frames, a dict of 200 000 keys.
//! Each is written here byte by byte; `import`, `replay` and the importer `tui` uses must
//! refuse it naming the file (exit 2), or read it, in bounded memory: the command runs under
//! a 1 GB address-space limit, so a blowup fails as a crash instead of eating the machine.

use crate::common::*;
use oomscope_ingest::import;
use oomscope_sim::torch_replay::SnapshotTrace;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// Address space a command may use: a hundred times what these inputs need when read well.
const ADDRESS_SPACE: u64 = 1_000_000_000;
/// Only a guard against a hang, far beyond what any of these takes: no timing is asserted.
const HANG_GUARD: Duration = Duration::from_secs(600);

/// A pickle, opcode by opcode (protocol 2).
struct P(Vec<u8>);

impl P {
    fn new() -> P {
        P(vec![0x80, 2])
    }
    fn op(&mut self, ops: &[u8]) -> &mut P {
        self.0.extend_from_slice(ops);
        self
    }
    fn str(&mut self, s: &str) -> &mut P {
        self.0.push(b'X');
        self.0.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.0.extend_from_slice(s.as_bytes());
        self
    }
    fn int(&mut self, i: i32) -> &mut P {
        self.0.push(b'J');
        self.0.extend_from_slice(&i.to_le_bytes());
        self
    }
    /// Memoizes the top of the stack as `id`.
    fn put(&mut self, id: u32) -> &mut P {
        self.0.push(b'r');
        self.0.extend_from_slice(&id.to_le_bytes());
        self
    }
    /// Pushes memo entry `id`.
    fn get(&mut self, id: u32) -> &mut P {
        if id < 256 {
            self.0.extend_from_slice(&[b'h', id as u8]);
        } else {
            self.0.push(b'j');
            self.0.extend_from_slice(&id.to_le_bytes());
        }
        self
    }
    fn done(&mut self) -> Vec<u8> {
        self.0.push(b'.');
        std::mem::take(&mut self.0)
    }
}

/// `{"segments": [], "device_traces": [], "allocator_settings": {"expandable_segments": V}}`
/// where `value` pushes V.
fn with_setting(value: impl FnOnce(&mut P)) -> Vec<u8> {
    let mut p = P::new();
    p.op(b"}(").str("segments").op(b"]").str("device_traces").op(b"]").str("allocator_settings");
    p.op(b"}(").str("expandable_segments");
    value(&mut p);
    p.op(b"uu").done()
}

/// The list `[L]` where L is itself: a value that contains itself.
fn self_containing_setting() -> Vec<u8> {
    with_setting(|p| {
        p.op(b"]").put(0).get(0).op(b"a");
    })
}

/// `[[[...]]]` `levels` deep: empty lists, then appends.
fn nested(p: &mut P, levels: usize) {
    p.op(&vec![b']'; levels]).op(&vec![b'a'; levels - 1]);
}

/// A frame dict, memoized as `id`, whose file name is memo entry 0.
fn frame(p: &mut P, id: u32, line: i32) {
    p.op(b"}").put(id).op(b"(").str("name").str("forward").str("filename").get(0).str("line").int(line).op(b"u");
}

/// A list of `n` references to memo entry `id`.
fn refs(p: &mut P, id: u32, n: usize) {
    p.op(b"](");
    for _ in 0..n {
        p.get(id);
    }
    p.op(b"e");
}

/// How each block's 1 000 frames are laid out.
#[derive(Clone, Copy, PartialEq)]
enum Frames {
    /// One list shared by every block.
    SharedList,
    /// A list of its own per block, of the same frames.
    OwnLists,
    /// A list of its own per block whose last frame is the block's own: every stack differs.
    OwnStacks,
}

const BLOCKS: i32 = 1000;
const FRAMES: usize = 1000;

/// One long file name (`name_len` bytes) shared by every frame of 1 000 blocks × 1 000
/// frames: tens of gigabytes if each frame copied it.
fn shared_file_name(layout: Frames, name_len: usize, in_trace: bool) -> Vec<u8> {
    let mut p = P::new();
    let name = format!("/home/u/{}/model.py", "d".repeat(name_len));
    p.str(&name).put(0).op(b"0");
    frame(&mut p, 1, 42);
    p.op(b"0");
    refs(&mut p, 1, FRAMES);
    p.put(2).op(b"0");
    let frames = |p: &mut P, i: i32| match layout {
        Frames::SharedList => {
            p.get(2);
        }
        Frames::OwnLists => refs(p, 1, FRAMES),
        Frames::OwnStacks => {
            p.op(b"](");
            for _ in 0..FRAMES - 1 {
                p.get(1);
            }
            frame(p, 3, i);
            p.op(b"e");
        }
    };
    p.op(b"}(").str("segments").op(b"](");
    p.op(b"}(").str("device").int(0).str("address").int(0).str("total_size").int(512 * BLOCKS);
    p.str("blocks").op(b"](");
    for i in 0..BLOCKS {
        p.op(b"}(").str("address").int(512 * i).str("size").int(512).str("state");
        if in_trace {
            p.str("inactive").op(b"u");
        } else {
            p.str("active_allocated").str("frames");
            frames(&mut p, i);
            p.op(b"u");
        }
    }
    p.op(b"eu").op(b"e");
    p.str("device_traces").op(b"](").op(b"](");
    if in_trace {
        for i in 0..BLOCKS {
            p.op(b"}(").str("action").str("alloc").str("addr").int(512 * i).str("size").int(512);
            p.str("stream").int(0).str("frames");
            frames(&mut p, i);
            p.op(b"u");
        }
    }
    p.op(b"e").op(b"e").op(b"u").done()
}

/// Blocks sharing the wide dict: each looks a few keys up in it.
const WIDE_BLOCKS: i32 = 10_000;

/// A snapshot whose one block is a dict of 200 000 integer keys besides its own, shared by
/// 10 000 blocks: billions of key comparisons for a reader that searches keys in order.
fn wide_dict() -> Vec<u8> {
    let mut p = P::new();
    p.op(b"}(").str("segments").op(b"](");
    p.op(b"}(").str("device").int(0).str("address").int(0).str("total_size").int(512 * WIDE_BLOCKS);
    p.str("blocks").op(b"](");
    p.op(b"}(");
    for i in 0..200_000 {
        p.int(i).op(b"N");
    }
    p.str("size").int(512).str("state").str("inactive").op(b"u").put(0);
    for _ in 1..WIDE_BLOCKS {
        p.get(0);
    }
    p.op(b"eu").op(b"e");
    p.str("device_traces").op(b"]").op(b"u").done()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `oomscope ARGS` with its address space capped, killed if it hangs.
fn capped(args: &[&str]) -> Output {
    oomscope_bounded(args, Some(ADDRESS_SPACE), HANG_GUARD)
}

/// Exit 2 with a message that names the file and says `why`.
fn assert_refused(o: &Output, path: &Path, why: &str) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(2), "exit {:?} (a crash?), stderr: {e}", o.status);
    assert!(e.contains(&*path.to_string_lossy()), "the message names the file: {e}");
    assert!(e.contains(why), "the message says {why:?}: {e}");
}

fn assert_read(o: &Output) {
    assert!(o.status.success(), "exit {:?}, stderr: {}", o.status, stderr(o));
}

#[test]
fn a_setting_that_contains_itself_is_refused_naming_the_file() {
    let dir = temp_dir("self-containing");
    let bytes = self_containing_setting();
    assert!(bytes.len() < 100);
    let path = write(&dir, "cycle.pickle", &bytes);
    let p = path.to_str().unwrap();
    assert_refused(&capped(&["import", p]), &path, "inside itself");
    assert_refused(&capped(&["replay", p]), &path, "inside itself");
    // What `oomscope tui FILE` loads it with.
    let e = import::import(&path, &bytes, None, None).unwrap_err().to_string();
    assert!(e.contains("inside itself") && e.contains(p), "{e}");
    let e = SnapshotTrace::read(&path, &bytes, None).unwrap_err().to_string();
    assert!(e.contains("inside itself") && e.contains(p), "{e}");
}

#[test]
fn values_nested_a_hundred_thousand_deep_are_refused_naming_the_file() {
    let dir = temp_dir("nested");
    let bytes = with_setting(|p| nested(p, 100_000));
    let path = write(&dir, "deep.pickle", &bytes);
    let p = path.to_str().unwrap();
    assert_refused(&capped(&["import", p]), &path, "nested deeper than");
    assert_refused(&capped(&["replay", p]), &path, "nested deeper than");
    let e = import::import(&path, &bytes, None, None).unwrap_err().to_string();
    assert!(e.contains("nested deeper than") && e.contains(p), "{e}");

    // A million levels as the whole pickle (2 MB).
    let mut pk = P::new();
    nested(&mut pk, 1_000_000);
    let path = write(&dir, "deeper.pickle", &pk.done());
    let p = path.to_str().unwrap();
    assert_refused(&capped(&["import", p]), &path, "nested deeper than");
    assert_refused(&capped(&["replay", p]), &path, "nested deeper than");
}

#[test]
fn one_file_name_shared_by_a_million_frames_is_read_once() {
    let dir = temp_dir("shared-name");
    for (name, layout) in [("shared-list.pickle", Frames::SharedList), ("own-lists.pickle", Frames::OwnLists)] {
        let bytes = shared_file_name(layout, 900_000, false);
        let path = write(&dir, name, &bytes);
        let p = path.to_str().unwrap();
        let o = capped(&["import", p, "--format", "json"]);
        assert_read(&o);
        let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let chunks = d["regions"][0]["chunks"].as_array().unwrap();
        assert_eq!(chunks.len(), BLOCKS as usize);
        // One stack for every block; its file name cut short, with an ellipsis.
        assert_eq!(d["stacks"].as_array().unwrap().len(), 1, "{name}");
        let file = d["stacks"][0]["frames"][0]["file"].as_str().unwrap();
        assert!(file.len() <= 4096 && file.ends_with('…'), "{} bytes", file.len());
        // Read to its end, where replay finds it has no trace.
        assert_refused(&capped(&["replay", p]), &path, "no trace to replay");
    }
}

#[test]
fn a_file_name_shared_by_a_million_frames_of_distinct_stacks_is_refused_naming_the_file() {
    let dir = temp_dir("distinct-stacks");
    let bytes = shared_file_name(Frames::OwnStacks, 900_000, false);
    let path = write(&dir, "stacks.pickle", &bytes);
    let p = path.to_str().unwrap();
    assert_refused(&capped(&["import", p]), &path, "expands to more than");
    assert_refused(&capped(&["replay", p]), &path, "expands to more than");
}

#[test]
fn trace_entries_sharing_one_file_name_are_read_in_bounded_memory() {
    let dir = temp_dir("shared-name-trace");
    for (name, layout) in [("shared-list.pickle", Frames::SharedList), ("own-lists.pickle", Frames::OwnLists)] {
        let bytes = shared_file_name(layout, 900_000, true);
        let path = write(&dir, name, &bytes);
        let p = path.to_str().unwrap();
        let o = capped(&["import", p, "--format", "json"]);
        assert_read(&o);
        let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(d["events"].as_array().unwrap().len(), BLOCKS as usize, "{name}");
        let o = capped(&["replay", p]);
        assert_read(&o);
    }
    let bytes = shared_file_name(Frames::OwnStacks, 900_000, true);
    let path = write(&dir, "stacks.pickle", &bytes);
    let p = path.to_str().unwrap();
    assert_refused(&capped(&["import", p]), &path, "expands to more than");
    assert_refused(&capped(&["replay", p]), &path, "expands to more than");
}

#[test]
fn a_dict_of_200_000_keys_is_read() {
    let dir = temp_dir("wide-dict");
    let bytes = wide_dict();
    let path = write(&dir, "wide.pickle", &bytes);
    let p = path.to_str().unwrap();
    let o = capped(&["import", p, "--format", "json"]);
    assert_read(&o);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["regions"][0]["chunks"].as_array().unwrap().len(), WIDE_BLOCKS as usize);
    let o = capped(&["replay", p]);
    // No trace to replay: refused as such, not a crash.
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// The limits must never refuse a real snapshot: what reading builds (frames, names, blocks,
/// events) stays far inside the budget for each of the real ones.
#[test]
#[cfg_attr(oomscope_missing = "shared", ignore = "needs the real data in ../shared, which is not here")]
fn real_snapshots_build_far_less_than_their_budget() {
    use oomscope_ingest::import::{torch_frames, torch_snapshot};
    let dir = shared().join("data/torch-snapshots");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 10, "{}", dir.display());
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let (d, built) = torch_snapshot::parse_measured(&f, &bytes, None).unwrap();
        let names: usize = d
            .stacks
            .iter()
            .flat_map(|s| &s.frames)
            .map(|fr| fr.function.as_ref().map_or(0, String::len) + fr.file.as_ref().map_or(0, String::len))
            .sum();
        let len = bytes.len() as f64;
        eprintln!(
            "{}: {} bytes; frame names copied {:.2}x its size, all it built {:.2}x",
            f.file_name().unwrap().to_string_lossy(),
            bytes.len(),
            names as f64 / len,
            built as f64 / len
        );
        assert!(built * 4 < torch_frames::budget(bytes.len()), "{}: built {built} bytes", f.display());
    }
}
