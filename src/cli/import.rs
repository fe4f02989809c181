//! `oomscope import FILE`: a TF log or a PyTorch snapshot becomes a dump and a report.

use super::args::{FromArg, ImportArgs};
use super::{CliError, output};
use oomscope_format::{self as dump, ImportedFrom, Section};
use oomscope_ingest::import::{self, From};
use oomscope_ingest::input_kind;
use oomscope_inputs::input::{self, Reader};
use oomscope_report as render;

pub fn run(a: ImportArgs) -> Result<u8, CliError> {
    // `-` is standard input: a message pasted into the terminal or piped from a clipboard.
    let stdin = a.input.as_os_str() == "-";
    let bytes = if stdin {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut b)
            .map_err(|e| CliError(format!("standard input: {e}")))?;
        b
    } else {
        std::fs::read(&a.input).map_err(|e| CliError(format!("{}: {e}", a.input.display())))?
    };
    // A dump, a trace or a model file is read by other commands: say which. Unless the
    // user named the format (`--from`): then it is read as that, and its reader says
    // what is wrong with it.
    if a.from.is_none() {
        let kind = input_kind::recognise(&bytes[..bytes.len().min(input_kind::HEAD)]);
        if let Some(refusal) = input::refusal(&a.input, kind, Reader::Import) {
            return Err(CliError(refusal));
        }
    }
    let name = if stdin { "standard input".to_string() } else { a.input.display().to_string() };
    let input = std::path::PathBuf::from(&name);
    let from = a.from.map(|f| match f {
        FromArg::TfLog => From::TfLog,
        FromArg::TorchSnapshot => From::TorchSnapshot,
        FromArg::Message => From::Message,
    });
    let mut d = import::import(&input, &bytes, from, a.device)?;
    let snapshot = d.imported.as_ref().is_some_and(|i| i.from == ImportedFrom::TorchSnapshot);
    if a.device.is_some() && !snapshot {
        return Err(CliError(format!(
            "{name}: --gpu picks a PyTorch snapshot's device; a log or a message names its own GPU"
        )));
    }
    oomscope_pipeline::diagnose(&mut d);
    let format: render::Format = a.format.into();
    // A page is written where -o says (the dump is not); other formats print, and -o writes
    // the dump.
    let page = format == render::Format::Html && a.output.is_some();
    match &a.output {
        Some(path) if page => super::report::write_page(path, &render::render(&d, format))?,
        Some(path) => dump::write_atomic(path, &d)?,
        None => {}
    }
    if !page {
        output::print(&render::render(&d, format))?;
    }
    if let Some(m) = d.imported.as_ref().and_then(|i| i.message.as_ref()) {
        eprintln!("oomscope: read {} as an out-of-memory message of {} (line {})", name, m.format.describe(), m.line);
    } else if let Some(imp) = &d.imported {
        let what = match (imp.from, imp.variant) {
            (ImportedFrom::TfLog, Some(v)) => format!(
                "a TensorFlow log{} ({} text, {} of {} lines used)",
                releases(v.release()).map_or(String::new(), |r| format!(" of {r}")),
                v.release(),
                imp.lines_used,
                imp.lines_read
            ),
            _ => format!("a PyTorch snapshot ({} segments, device {})", d.regions.len(), d.device.name),
        };
        eprintln!("oomscope: read {name} as {what}");
        let absent: Vec<&str> = imp.absent.iter().filter(|s| **s != Section::Events).map(|s| s.describe()).collect();
        // The summary ends with the same list ("not in it: ..."): said once.
        if !absent.is_empty() && format != render::Format::Summary {
            eprintln!("oomscope: not in the input, so not shown: {}", absent.join(", "));
        }
    }
    if let Some(path) = &a.output {
        eprintln!("oomscope: {} written to {}", if page { "page" } else { "dump" }, path.display());
    }
    Ok(0)
}

/// The releases that print as a variant preset (`tf-1.3`): what a user knows their version by.
fn releases(preset: &str) -> Option<&'static str> {
    Some(match preset {
        "tf-2.21" => "TF 2.16 or later",
        "tf-2.13" => "TF 2.13-2.15",
        "tf-2.12" => "TF 2.12",
        "tf-2.6" => "TF 2.6-2.11",
        "tf-2.4" => "TF 2.4-2.5",
        "tf-2.3" => "TF 2.3",
        "tf-1.13" => "TF 1.13-2.2",
        "tf-1.3" => "TF 1.3-1.12",
        "tf-1.0" => "TF 1.0-1.2",
        _ => return None,
    })
}
