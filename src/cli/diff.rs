//! `oomscope diff A B`: what grew and what shrank.

use super::args::{DiffArgs, DiffFormat};
use super::{CliError, output};
use oomscope_format as dump;
use oomscope_ingest::input_kind::{self, Reader};
use oomscope_report::diff;

pub fn run(a: DiffArgs) -> Result<u8, CliError> {
    let read = |path: &std::path::Path| -> Result<dump::Dump, CliError> {
        let kind = input_kind::check(path, Reader::Diff).map_err(CliError)?;
        dump::read(path).map_err(|e| CliError(input_kind::explain(e, path, kind)))
    };
    let before = read(&a.before)?;
    let after = read(&a.after)?;
    let d = diff::diff(&before, &after, &a.before.display().to_string(), &a.after.display().to_string());
    let text = match a.format {
        DiffFormat::Text => diff::render(&d, a.top),
        DiffFormat::Json => serde_json::to_string(&d).map_err(|e| CliError(e.to_string()))? + "\n",
    };
    output::print(&text)?;
    Ok(0)
}
