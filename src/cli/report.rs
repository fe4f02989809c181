//! `oomscope report DUMP`: re-render a saved dump.

use super::args::ReportArgs;
use super::{CliError, output};
use oomscope::{dump, render};

pub fn run(a: ReportArgs) -> Result<u8, CliError> {
    let d = dump::read(&a.dump)?;
    output::print(&render::render(&d, a.format.into()))?;
    Ok(0)
}
