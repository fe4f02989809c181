//! The one sequence every front end calls (the command, `liboomscope.so` at an OOM, the
//! terminal UI, the Python package through the command): a dump's diagnosis — the verdict
//! attached, a fix of the caching allocator's settings tried by replaying the dump's own
//! history — and its report; a job's directory read into one dump a rank and its report; a
//! trace's replay with its what-ifs. It links no importer of users' files (`oomscope-inputs`
//! does that above it), so the library loaded into training processes uses it. The front
//! ends parse their flags and print; what they print is made here.

pub mod job;
pub mod replay;

use oomscope_format::{Dump, SettingChange, WhatIf};

pub use oomscope_report::PostMortem;

/// What tries a settings fix on the requests that led to a dump.
pub type Replay<'a> = dyn FnMut(&Dump, SettingChange) -> Option<WhatIf> + 'a;

/// Attaches the verdict to `d` (when it has none): the diagnosis, with a fix of the caching
/// allocator's settings tried by replaying the dump's own history, in words.
pub fn diagnose(d: &mut Dump) {
    oomscope_report::verdict::attach(d, &mut oomscope_replay::what_if::from_history);
}

/// [`diagnose`], with the settings fix tried by `replay` (a trace's own replay, or none).
pub fn diagnose_with(d: &mut Dump, replay: &mut Replay<'_>) {
    oomscope_report::verdict::attach(d, replay);
}

/// At an OOM: the verdict attached ([`diagnose`]), the dump written by `write`, and the
/// report rendered from what was written, so that what is printed now and `oomscope report`
/// of the dump later are the same bytes.
pub fn at_oom<E>(d: &mut Dump, write: impl FnOnce(&Dump) -> Result<(), E>) -> PostMortem<E> {
    oomscope_report::post_mortem(d, &mut oomscope_replay::what_if::from_history, write)
}
