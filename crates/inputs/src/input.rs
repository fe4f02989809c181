//! What each command reads, in words: what a file is and the command that reads it, when a
//! command is given a kind it does not read (`oomscope_ingest::input_kind` tells the kind),
//! and the helpers the commands that read inputs share (a pipe read once, a workload or a
//! trace). The one place a front end asks what a file is.

use oomscope_base::Problem;
use oomscope_ingest::input_kind::{Kind, of_file};
use oomscope_ingest::trace;
use oomscope_sim::workload::{Workload, builtin, model};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// A kind in words, after "is".
pub fn describe(kind: Kind) -> &'static str {
    match kind {
        Kind::Dump => "an oomscope dump (the allocator's state at one moment)",
        Kind::Trace => "an allocation trace",
        Kind::Workload => "a model file (a workload)",
        Kind::TfLog => "a TensorFlow log with an out-of-memory report",
        Kind::TorchSnapshot => "a PyTorch memory snapshot",
        Kind::Message => "an out-of-memory message",
        Kind::Empty => "empty",
        Kind::Json | Kind::Other => "none of the files oomscope reads",
    }
}

/// The commands that take a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    Replay,
    Report,
    Import,
    Export,
    Diff,
    Tui,
    Fit,
    Demo,
}

impl Reader {
    pub fn name(self) -> &'static str {
        match self {
            Reader::Replay => "replay",
            Reader::Report => "report",
            Reader::Import => "import",
            Reader::Export => "export",
            Reader::Diff => "diff",
            Reader::Tui => "tui",
            Reader::Fit => "fit",
            Reader::Demo => "demo",
        }
    }

    /// True when the command reads files of this kind.
    pub fn reads(self, kind: Kind) -> bool {
        use Kind::*;
        match self {
            Reader::Replay => matches!(kind, Trace | Workload | TorchSnapshot),
            Reader::Report | Reader::Export | Reader::Diff => kind == Dump,
            Reader::Import => matches!(kind, TfLog | TorchSnapshot | Message),
            Reader::Tui => matches!(kind, Dump | TfLog | TorchSnapshot | Message),
            Reader::Fit => matches!(kind, Trace | Workload),
            Reader::Demo => kind == Workload,
        }
    }

    /// What the command reads, after "not".
    fn expects(self) -> &'static str {
        match self {
            Reader::Replay => "a trace, a workload or a PyTorch snapshot to replay",
            Reader::Report | Reader::Export | Reader::Diff => "an oomscope dump",
            Reader::Import => "a TensorFlow log, a PyTorch snapshot or an out-of-memory message",
            Reader::Tui => "an oomscope dump, a TensorFlow log, a PyTorch snapshot or an out-of-memory message",
            Reader::Fit => "a workload or a trace",
            Reader::Demo => "a workload",
        }
    }
}

/// The commands that read a kind, as typed (`FILE` stands for the file), best first.
fn readers(kind: Kind) -> &'static [(Reader, &'static str)] {
    match kind {
        Kind::Dump => &[(Reader::Report, "report FILE"), (Reader::Tui, "tui FILE")],
        Kind::Trace => &[(Reader::Replay, "replay FILE --limit SIZE"), (Reader::Fit, "fit FILE --device SIZE")],
        Kind::Workload => &[
            (Reader::Demo, "demo FILE"),
            (Reader::Fit, "fit FILE --device SIZE"),
            (Reader::Replay, "replay FILE --limit SIZE"),
        ],
        Kind::TfLog | Kind::Message => &[(Reader::Import, "import FILE"), (Reader::Tui, "tui FILE")],
        Kind::TorchSnapshot => {
            &[(Reader::Import, "import FILE"), (Reader::Replay, "replay FILE"), (Reader::Tui, "tui FILE")]
        }
        Kind::Json | Kind::Empty | Kind::Other => &[],
    }
}

/// What `reader` says when given `path` of `kind` it does not read: what the file is and
/// the command that reads it. `None` when it reads the kind, or the kind is not known (the
/// command's own parser then says what is wrong). `-` is standard input.
pub fn refusal(path: &Path, kind: Kind, reader: Reader) -> Option<String> {
    if reader.reads(kind) || !kind.is_known() {
        return None;
    }
    let stdin = path.as_os_str() == "-";
    let (shown, arg) = if stdin {
        ("standard input".to_string(), "FILE".to_string())
    } else {
        (path.display().to_string(), oomscope_base::shell::quoted(&path.display().to_string()))
    };
    let commands: Vec<String> =
        readers(kind).iter().map(|(_, c)| format!("`oomscope {}`", c.replace("FILE", &arg))).collect();
    let commands = match commands.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    };
    // What export and diff read is a dump: say how to get one.
    let dump = match (reader, kind) {
        (Reader::Export | Reader::Diff, Kind::TfLog | Kind::Message | Kind::TorchSnapshot) => {
            format!(" (`oomscope import {arg} -o DUMP` writes the dump `oomscope {}` reads)", reader.name())
        }
        (Reader::Export | Reader::Diff, Kind::Trace | Kind::Workload) => format!(
            " (`oomscope replay {arg} --limit SIZE -o DUMP` writes the dump `oomscope {}` reads)",
            reader.name()
        ),
        _ => String::new(),
    };
    Some(format!("{shown} is {}, not {}; {commands} reads it{dump}", describe(kind), reader.expects()))
}

