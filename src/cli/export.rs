//! `oomscope export DUMP --format torch-snapshot|perfetto`.

use super::CliError;
use super::args::{ExportArgs, ExportFormat};
use oomscope_analysis::export;
use oomscope_dump as dump;
use oomscope_dump::atomic;
use std::path::PathBuf;

pub fn run(a: ExportArgs) -> Result<u8, CliError> {
    let d = dump::read(&a.dump)?;
    let (bytes, suffix, viewer) = match a.format {
        ExportFormat::TorchSnapshot => {
            (export::torch_snapshot(&d), "snapshot.pickle", "https://pytorch.org/memory_viz")
        }
        ExportFormat::Perfetto => {
            let mut text = serde_json::to_vec(&export::perfetto(&d)).map_err(|e| CliError(e.to_string()))?;
            text.push(b'\n');
            (text, "perfetto.json", "https://ui.perfetto.dev")
        }
    };
    let out = a.output.unwrap_or_else(|| {
        let name = a.dump.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let stem = name.strip_suffix(".dump.json").or_else(|| name.strip_suffix(".json")).unwrap_or(&name);
        a.dump.with_file_name(format!("{stem}.{suffix}"))
    });
    atomic::write_file(&out, |w| w.write_all(&bytes)).map_err(|e| CliError(format!("{}: {e}", out.display())))?;
    eprintln!("oomscope: wrote {} ({} bytes); open it at {viewer}", PathBuf::from(&out).display(), bytes.len());
    Ok(0)
}
