//! oomscope's integration tests, one binary (one link) for the whole command: each module
//! is one area, run against the built `oomscope` binary, `liboomscope.so` and the library
//! crates. Tests that need a tool this machine may lack (python3, tmux, PyTorch, the shared
//! real data) are ignored with the reason where it is missing, and fail under `CI`.

// The whole crate is tests: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

mod abi;
mod cli;
mod demos;
mod fit;
mod golden;
mod hostile_files;
mod hostile_jobs;
mod hostile_limits;
mod hostile_pickles;
mod hostile_workloads;
mod html;
mod input_kinds;
mod jobs;
mod layout;
mod live;
mod messages;
mod package;
mod pastes;
mod public_snapshots_imported;
mod public_snapshots_replayed;
mod python_api;
mod real_tensorflow;
mod recorded_snapshots;
mod snapshot_files;
mod tf_log_variants;
mod trainers;
mod tui_tmux;
mod tui_views;
mod verdicts;
