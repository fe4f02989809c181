//! What a file is, from cheap signs at its beginning, so that every command that takes a
//! file can say the same thing when given a kind it does not read (the command line words
//! it: what the file is, and the command that reads it).
//!
//! The signs: a pickle's first two bytes (`0x80`, then protocol 2 to 5); the top-level keys
//! of the JSON object a file starts with (a dump's `version` with its `tool`, `device`...;
//! a model's `layers`, or its `input` and `batch`; a trace line's `ev`); and in a text,
//! TensorFlow's allocator report or the out-of-memory messages `oomscope import` reads.
//! The keys count only when the file is JSON: its first value spans the whole file (or the
//! part looked at), or, for a trace, the lines after the first are JSON too. A log whose
//! first line is a JSON object (a config it printed) is a text, read for its text signs.
//! Only the file's beginning is read ([`HEAD`]), and for a text with no sign in it, its end
//! ([`TAIL`]): logs print the out-of-memory report after their training output.
//!
//! A file damaged at its start (or JSON of another kind) is not named here: the command
//! then parses it, and its error says where the damage is.

use crate::import::{message, tf_log};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// How much of a file is looked at for JSON and pickle signs.
pub const HEAD: usize = 64 << 10;

/// How much of a text's end is searched for a TensorFlow report or an out-of-memory message
/// when its beginning has none (logs print the report after their training output, near
/// their end). What lies between the beginning and the end is not read: recognising a
/// file costs at most [`HEAD`] and [`TAIL`] bytes, whatever its size.
pub const TAIL: u64 = 1 << 20;

/// The kinds of input oomscope's commands read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An oomscope dump (`docs/dump-format.md`).
    Dump,
    /// An allocation trace, JSON Lines (`docs/trace-format.md`).
    Trace,
    /// A model description: a workload (`docs/workload-format.md`).
    Workload,
    /// A TensorFlow log with its allocator's out-of-memory report.
    TfLog,
    /// A PyTorch memory snapshot (a pickle).
    TorchSnapshot,
    /// An out-of-memory message (PyTorch, XLA/JAX, cuBLAS/cuDNN, TensorFlow's error alone).
    Message,
    /// JSON of none of these kinds, or too damaged at its start to tell.
    Json,
    /// Nothing but blanks.
    Empty,
    /// None of these.
    Other,
}

impl Kind {
    /// True for the kinds named by signs (not [`Kind::Json`] or [`Kind::Other`]).
    pub fn is_known(self) -> bool {
        !matches!(self, Kind::Json | Kind::Empty | Kind::Other)
    }
}

/// Which importer reads what `import` was given (`bytes`, all of it; `path` names it): a
/// pickle (protocol 2+ starts with 0x80) or a `.pickle`/`.pkl`/`.pt` name is a snapshot; a
/// text with TensorFlow's allocator report (or its `OOM when allocating tensor` error) is a
/// TF log; another out-of-memory message is a message; and anything else is read as a TF
/// log, whose error lists what was looked for.
pub fn importer(path: &Path, bytes: &[u8]) -> crate::import::From {
    use crate::import::From;
    if is_snapshot(path, bytes) {
        return From::TorchSnapshot;
    }
    text_importer(&crate::import::paste::undo(&crate::import::unescape(&String::from_utf8_lossy(bytes))).text)
}

/// Which importer reads a text, its paste damage undone: a message, or a TF log.
pub(crate) fn text_importer(text: &str) -> crate::import::From {
    use crate::import::From;
    // XLA's own account of the program (its rematerialization falling short; its buffer
    // assignment's totals where the BFC allocator's state, its Stats, is not in the text) says
    // more than the BFC allocator's lines beside it.
    // (An account cut before its totals says less than the allocator's own bar.)
    let account = text.contains("BufferAssignment stats:")
        && (text.contains("total allocation:") || !text.lines().any(crate::import::tf_log::is_occupancy))
        && !text.contains("Limit:")
        && !text.contains("InUse:");
    let xla = text.contains("by rematerialization; only reduced to") || account;
    if (xla || !tf_log::has_report(text)) && message::recognises(text) { From::Message } else { From::TfLog }
}

/// A pickle (protocol 2+ starts with 0x80), or a file named as one.
pub(crate) fn is_snapshot(path: &Path, bytes: &[u8]) -> bool {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    bytes.first() == Some(&0x80) || matches!(ext, "pickle" | "pkl" | "pt")
}