/// What `path` is, for `reader`: refused with [`refusal`] when `reader` does not read its
/// kind. `None` when the file cannot be read (the command's own read then says why) or is
/// not a regular file: a pipe (`<(zcat dump.json.gz)`, `/dev/stdin`) can be read only once,
/// so it is not looked at here. A command that recognises a pipe reads it itself, once, and
/// gives what it read to [`recognise`] or [`of_bytes`] and to its parser (`replay` and
/// `fit` do); the others hand the pipe to their parser unrecognised.
pub fn check(path: &Path, reader: Reader) -> Result<Option<Kind>, Problem> {
    if !std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        return Ok(None);
    }
    let Ok(kind) = of_file(path) else { return Ok(None) };
    match refusal(path, kind, reader) {
        Some(r) => Err(Problem(r)),
        None => Ok(Some(kind)),
    }
}

/// A parser's `error` about `path` of `kind`, with [`none_of_them`] when the file is none
/// of the kinds oomscope reads: the parser's words stay first, with their line and column.
pub fn explain(error: impl std::fmt::Display, path: &Path, kind: Option<Kind>) -> String {
    if kind == Some(Kind::Other) { format!("{error}\n  ({})", none_of_them(path)) } else { error.to_string() }
}

/// The note added to a parser's error when the file is none of the kinds oomscope reads.
pub fn none_of_them(path: &Path) -> String {
    format!(
        "{} is none of the files oomscope reads: an oomscope dump, an allocation trace, a model file (a workload), \
         a TensorFlow log with an out-of-memory report, a PyTorch memory snapshot, an out-of-memory message",
        if path.as_os_str() == "-" { "standard input".to_string() } else { path.display().to_string() }
    )
}

/// Where `replay` and `fit` read their input from.
#[derive(Debug)]
pub enum Input {
    /// A built-in workload, or a regular file, read where it lies.
    Path,
    /// A pipe (`<(zcat trace.jsonl.gz)`, a FIFO, `/dev/stdin`), which can be read only once:
    /// its beginning, read to recognise it, and the rest, not read yet.
    Pipe { head: Vec<u8>, rest: std::fs::File },
}

impl Input {
    /// All of it: a workload or a snapshot.
    pub fn bytes(self, path: &Path) -> std::io::Result<Vec<u8>> {
        match self {
            Input::Path => std::fs::read(path),
            Input::Pipe { mut head, mut rest } => {
                rest.read_to_end(&mut head)?;
                Ok(head)
            }
        }
    }

    /// A trace, to parse as it is read, and its size when known (0 for a pipe).
    pub fn reader(self, path: &Path) -> std::io::Result<(Box<dyn BufRead>, u64)> {
        Ok(match self {
            Input::Path => {
                let file = std::fs::File::open(path)?;
                let size = file.metadata().map(|m| m.len()).unwrap_or(0);
                (Box::new(BufReader::with_capacity(1 << 20, file)), size)
            }
            Input::Pipe { head, rest } => {
                (Box::new(BufReader::with_capacity(1 << 20, std::io::Cursor::new(head).chain(rest))), 0)
            }
        })
    }

    /// What was read of a pipe to recognise it.
    pub fn head(&self) -> Option<&[u8]> {
        match self {
            Input::Path => None,
            Input::Pipe { head, .. } => Some(head),
        }
    }
}

/// What `input` is for `reader` (`replay` or `fit`), and where to read it: a built-in name
/// is a workload; a file, what its content shows (`oomscope_ingest::input_kind`), refused when `reader`
/// does not read it, or when it is empty; `None` when the file cannot be read (the reader's
/// own error says why). A pipe is read once: its beginning here, the rest by the parser.
pub fn open(input: &str, reader: Reader) -> Result<(Option<Kind>, Input), Problem> {
    if builtin::find(input).is_some() {
        return Ok((Some(Kind::Workload), Input::Path));
    }
    let path = Path::new(input);
    let pipe = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_char_device());
    let (kind, source) = if pipe {
        let mut rest =
            std::fs::File::open(path).map_err(|e| oomscope_base::problem!("{input}: cannot open it: {e}"))?;
        let mut head = Vec::with_capacity(oomscope_ingest::input_kind::HEAD);
        (&mut rest)
            .take(oomscope_ingest::input_kind::HEAD as u64)
            .read_to_end(&mut head)
            .map_err(|e| oomscope_base::problem!("{input}: cannot read it: {e}"))?;
        let mut kind = oomscope_ingest::input_kind::recognise(&head);
        // Blanks as far as looked: the rest says.
        if kind == Kind::Empty && head.len() == oomscope_ingest::input_kind::HEAD {
            kind = Kind::Other;
        }
        if let Some(refusal) = refusal(path, kind, reader) {
            return Err(Problem(refusal));
        }
        (Some(kind), Input::Pipe { head, rest })
    } else {
        (check(path, reader)?, Input::Path)
    };
    if kind == Some(Kind::Empty) {
        return Err(empty(path, reader));
    }
    Ok((kind, source))
}

