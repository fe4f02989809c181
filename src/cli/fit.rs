//! `oomscope fit WORKLOAD|TRACE --device CARD|SIZE`: what fits, by replay.

use super::args::{FitArgs, FitFormat};
use super::{CliError, output};
use oomscope_base::size::human;
use oomscope_ingest::input_kind::{self, Kind, Reader};
use oomscope_ingest::trace;
use oomscope_sim::workload::model;
use oomscope_sim::workload::model::Mode;
use oomscope_sim::workload::{Workload, builtin, fit};
use std::fmt::Write;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// Where `replay` and `fit` read their input from.
pub(super) enum Input {
    /// A built-in workload, or a regular file, read where it lies.
    Path,
    /// A pipe (`<(zcat trace.jsonl.gz)`, a FIFO, `/dev/stdin`), which can be read only once:
    /// its beginning, read to recognise it, and the rest, not read yet.
    Pipe { head: Vec<u8>, rest: std::fs::File },
}

impl Input {
    /// All of it: a workload or a snapshot.
    pub(super) fn bytes(self, path: &Path) -> std::io::Result<Vec<u8>> {
        match self {
            Input::Path => std::fs::read(path),
            Input::Pipe { mut head, mut rest } => {
                rest.read_to_end(&mut head)?;
                Ok(head)
            }
        }
    }

