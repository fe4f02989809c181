//! `oomscope export DUMP --format torch-snapshot|perfetto`.

use super::CliError;
use super::args::{ExportArgs, ExportFormat};
use oomscope_format as dump;
use oomscope_format::atomic;
use oomscope_inputs::input::{self, Reader};
use oomscope_report::export;
use std::io::{self, Write};
use std::path::PathBuf;

/// A writer that counts what passes, for the message that says how much was written.
struct Counted<'a> {
    inner: &'a mut dyn Write,
    bytes: &'a mut u64,
}

impl Write for Counted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        *self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

pub fn run(a: ExportArgs) -> Result<u8, CliError> {
    let kind = input::check(&a.dump, Reader::Export).map_err(CliError::from)?;
    let d = dump::read(&a.dump).map_err(|e| CliError(input::explain(e, &a.dump, kind)))?;
    // A viewer shown nothing is no answer: say what the dump lacks, and refuse when the
    // format would show nothing at all.
    let chunks = d.regions.iter().map(|r| r.chunks.len()).sum::<usize>();
    let (has_state, has_history) = (chunks > 0, !d.events.is_empty());
    let source = if d.imported.is_some() { " (imported from a log or a message)" } else { "" };
    let lacking = match (a.format, has_state, has_history) {
        (ExportFormat::TorchSnapshot, false, false) => Some("no segments and no history of allocations"),
        (ExportFormat::Perfetto, _, false) => Some("no history of allocations"),
        _ => None,
    };
    if let Some(what) = lacking {
        return Err(CliError(format!(
            "{}: the dump has {what}{source}; the viewer would show nothing. `oomscope report {}` shows what it has",
            a.dump.display(),
            a.dump.display()
        )));
    }
    if matches!(a.format, ExportFormat::TorchSnapshot) && !has_history {
        eprintln!(
            "oomscope: note: the dump has no history of allocations{source}: memory_viz shows its segments, \
             with an empty timeline"
        );
    }
    let (suffix, viewer) = match a.format {
        ExportFormat::TorchSnapshot => ("snapshot.pickle", "https://pytorch.org/memory_viz"),
        ExportFormat::Perfetto => ("perfetto.json", "https://ui.perfetto.dev"),
    };
    let out = a.output.unwrap_or_else(|| {
        let name = a.dump.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let stem = name.strip_suffix(".dump.json").or_else(|| name.strip_suffix(".json")).unwrap_or(&name);
        a.dump.with_file_name(format!("{stem}.{suffix}"))
    });
    let mut written = 0u64;
    atomic::write_file(&out, |w| {
        let mut w = Counted { inner: w, bytes: &mut written };
        match a.format {
            ExportFormat::TorchSnapshot => w.write_all(&export::torch_snapshot(&d)),
            // Streamed: the JSON of a long history is never held whole.
            ExportFormat::Perfetto => {
                export::write_perfetto(&d, &mut w)?;
                w.write_all(b"\n")
            }
        }
    })
    .map_err(|e| CliError(format!("{}: {e}", out.display())))?;
    eprintln!("oomscope: wrote {} ({written} bytes); open it at {viewer}", PathBuf::from(&out).display());
    Ok(0)
}
