//! What oomscope does with allocator state, downstream of the allocators
//! (`oomscope-core`) and the formats (`oomscope-dump`):
//!
//! - [`verdict`]: why the memory ran out, as typed data read from a dump alone;
//! - [`render`]: the words: TF's OOM text, the short summary, the verdict, JSON;
//! - [`import`]: TF logs and PyTorch snapshots → dumps; [`export`]: dumps → memory_viz and
//!   Perfetto; [`diff`]: what grew between two dumps; [`pickle`]: Python pickles;
//! - [`trace`] and [`replay`]: JSON Lines traces fed through the allocator; [`workload`]:
//!   networks described in JSON, expanded into traces, and `fit`;
//! - [`input_kind`]: what a file is (a dump, a trace, a model, a log, a snapshot, a
//!   message), so that each command names the one that reads what it was given;
//! - [`live`]: the live feed (capture, publish, sample, attach) and [`play`]: a trace
//!   played in real time as a live feed.

pub mod diff;
pub mod export;
pub mod import;
pub mod input_error;
pub mod input_kind;
pub mod live;
pub mod pickle;
pub mod play;
pub mod render;
pub mod replay;
pub mod torch_replay;
pub mod trace;
pub mod verdict;
pub mod what_if;
pub mod workload;

/// The README's Rust example, compiled and run as a doctest so it stays true.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
