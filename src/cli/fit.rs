//! `oomscope fit WORKLOAD|TRACE --device CARD|SIZE`: what fits, by replay.

use super::args::{FitArgs, FitFormat};
use super::{CliError, output};
use oomscope_base::size::human;
use oomscope_ingest::trace;
use oomscope_inputs::input::{self, Reader};
use oomscope_inputs::input::{events, is_trace, open, workload};
use oomscope_sim::workload::fit;
use oomscope_sim::workload::model::Mode;
use std::path::Path;

pub fn run(a: FitArgs) -> Result<u8, CliError> {
    if !a.command.is_empty() {
        return super::fit_command::run(a);
    }
    let Some(a_input) = a.input.clone() else {
        return Err(CliError("give a workload or trace, or your training command after --".into()));
    };
    let Some(device) = a.device.clone() else {
        return Err(CliError(format!("--device CARD|SIZE: the GPU to fit {a_input} on (h100, a100-80, 16GiB)")));
    };
    let others = a.others.unwrap_or(0);
    if others >= device.total {
        return Err(CliError(format!(
            "--others {} leaves nothing of the {} device",
            human(others),
            human(device.total)
        )));
    }
    let mut s = fit::settings(device.total, others, &device.model, a.limit);
    s.options.allow_growth = a.allow_growth;
    s.options.garbage_collection = a.gc;
    let on = oomscope_report::fit::device(&device.model, device.total, others);
    let (kind, source) = open(&a_input, Reader::Fit)?;
    let path = Path::new(&a_input);
    if is_trace(&a_input, kind, source.head()) {
        let (input, _) =
            source.reader(path).map_err(|e| CliError(format!("{}: cannot open the trace: {e}", path.display())))?;
        let t = trace::parse(path, input, |_| {}).map_err(|e| {
            CliError(input::explain(format!("{e}\n  (the trace format is in docs/trace-format.md)"), path, kind))
        })?;
        events(&t, path, Reader::Fit)?;
        let f = fit::min_limit(&t, &s);
        let text = match a.format {
            FitFormat::Json => serde_json::to_string(&f).unwrap_or_default() + "\n",
            FitFormat::Text => oomscope_report::fit::limit(&a_input, t.events.len(), &on, &f, fit::LIMIT_BOUND),
        };
        output::print(&text)?;
        // As `replay`: 1 when the answer is that it does not fit.
        return Ok(if f.fits && f.never_fits.is_none() { 0 } else { 1 });
    }
    let w = workload(&a_input, source).map_err(|e| {
        CliError(input::explain(format!("{e}\n  (the model format is in docs/workload-format.md)"), path, kind))
    })?;
    let m = &w.model;
    let eval = m.mode == Mode::Eval;
    let max = a.max_batch.unwrap_or(if eval { m.samples.unwrap_or(m.batch) } else { 65_536 });
    let f = fit::largest_batch(&w, &s, max)
        .map_err(|e| CliError(format!("{e}\n  (the model format is in docs/workload-format.md)")))?;
    let text = match a.format {
        FitFormat::Json => serde_json::to_string(&f).unwrap_or_default() + "\n",
        FitFormat::Text => {
            let samples = m.samples.unwrap_or(m.batch);
            oomscope_report::fit::batch(&w.info(m.batch), samples, &on, s.options.limit, &f)
        }
    };
    output::print(&text)?;
    // Nothing fits: the answer is a failure, for scripts as for people.
    Ok(if f.largest.is_some() { 0 } else { 1 })
}
