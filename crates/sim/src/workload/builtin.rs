//! The users' stories as built-in workloads. The model files live in `fixtures/workloads/`
//! and are compiled in, so `oomscope demo` needs nothing on disk.

use super::{Workload, model};
use oomscope_format::InputError;
use std::path::PathBuf;

const GIB: u64 = 1 << 30;

/// A built-in workload and the device its story happened on.
#[derive(Clone, Copy, Debug)]
pub struct Builtin {
    pub name: &'static str,
    /// The user's story it retells.
    pub story: &'static str,
    pub text: &'static str,
    /// `--device` default: a preset or a size.
    pub device: &'static str,
    /// Memory held by other processes on that device.
    pub others: u64,
    /// TF's memory limit is the whole card, not what is free (TF 1.x on Windows believed
    /// the card was free; the user's log: "with 11264 MB memory").
    pub limit_is_whole_card: bool,
}

pub const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "unet",
        story: "a U-Net on 1280x720 frames that trains only at batch 1",
        text: include_str!("../../../../fixtures/workloads/unet.json"),
        device: "gtx-1080",
        others: 0,
        limit_is_whole_card: false,
    },
    Builtin {
        name: "mnist-eval",
        story: "an MNIST CNN evaluated on all 10 000 test images at once",
        text: include_str!("../../../../fixtures/workloads/mnist-eval.json"),
        device: "1GiB",
        others: 0,
        limit_is_whole_card: false,
    },
    Builtin {
        name: "preallocate",
        story: "Keras takes the whole card while the desktop holds part of it",
        text: include_str!("../../../../fixtures/workloads/preallocate.json"),
        device: "gtx-1080-ti",
        others: 19 * GIB / 10,
        limit_is_whole_card: true,
    },
];

/// A built-in workload by name.
pub fn find(name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.name == name)
}

impl Builtin {
    pub fn workload(&self) -> Result<Workload, InputError> {
        let path = PathBuf::from(format!("builtin:{}", self.name));
        Ok(Workload { model: model::parse(&path, self.text)?, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_in_the_format_doc_is_valid() {
        let doc = include_str!("../../../../docs/workload-format.md");
        let example = doc.split("```json\n").nth(1).and_then(|s| s.split("```").next()).expect("a json example");
        let path = std::path::Path::new("docs/workload-format.md");
        let m = model::parse(path, example).unwrap_or_else(|e| panic!("{e}"));
        super::super::expand::expand(&m, m.batch, 1, path).unwrap_or_else(|e| panic!("{e}"));
    }

    #[test]
    fn every_builtin_parses_and_expands() {
        for b in BUILTINS {
            let w = b.workload().unwrap_or_else(|e| panic!("{}: {e}", b.name));
            let t = w.trace(w.model.batch, 2).unwrap_or_else(|e| panic!("{}: {e}", b.name));
            assert!(t.events.len() > 20, "{}", b.name);
            assert!(oomscope_core::device::parse_device(b.device).is_ok(), "{}", b.name);
        }
    }
}
