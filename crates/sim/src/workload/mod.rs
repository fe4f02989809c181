//! Training-memory simulation: a network described in JSON (`docs/workload-format.md`)
//! becomes an allocation trace in the replay format, so every simulated run can be saved,
//! replayed and reported like a recorded one.
//!
//! - [`model`]: the description format and its checks (errors name the line);
//! - [`expand`]: model → trace, following TF's executor (what backward keeps, in-place ops);
//! - [`builtin`]: the users' stories as built-in workloads;
//! - [`fit`]: the largest batch (or evaluation chunk) that fits a device, by replay.

pub mod builtin;
pub mod expand;
pub mod fit;
pub mod model;

pub use model::Model;
pub use oomscope_format::InputError;

use oomscope_core::trace::Trace;
use oomscope_format::WorkloadInfo;
use std::path::{Path, PathBuf};

/// A model and where it came from.
#[derive(Clone, Debug)]
pub struct Workload {
    pub model: Model,
    /// The file, or `builtin:NAME`.
    pub path: PathBuf,
}

impl Workload {
    /// A built-in workload by name, else a model file.
    pub fn load(name_or_path: &str) -> Result<Workload, InputError> {
        if let Some(b) = builtin::find(name_or_path) {
            return b.workload();
        }
        let path = Path::new(name_or_path);
        let text = std::fs::read_to_string(path).map_err(|e| InputError {
            path: path.to_path_buf(),
            line: 0,
            message: format!("cannot read the model: {e}"),
        })?;
        Ok(Workload { model: model::parse(path, &text)?, path: path.to_path_buf() })
    }

    /// The trace of this workload at `batch`, for replay (`trace::to_jsonl` writes it out).
    pub fn trace(&self, batch: u64, steps: u32) -> Result<Trace, InputError> {
        expand::expand(&self.model, batch, steps, &self.path)
    }

    /// What a dump says about this workload at `batch`.
    pub fn info(&self, batch: u64) -> WorkloadInfo {
        let m = &self.model;
        WorkloadInfo {
            name: m.name.clone(),
            mode: m.mode,
            batch,
            optimizer: m.optimizer,
            input: m.input.clone(),
            dtype: m.dtype.name().to_string(),
        }
    }
}