/// An input with nothing in it: nothing to replay, rather than a replay that fits.
pub fn empty(path: &Path, reader: Reader) -> Problem {
    Problem(format!(
        "{} is empty: no trace or workload to {} (was the file written, or the pipe fed?)",
        path.display(),
        if reader == Reader::Fit { "fit" } else { "replay" }
    ))
}

/// A workload: built in, a file, or what a pipe held.
pub fn workload(input: &str, source: Input) -> Result<Workload, oomscope_format::InputError> {
    let Input::Pipe { .. } = source else { return Workload::load(input) };
    let path = Path::new(input);
    let unreadable = |message: String| oomscope_format::InputError { path: path.into(), line: 0, message };
    let bytes = source.bytes(path).map_err(|e| unreadable(format!("cannot read the model: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| unreadable("cannot read the model: stream did not contain valid UTF-8".into()))?;
    Ok(Workload { model: model::parse(path, &text)?, path: path.into() })
}

/// A trace by its content; when the content does not say (a file damaged at its start),
/// by its name: `.jsonl`, or a first line that looks like an event; else a workload.
/// `head`: what was read of a pipe, which cannot be read again.
pub fn is_trace(input: &str, kind: Option<Kind>, head: Option<&[u8]>) -> bool {
    match kind {
        Some(Kind::Trace) => return true,
        Some(Kind::Workload) => return false,
        _ => {}
    }
    if builtin::find(input).is_some() {
        return false;
    }
    if input.ends_with(".jsonl") {
        return true;
    }
    if input.ends_with(".json") {
        return false;
    }
    // The first line is enough: a trace can be gigabytes, and this runs before it is read.
    fn looks_like_an_event(input: impl BufRead) -> bool {
        input.lines().map_while(Result::ok).find(|l| !l.trim().is_empty()).is_some_and(|l| l.contains("\"ev\""))
    }
    if let Some(head) = head {
        return looks_like_an_event(head);
    }
    let Ok(file) = std::fs::File::open(input) else { return false };
    looks_like_an_event(BufReader::new(file.take(1 << 20)))
}

/// A trace with no events (blank lines, `region` lines alone) is refused, not replayed as
/// fitting.
pub fn events(t: &trace::Trace, path: &Path, reader: Reader) -> Result<(), Problem> {
    if !t.events.is_empty() {
        return Ok(());
    }
    Err(Problem(format!(
        "{}: the trace has no events, so nothing to {} (the trace format is in docs/trace-format.md)",
        path.display(),
        if reader == Reader::Fit { "fit" } else { "replay" }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_file_what_it_is_and_the_command_that_reads_it() {
        let p = Path::new("fixtures/workloads/unet.json");
        assert_eq!(refusal(p, Kind::Workload, Reader::Replay), None);
        assert_eq!(refusal(p, Kind::Json, Reader::Report), None);
        assert_eq!(
            refusal(p, Kind::Workload, Reader::Report).unwrap(),
            "fixtures/workloads/unet.json is a model file (a workload), not an oomscope dump; \
             `oomscope demo fixtures/workloads/unet.json`, `oomscope fit fixtures/workloads/unet.json --device SIZE` \
             or `oomscope replay fixtures/workloads/unet.json --limit SIZE` reads it"
        );
        let d = Path::new("my dump.json");
        assert_eq!(
            refusal(d, Kind::Dump, Reader::Replay).unwrap(),
            "my dump.json is an oomscope dump (the allocator's state at one moment), not a trace, a workload or a \
             PyTorch snapshot to replay; `oomscope report 'my dump.json'` or `oomscope tui 'my dump.json'` reads it"
        );
        let s = refusal(Path::new("-"), Kind::Dump, Reader::Import).unwrap();
        assert!(s.starts_with("standard input is an oomscope dump") && s.contains("`oomscope report FILE`"), "{s}");
        let e = refusal(Path::new("t.log"), Kind::TfLog, Reader::Export).unwrap();
        assert!(e.ends_with("(`oomscope import t.log -o DUMP` writes the dump `oomscope export` reads)"), "{e}");
    }

    #[test]
    fn every_known_kind_has_a_reader_and_every_reader_refuses_the_rest() {
        let kinds = [Kind::Dump, Kind::Trace, Kind::Workload, Kind::TfLog, Kind::TorchSnapshot, Kind::Message];
        let all = [
            Reader::Replay,
            Reader::Report,
            Reader::Import,
            Reader::Export,
            Reader::Diff,
            Reader::Tui,
            Reader::Fit,
            Reader::Demo,
        ];
        for k in kinds {
            assert!(!readers(k).is_empty());
            for (r, _) in readers(k) {
                assert!(r.reads(k), "{r:?} is named as reading {k:?}");
            }
            for r in all {
                assert_eq!(refusal(Path::new("f"), k, r).is_none(), r.reads(k), "{r:?} {k:?}");
            }
        }
    }
}
