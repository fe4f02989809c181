//! The pipeline for what users already have, above [`oomscope_pipeline`]: a framework's OOM
//! episodes read from its output into dumps with their verdicts ([`episodes`]), a workload's
//! dump diagnosed with its fix tried at other batch sizes, a snapshot's replay diagnosed.
//! It links the importers and the simulator, which the library loaded into training
//! processes does not.

pub mod episodes;
pub mod input;

use oomscope_base::Problem;
use oomscope_format::Dump;
use std::path::Path;

/// Any file that is or becomes a dump — an oomscope dump, a TensorFlow log, a PyTorch
/// snapshot, a pasted message — read by what it is ([`oomscope_ingest::input_kind`]) and
/// diagnosed; another kind of file is refused with what it is and the command that reads it.
pub fn load(path: &Path) -> Result<Dump, Problem> {
    let bytes = std::fs::read(path).map_err(|e| oomscope_base::problem!("{}: {e}", path.display()))?;
    let kind = oomscope_ingest::input_kind::recognise(&bytes);
    if let Some(refusal) = input::refusal(path, kind, input::Reader::Tui) {
        return Err(Problem(refusal));
    }
    let mut d = if kind == oomscope_ingest::input_kind::Kind::Dump {
        let text = String::from_utf8_lossy(&bytes);
        oomscope_format::read_str(path, &text).map_err(|e| Problem(e.to_string()))?
    } else {
        oomscope_ingest::import::import(path, &bytes, None, None).map_err(|e| Problem(e.to_string()))?
    };
    oomscope_pipeline::diagnose(&mut d);
    Ok(d)
}

/// A workload's dump (the demo, a replay of a model file): its verdict, with the fix tried
/// by replaying the workload at other batch sizes (`batch`: the one run).
pub fn diagnose_workload(
    d: &mut Dump,
    w: &oomscope_sim::workload::Workload,
    settings: &oomscope_replay::replay::Settings,
    batch: u64,
) -> Result<(), oomscope_format::InputError> {
    let mut diagnosis = oomscope_diagnose::analyze(d, &mut |set| oomscope_replay::what_if::from_history(d, set));
    oomscope_sim::workload::fit::refine(&mut diagnosis, w, settings, batch)?;
    d.verdict = Some(oomscope_report::verdict::words(&diagnosis));
    Ok(())
}

/// A PyTorch snapshot's replay: the verdict of `shown` (the last replay's dump), or, when
/// the replay went on past its first OOM (`first_oom`), that OOM's verdict on what was live
/// then; a fix of the settings tried by `fix` on the whole trace.
pub fn snapshot_verdict(shown: &mut Dump, first_oom: Option<&Dump>, fix: &mut oomscope_pipeline::Replay<'_>) {
    match first_oom {
        Some(first) => {
            let mut at_oom = Dump { replay: shown.replay.clone(), ..first.clone() };
            oomscope_pipeline::diagnose_with(&mut at_oom, fix);
            shown.verdict = at_oom.verdict;
        }
        None => oomscope_pipeline::diagnose_with(shown, fix),
    }
}