/// What `bytes` (a file's beginning, or all of it) are. Pure: looks only at what it is given.
pub fn recognise(bytes: &[u8]) -> Kind {
    if bytes.len() >= 2 && bytes[0] == 0x80 && (2..=5).contains(&bytes[1]) {
        return Kind::TorchSnapshot;
    }
    let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let Some(start) = bytes.iter().position(|b| !b.is_ascii_whitespace()) else {
        return Kind::Empty;
    };
    // Starts as JSON; is JSON when the start goes on to the end (see `is_json`).
    let starts_json = matches!(bytes[start], b'{' | b'[');
    let (mut json, mut damaged) = (false, false);
    if starts_json {
        let keys = top_level_keys(bytes);
        let kind = keys.as_deref().and_then(kind_of_keys);
        // An object damaged before its first key: its parser says where.
        damaged = keys.is_some_and(|k| k.is_empty());
        json = is_json(&bytes[start..], kind);
        if json {
            if let Some(kind) = kind {
                return kind;
            }
            if damaged {
                return Kind::Json;
            }
        }
    }
    // A trace may start with a line that is not an event (a header a script wrote); when
    // that line is JSON and the rest is not, the text's signs come first: a log that
    // printed a JSON line (its config) is more likely than a trace damaged on line 2.
    if !starts_json && trace_after_a_header(bytes) {
        return Kind::Trace;
    }
    if let Some(kind) = text_kind(bytes) {
        return kind;
    }
    if starts_json && !json && trace_after_a_header(bytes) {
        return Kind::Trace;
    }
    if json || damaged { Kind::Json } else { Kind::Other }
}

/// The kind a text's signs name: a TensorFlow report, an out-of-memory message, or
/// TensorFlow's weaker signs (unless the text is another failure that `import` refuses as
/// no OOM). `bytes` may be cut anywhere (a file's end starts inside a line).
fn text_kind(bytes: &[u8]) -> Option<Kind> {
    let text = crate::import::unescape(&String::from_utf8_lossy(bytes));
    if tf_log::has_report(&text) {
        return Some(Kind::TfLog);
    }
    if message::recognises(&text) {
        return Some(Kind::Message);
    }
    if tf_signs(&text) && message::not_an_oom(&text).is_none() {
        return Some(Kind::TfLog);
    }
    None
}

/// True when `bytes`, which start with `{` or `[`, are JSON as far as they go: their first
/// value is cut by their end (a file's beginning) or is followed by blanks alone; or, when
/// that value is a trace event (`kind`), it ends its line and the next lines start as JSON
/// objects too (JSON Lines). Brackets are matched, not checked: a file damaged inside is
/// still JSON here, and its parser says where.
fn is_json(bytes: &[u8], kind: Option<Kind>) -> bool {
    let Some(end) = first_value_end(bytes) else { return true };
    let rest = &bytes[end..];
    if rest.iter().all(u8::is_ascii_whitespace) {
        return true;
    }
    if kind != Some(Kind::Trace) {
        return false;
    }
    let mut lines = rest.split(|&b| b == b'\n');
    let ends_its_line = lines.next().is_some_and(|l| l.iter().all(u8::is_ascii_whitespace));
    ends_its_line
        && lines
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .take(4)
            .all(|l| l.trim_ascii_start().starts_with(b"{"))
}