    /// A trace, to parse as it is read, and its size when known (0 for a pipe).
    pub(super) fn reader(self, path: &Path) -> std::io::Result<(Box<dyn BufRead>, u64)> {
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
    pub(super) fn head(&self) -> Option<&[u8]> {
        match self {
            Input::Path => None,
            Input::Pipe { head, .. } => Some(head),
        }
    }
}

/// What `input` is for `reader` (`replay` or `fit`), and where to read it: a built-in name
/// is a workload; a file, what its content shows ([`input_kind`]), refused when `reader`
/// does not read it, or when it is empty; `None` when the file cannot be read (the reader's
/// own error says why). A pipe is read once: its beginning here, the rest by the parser.
pub(super) fn open(input: &str, reader: Reader) -> Result<(Option<Kind>, Input), CliError> {
    if builtin::find(input).is_some() {
        return Ok((Some(Kind::Workload), Input::Path));
    }
    let path = Path::new(input);
    let pipe = std::fs::metadata(path).is_ok_and(|m| m.file_type().is_fifo() || m.file_type().is_char_device());
    let (kind, source) = if pipe {
        let mut rest = std::fs::File::open(path).map_err(|e| CliError(format!("{input}: cannot open it: {e}")))?;
        let mut head = Vec::with_capacity(input_kind::HEAD);
        (&mut rest)
            .take(input_kind::HEAD as u64)
            .read_to_end(&mut head)
            .map_err(|e| CliError(format!("{input}: cannot read it: {e}")))?;
        let mut kind = input_kind::recognise(&head);
        // Blanks as far as looked: the rest says.
        if kind == Kind::Empty && head.len() == input_kind::HEAD {
            kind = Kind::Other;
        }
        if let Some(refusal) = input_kind::refusal(path, kind, reader) {
            return Err(CliError(refusal));
        }
        (Some(kind), Input::Pipe { head, rest })
    } else {
        (input_kind::check(path, reader).map_err(CliError)?, Input::Path)
    };
    if kind == Some(Kind::Empty) {
        return Err(empty(path, reader));
    }
    Ok((kind, source))
}

/// An input with nothing in it: nothing to replay, rather than a replay that fits.
pub(super) fn empty(path: &Path, reader: Reader) -> CliError {
    CliError(format!(
        "{} is empty: no trace or workload to {} (was the file written, or the pipe fed?)",
        path.display(),
        if reader == Reader::Fit { "fit" } else { "replay" }
    ))
}

/// A workload: built in, a file, or what a pipe held.
pub(super) fn workload(input: &str, source: Input) -> Result<Workload, oomscope_sim::workload::ModelError> {
    let Input::Pipe { .. } = source else { return Workload::load(input) };
    let path = Path::new(input);
    let unreadable = |message: String| oomscope_sim::workload::ModelError { path: path.into(), line: 0, message };
    let bytes = source.bytes(path).map_err(|e| unreadable(format!("cannot read the model: {e}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| unreadable("cannot read the model: stream did not contain valid UTF-8".into()))?;
    Ok(Workload { model: model::parse(path, &text)?, path: path.into() })
}

/// A trace by its content; when the content does not say (a file damaged at its start),
/// by its name: `.jsonl`, or a first line that looks like an event; else a workload.
/// `head`: what was read of a pipe, which cannot be read again.
pub(super) fn is_trace(input: &str, kind: Option<Kind>, head: Option<&[u8]>) -> bool {
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
pub(super) fn events(t: &trace::Trace, path: &Path, reader: Reader) -> Result<(), CliError> {
    if !t.events.is_empty() {
        return Ok(());
    }
    Err(CliError(format!(
        "{}: the trace has no events, so nothing to {} (the trace format is in docs/trace-format.md)",
        path.display(),
        if reader == Reader::Fit { "fit" } else { "replay" }
    )))
}

pub fn run(a: FitArgs) -> Result<u8, CliError> {
    if a.others >= a.device.total {
        return Err(CliError(format!(
            "--others {} leaves nothing of the {} device",
            human(a.others),
            human(a.device.total)
        )));
    }
    let mut s = fit::settings(a.device.total, a.others, &a.device.model, a.limit);
    s.allocator.allow_growth = a.allow_growth;
    s.allocator.garbage_collection = a.gc;
    let on = format!(
        "{} ({}{})",
        if a.device.model == "simulated GPU" { "a simulated GPU".to_string() } else { a.device.model.clone() },
        human(a.device.total),
        if a.others > 0 { format!(", {} held by others", human(a.others)) } else { String::new() }
    );
    let (kind, source) = open(&a.input, Reader::Fit)?;
    let path = Path::new(&a.input);
    if is_trace(&a.input, kind, source.head()) {
        let (input, _) =
            source.reader(path).map_err(|e| CliError(format!("{}: cannot open the trace: {e}", path.display())))?;
        let t = trace::parse(path, input, |_| {}).map_err(|e| {
            CliError(input_kind::explain(format!("{e}\n  (the trace format is in docs/trace-format.md)"), path, kind))
        })?;
        events(&t, path, Reader::Fit)?;
        let f = fit::min_limit(&t, &s);
        let text = match a.format {
            FitFormat::Json => serde_json::to_string(&f).unwrap_or_default() + "\n",
            FitFormat::Text => {
                let mut o = String::new();
                let _ = writeln!(o, "{} ({} events) on {on}:", a.input, t.events.len());
                let _ = writeln!(o, "  needed with unlimited memory (peak in use):  {}", human(f.needed));
                if let Some(largest) = f.never_fits {
                    let why = if largest > fit::LIMIT_BOUND {
                        format!("it requests {} at once, more than any device has", human(largest))
                    } else {
                        "it needs more memory than any device has".to_string()
                    };
                    let _ = writeln!(
                        o,
                        "  smallest limit it replays under:            none up to {}: {why}",
                        human(fit::LIMIT_BOUND)
                    );
                } else {
                    let _ = writeln!(
                        o,
                        "  smallest limit it replays under:            {} (the allocator's rounding, whole-chunk waste and fragmentation add {})",
                        human(f.min_limit),
                        human(f.min_limit.saturating_sub(f.needed))
                    );
                }
                if f.never_fits.is_some() {
                    let _ = writeln!(o, "  on this device: does not fit");
                } else if f.fits {
                    let _ = writeln!(
                        o,
                        "  on this device: fits, {} to spare",
                        human(f.capacity.saturating_sub(f.min_limit))
                    );
                } else {
                    let _ = writeln!(
                        o,
                        "  on this device: does not fit, {} short",
                        human(f.min_limit.saturating_sub(f.capacity))
                    );
                }
                let _ = writeln!(o, "  (a trace's batch cannot change; give a workload to find the largest batch)");
                o
            }
        };
        output::print(&text)?;
        // As `replay`: 1 when the answer is that it does not fit.
        return Ok(if f.fits && f.never_fits.is_none() { 0 } else { 1 });
    }
    let w = workload(&a.input, source).map_err(|e| {
        CliError(input_kind::explain(format!("{e}\n  (the model format is in docs/workload-format.md)"), path, kind))
    })?;
    let m = &w.model;
    let eval = m.mode == Mode::Eval;
    let max = a.max_batch.unwrap_or(if eval { m.samples.unwrap_or(m.batch) } else { 65_536 });
    let f = fit::largest_batch(&w, &s, max)
        .map_err(|e| CliError(format!("{e}\n  (the model format is in docs/workload-format.md)")))?;
    let text = match a.format {
        FitFormat::Json => serde_json::to_string(&f).unwrap_or_default() + "\n",
        FitFormat::Text => {
            let mut o = String::new();
            let what = if eval { "evaluating" } else { "training" };
            let _ = writeln!(
                o,
                "{}: {what}, {}, input {} {}, on {on}, limit {}\n",
                m.name,
                m.optimizer.name(),
                oomscope_base::shape::text(&m.input),
                m.dtype.name(),
                human(s.allocator.limit)
            );
            let unit = if eval { "chunk" } else { "batch" };
            let _ = writeln!(o, "  {unit:>7}   needed       on this device");
            // The doubling steps and the final bracket; the bisection in between is in --format json.
            let smallest_oom = f.probes.iter().find(|p| !p.fits).map(|p| p.batch);
            let shown = f.probes.iter().filter(|p| {
                p.batch.is_power_of_two()
                    || Some(p.batch) == smallest_oom
                    || f.largest.as_ref().is_some_and(|l| l.batch == p.batch)
            });
            for p in shown {
                let verdict = if p.fits {
                    format!("fits, {} free at its peak", human(f.capacity.saturating_sub(p.peak_in_use)))
                } else {
                    "OOM".to_string()
                };
                let _ = writeln!(o, "  {:>7}   {:<11}  {verdict}", p.batch, human(p.needed));
            }
            o.push('\n');
            match &f.largest {
                Some(p) => {
                    let more =
                        if f.capped { " (the most tried; --max-batch raises it)".to_string() } else { String::new() };
                    if eval {
                        let samples = m.samples.unwrap_or(m.batch);
                        let k = samples.div_ceil(p.batch);
                        let _ = writeln!(
                            o,
                            "Largest evaluation chunk that fits (replayed through the allocator, fragmentation included): {}{more},\n  with {} free at its peak. Split the {samples} samples into {k} chunks of {} and average the results.",
                            p.batch,
                            human(f.capacity.saturating_sub(p.peak_in_use)),
                            samples.div_ceil(k)
                        );
                    } else {
                        let _ = writeln!(
                            o,
                            "Largest batch that fits (replayed through the allocator, fragmentation included): {}{more}, with {} free at its peak.",
                            p.batch,
                            human(f.capacity.saturating_sub(p.peak_in_use))
                        );
                    }
                }
                None => {
                    let _ = writeln!(
                        o,
                        "Nothing fits: even a {unit} of 1 needs {} and {} can be had.",
                        human(f.probes[0].needed),
                        human(f.capacity)
                    );
                }
            }
            if let Some(b) = f.too_large_from {
                let _ = writeln!(
                    o,
                    "From {unit} {b} up, a tensor would take more than {} (2^64 bytes): no such {unit} can exist, let alone fit.",
                    human(u64::MAX)
                );
            }
            let _ = writeln!(
                o,
                "Straight line (fixed + per sample x {unit}), fitted to the replays: {} + {} x {unit}, which predicts {}.",
                human(f.fixed.max(0.0) as u64),
                human(f.per_sample.max(0.0) as u64),
                f.line_prediction
            );
            o
        }
    };
    output::print(&text)?;
    // Nothing fits: the answer is a failure, for scripts as for people.
    Ok(if f.largest.is_some() { 0 } else { 1 })
}
