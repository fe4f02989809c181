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
mod fuzz_importers;
mod golden;
mod hostile_files;
mod hostile_pickles;
mod hostile_workloads;
mod input_kinds;
mod jobs;
mod live;
mod messages;
mod properties;
mod snapshots;
mod tensorflow;
mod tf_logs;
mod tf_scenarios;
mod threads;
mod torch_recorded;
mod torch_replay;
mod torch_snapshots;
mod tui_tmux;
mod tui_views;
mod verdicts;