/// Where the JSON value `bytes` start with (at a bracket) ends, by its brackets, outside
/// strings; `None` when `bytes` end first.
fn first_value_end(bytes: &[u8]) -> Option<usize> {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for (i, &b) in bytes.iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// What a file is: its beginning ([`HEAD`]), and for a text with no sign there, its end
/// ([`TAIL`]). Reads at most `HEAD + TAIL` bytes, whatever the file's size.
pub fn of_file(path: &Path) -> std::io::Result<Kind> {
    of_reader(std::fs::File::open(path)?)
}

/// [`of_file`] on any file-like reader: its beginning, then if need be its end.
pub fn of_reader(mut file: impl Read + Seek) -> std::io::Result<Kind> {
    let mut head = Vec::with_capacity(HEAD);
    (&mut file).take(HEAD as u64).read_to_end(&mut head)?;
    let kind = recognise(&head);
    if !needs_the_end(kind, &head) {
        return Ok(kind);
    }
    let len = file.seek(SeekFrom::End(0))?;
    let from = len.saturating_sub(TAIL).max(HEAD as u64);
    if from >= len {
        return Ok(kind);
    }
    file.seek(SeekFrom::Start(from))?;
    let mut tail = Vec::with_capacity((len - from) as usize);
    file.take(TAIL).read_to_end(&mut tail)?;
    Ok(end_kind(kind, &tail))
}

/// What a whole file held in memory is, as [`of_file`] says: its beginning, and for a text
/// with no sign there, its end.
pub fn of_bytes(bytes: &[u8]) -> Kind {
    let head = &bytes[..bytes.len().min(HEAD)];
    let kind = recognise(head);
    if !needs_the_end(kind, head) || bytes.len() <= HEAD {
        return kind;
    }
    let from = bytes.len().saturating_sub(TAIL as usize).max(HEAD);
    end_kind(kind, &bytes[from..])
}

/// What a file is by its end, when its beginning (of `head_kind`) named no kind.
fn end_kind(head_kind: Kind, tail: &[u8]) -> Kind {
    match text_kind(tail) {
        Some(kind) => kind,
        None if head_kind == Kind::Empty && tail.iter().all(u8::is_ascii_whitespace) => Kind::Empty,
        None => Kind::Other,
    }
}

/// True when a file's beginning, a whole [`HEAD`] of text, names no kind: its end may.
fn needs_the_end(kind: Kind, head: &[u8]) -> bool {
    matches!(kind, Kind::Other | Kind::Empty) && head.len() >= HEAD && is_text(head)
}

/// Mostly printable: a log, not a binary.
fn is_text(bytes: &[u8]) -> bool {
    let control = bytes.iter().filter(|&&b| b < 0x20 && !matches!(b, b'\n' | b'\r' | b'\t' | 0x1b)).count();
    control * 100 <= bytes.len()
}

/// The kind a JSON object's top-level keys name.
fn kind_of_keys(keys: &[String]) -> Option<Kind> {
    let has = |k: &str| keys.iter().any(|x| x == k);
    const DUMP_KEYS: &[&str] =
        &["tool", "source", "device", "allocator", "stats", "oom", "ooms", "usage_by_node", "bins", "regions"];
    if has("version") && (keys.len() == 1 || DUMP_KEYS.iter().any(|k| has(k))) {
        return Some(Kind::Dump);
    }
    if has("layers") || (has("input") && has("batch")) {
        return Some(Kind::Workload);
    }
    if has("ev") {
        return Some(Kind::Trace);
    }
    None
}

/// True when one of the first lines (after one that is not JSON) is a trace event.
fn trace_after_a_header(bytes: &[u8]) -> bool {
    bytes.split(|&b| b == b'\n').filter(|l| !l.iter().all(u8::is_ascii_whitespace)).take(4).any(|l| {
        l.trim_ascii_start().starts_with(b"{")
            && top_level_keys(l).as_deref().and_then(kind_of_keys) == Some(Kind::Trace)
    })
}

/// TensorFlow's signs short of its report: the allocator's name (or its source file in a
/// log line's prefix), its error's class, or its tables of bins and chunks.
fn tf_signs(text: &str) -> bool {
    text.contains("BFCAllocator")
        || text.contains("bfc_allocator.cc")
        || text.contains("ResourceExhaustedError")
        || text
            .lines()
            .filter(|l| l.contains("Chunks") && (l.contains("Bin (") || l.contains("Chunks of size")))
            .nth(1)
            .is_some()
}

/// The keys of the JSON object `bytes` start with, at its top level, as far as `bytes` go
/// (a file's beginning cuts it anywhere) or until the JSON is malformed. `None` when
/// `bytes` do not start with an object.
fn top_level_keys(bytes: &[u8]) -> Option<Vec<String>> {
    let mut s = Scan { b: bytes, i: 0 };
    s.blanks();
    if s.next()? != b'{' {
        return None;
    }
    let mut keys = Vec::new();
    while keys.len() < 64 {
        s.blanks();
        match s.next() {
            Some(b'"') => {}
            _ => break,
        }
        let Some(key) = s.string() else { break };
        keys.push(key);
        s.blanks();
        if s.next() != Some(b':') || !s.value() {
            break;
        }
        s.blanks();
        if s.next() != Some(b',') {
            break;
        }
    }
    Some(keys)
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn next(&mut self) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    fn blanks(&mut self) {
        while self.b.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    /// The rest of a string whose opening quote was read; `None` when it is cut.
    fn string(&mut self) -> Option<String> {
        let start = self.i;
        loop {
            match self.next()? {
                b'"' => return Some(String::from_utf8_lossy(&self.b[start..self.i - 1]).into_owned()),
                b'\\' => {
                    self.next()?;
                }
                _ => {}
            }
        }
    }

    /// Skips one value; false when it is cut or malformed.
    fn value(&mut self) -> bool {
        self.blanks();
        let mut depth = 0usize;
        loop {
            let Some(c) = self.b.get(self.i).copied() else { return false };
            match c {
                b'"' => {
                    self.i += 1;
                    if self.string().is_none() {
                        return false;
                    }
                }
                b'{' | b'[' => {
                    depth += 1;
                    self.i += 1;
                }
                b'}' | b']' if depth > 0 => {
                    depth -= 1;
                    self.i += 1;
                }
                b',' | b'}' | b']' if depth == 0 => return true,
                _ if depth == 0 && c.is_ascii_whitespace() => return true,
                _ => self.i += 1,
            }
            if depth == 0 && matches!(c, b'"' | b'}' | b']') {
                return true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_kinds_by_their_keys_even_cut_short() {
        let dump = "{\"version\":1,\"tool\":\"oomscope 0.1.0\",\"source\":{\"kind\":\"demo\"},\"device\":{";
        assert_eq!(recognise(dump.as_bytes()), Kind::Dump);
        assert_eq!(recognise(b"{\"version\": 1,\n  \"tool\": "), Kind::Dump);
        assert_eq!(recognise(b"{\"version\":1"), Kind::Dump);
        let model = "{\n  \"name\": \"unet\",\n  \"about\": \"a \\\"U\\\"-Net {x}\",\n  \"input\": [720, 1280, 9],\n  \"batch\": 2,\n  \"layers\": [\n    {\"op\": \"conv2d\",";
        assert_eq!(recognise(model.as_bytes()), Kind::Workload);
        assert_eq!(recognise(b"{\"input\": [28, 28, 1], \"batch\": 8, \"la"), Kind::Workload);
        assert_eq!(
            recognise(b"{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":1024}\n{\"ev\":\"alloc\",\"id\":\"b\",\"by"),
            Kind::Trace
        );
        assert_eq!(recognise(b"{\"ev\":\"alloc\",\"id\":\"b\",\"by"), Kind::Trace);
        assert_eq!(recognise(b"# written by my script\n{\"ev\":\"step\",\"step\":0}\n"), Kind::Trace);
        // A dump's history holds "ev" keys, nested: still a dump.
        assert_eq!(recognise(b"{\"version\":1,\"events\":[{\"ev\":\"alloc\"}],\"tool\":\"x\"}"), Kind::Dump);
        assert_eq!(recognise(b"\xEF\xBB\xBF  {\"version\":1,\"tool\":\"x\"}"), Kind::Dump);
    }

    #[test]
    fn other_json_and_damaged_starts_are_left_to_the_parsers() {
        for text in ["{\"traceEvents\": []}", "[1,2]", "{", "{ev: alloc}", "{\"versio"] {
            assert_eq!(recognise(text.as_bytes()), Kind::Json, "{text}");
        }
        for text in ["", "   \n"] {
            assert_eq!(recognise(text.as_bytes()), Kind::Empty, "{text:?}");
        }
        for text in ["epoch 1 loss 0.3\n", "Bin (256): \tTotal Chunks: 0", "\u{89}PNG\r\n"] {
            assert_eq!(recognise(text.as_bytes()), Kind::Other, "{text:?}");
        }
    }

    #[test]
    fn pickles_logs_and_messages() {
        assert_eq!(recognise(&[0x80, 0x04, 0x95, 0, 0]), Kind::TorchSnapshot);
        assert_eq!(recognise(&[0x80, 0x02]), Kind::TorchSnapshot);
        assert_eq!(recognise(&[0x80, 0x09, 0x00]), Kind::Other);
        let log = "2018-01-01 12:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:273] \
                   Allocator (GPU_0_bfc) ran out of memory trying to allocate 957.03MiB.  Current allocation summary follows.\n";
        assert_eq!(recognise(log.as_bytes()), Kind::TfLog);
        assert_eq!(recognise(b"Bin (256): \tTotal Chunks: 1\nBin (512): \tTotal Chunks: 0\n"), Kind::TfLog);
        assert_eq!(recognise(b"ResourceExhaustedError: something"), Kind::TfLog);
        let torch = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB";
        assert_eq!(recognise(torch.as_bytes()), Kind::Message);
        // A message copied out of JSON is still a message.
        let quoted = format!("{{\"error\": \"{torch}\"}}");
        assert_eq!(recognise(quoted.as_bytes()), Kind::Message);
    }

    #[test]
    fn a_log_that_starts_with_a_json_line_is_a_text() {
        let oom = "2018-01-01 12:00:00.000000: W tensorflow/core/common_runtime/bfc_allocator.cc:273] \
                   Allocator (GPU_0_bfc) ran out of memory trying to allocate 957.03MiB.  Current allocation summary follows.\n";
        let torch = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB\n";
        for first in
            ["{\"input\": [28,28,1], \"batch\": 64}", "{\"version\": 2, \"device\": \"cuda:0\"}", "{\"ev\":\"alloc\"}"]
        {
            let log = format!("{first}\nepoch 1 loss 0.31\n{oom}");
            assert_eq!(recognise(log.as_bytes()), Kind::TfLog, "{log}");
            let log = format!("{first}\n\nstep 1\n{torch}");
            assert_eq!(recognise(log.as_bytes()), Kind::Message, "{log}");
        }
        // No sign in the text: not what its first line's keys say.
        assert_eq!(recognise(b"{\"input\": [28,28,1], \"batch\": 64}\nepoch 1 loss 0.31\n"), Kind::Other);
        assert_eq!(recognise(b"{\"version\": 2, \"device\": \"cuda:0\"}\nepoch 1 loss 0.31\n"), Kind::Other);
        // JSON files keep their kinds: whole, cut, pretty, followed by blanks, JSON Lines.
        assert_eq!(recognise(b"{\"input\": [28,28,1], \"batch\": 64}\n\n  \n"), Kind::Workload);
        assert_eq!(
            recognise(b"{\n  \"version\": 1,\n  \"device\": {\"name\": \"x}\"},\n  \"regions\": [\n"),
            Kind::Dump
        );
        let trace = "{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":1}\n\n{\"ev\":\"free\",\"id\":\"a\"}\n{\"ev\":\"al";
        assert_eq!(recognise(trace.as_bytes()), Kind::Trace);
        // A trace damaged on its second line, with no sign of a log: still a trace, for its
        // parser to say where.
        assert_eq!(recognise(b"{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":1}\nev alloc a 1\n"), Kind::Trace);
        // A header that is JSON, then events.
        assert_eq!(recognise(b"{\"note\":\"mine\"}\n{\"ev\":\"step\",\"step\":0}\n"), Kind::Trace);
    }

    /// A file of `len` bytes, made up as it is read: `line` over and over, and `end` as its
    /// last bytes. Counts what is read.
    struct Made {
        len: u64,
        pos: u64,
        line: &'static [u8],
        end: &'static [u8],
        read: u64,
    }

    impl Read for Made {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = (buf.len() as u64).min(self.len.saturating_sub(self.pos)) as usize;
            let end_from = self.len - self.end.len() as u64;
            for (i, b) in buf[..n].iter_mut().enumerate() {
                let at = self.pos + i as u64;
                *b = if at >= end_from {
                    self.end[(at - end_from) as usize]
                } else {
                    self.line[(at % self.line.len() as u64) as usize]
                };
            }
            self.pos += n as u64;
            self.read += n as u64;
            Ok(n)
        }
    }

    impl Seek for Made {
        fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
            self.pos = match to {
                SeekFrom::Start(p) => p,
                SeekFrom::End(d) => self.len.saturating_add_signed(d),
                SeekFrom::Current(d) => self.pos.saturating_add_signed(d),
            };
            Ok(self.pos)
        }
    }

    #[test]
    fn a_large_text_is_recognised_by_its_beginning_and_end_alone() {
        let torch: &[u8] = b"\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n";
        // 100 GiB, made up as read: were it read whole, the test would not end.
        let len = 100u64 << 30;
        let mut log = Made { len, pos: 0, line: b"epoch 1 loss 0.31\n", end: torch, read: 0 };
        assert_eq!(of_reader(&mut log).unwrap(), Kind::Message);
        assert!(log.read <= HEAD as u64 + TAIL, "read {} bytes", log.read);
        let mut notes = Made { len, pos: 0, line: b"epoch 1 loss 0.31\n", end: b"done\n", read: 0 };
        assert_eq!(of_reader(&mut notes).unwrap(), Kind::Other);
        assert!(notes.read <= HEAD as u64 + TAIL, "read {} bytes", notes.read);
        // A small file is read once, whole.
        let mut small = Made { len: 1000, pos: 0, line: b"epoch 1 loss 0.31\n", end: torch, read: 0 };
        assert_eq!(of_reader(&mut small).unwrap(), Kind::Message);
        assert_eq!(small.read, 1000);
        // In memory, the same answer.
        let mut text = b"epoch 1 loss 0.31\n".repeat((3 << 20) / 18);
        text.extend_from_slice(torch);
        assert_eq!(of_bytes(&text), Kind::Message);
        // Blanks alone are empty, however many.
        assert_eq!(of_bytes(&vec![b' '; 3 << 20]), Kind::Empty);
    }
}
