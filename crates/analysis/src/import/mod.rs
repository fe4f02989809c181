//! Foreign data → dumps: TensorFlow OOM logs and PyTorch memory snapshots, so that what
//! users already have gets the same report, verdict and UI as oomscope's own recordings.

pub mod tf_log;
pub mod torch_snapshot;

use oomscope_dump::Dump;

use std::path::Path;

/// The formats `oomscope import` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum From {
    TfLog,
    TorchSnapshot,
}

/// Input that cannot be imported: the file, the line when one applies, and why.
pub type ImportError = crate::input_error::InputError;

/// What the bytes look like: a pickle (protocol 2+ starts with 0x80) or a `.pickle`/`.pkl`
/// name is a snapshot; anything else is read as a TF log.
pub fn detect(path: &Path, bytes: &[u8]) -> From {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    if bytes.first() == Some(&0x80) || matches!(ext, "pickle" | "pkl" | "pt") {
        From::TorchSnapshot
    } else {
        From::TfLog
    }
}

/// Imports `bytes` read from `path`; `device` picks a snapshot's device.
pub fn import(path: &Path, bytes: &[u8], from: Option<From>, device: Option<i64>) -> Result<Dump, ImportError> {
    match from.unwrap_or_else(|| detect(path, bytes)) {
        From::TorchSnapshot => torch_snapshot::parse(path, bytes, device),
        From::TfLog => {
            // Logs pasted from web pages can hold stray bytes; they are not OOM content.
            let text = String::from_utf8_lossy(bytes);
            tf_log::parse(path, &text)
        }
    }
}
