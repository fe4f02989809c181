//! `oomscope report DUMP`: re-render a saved dump.

use super::args::ReportArgs;
use super::{CliError, output};
use oomscope_format as dump;
use oomscope_ingest::input_kind::{self, Reader};
use oomscope_report as render;

pub fn run(a: ReportArgs) -> Result<u8, CliError> {
    let kind = input_kind::check(&a.dump, Reader::Report).map_err(CliError)?;
    let mut d = dump::read(&a.dump).map_err(|e| CliError(input_kind::explain(e, &a.dump, kind)))?;
    // Dumps written without a verdict (older or foreign ones) get one now.
    oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
    output::print(&render::render_as(&d, a.format.into(), a.tf_style.as_ref()))?;
    Ok(0)
}
