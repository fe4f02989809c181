//! oomscope tells a deep-learning engineer why the GPU ran out of memory and what to change.
//!
//! Data flows one way (see `docs/architecture.md`):
//!
//! ```text
//! device (sim | cuda) -> bfc (the allocator, pure) -> record (ops, events) -> dump (plain data)
//!     -> render (tf text, summary, json) -> CLI / TUI
//! ```
//!
//! - [`device`]: where regions come from: the [`device::Device`] trait and a simulated GPU.
//! - [`bfc`]: TensorFlow's BFC allocator, re-implemented to the byte (single-threaded core).
//! - [`Allocator`]: the thread-safe, recording allocator a training process uses; its
//!   [`Oom`] error carries the full report.
//! - [`scope`]: thread-local name scopes (`model/layer1` + `Conv2D`).
//! - [`dump`]: the post-mortem model, its JSON form and atomic writing.
//! - [`render`]: TF's OOM text, the short summary, JSON.
//! - [`trace`] and [`replay`]: JSON Lines traces fed through the allocator.
//! - [`verdict`]: why the memory ran out and what to change, read from a dump.
//! - [`workload`]: networks described in JSON, expanded into traces; `fit`.
//! - [`abi`]: the C ABI of `liboomscope.so` (PyTorch's pluggable allocator, scopes, dumps).
//! - [`live`]: the live feed over a Unix socket (publish, attach).
//! - [`view`]: dumps and live feeds as the terminal UI's model.
//!
//! ```
//! use oomscope::{Allocator, Request, bfc::Options, device::SimDevice};
//! let gpu = SimDevice::new(1 << 30, 0);
//! let alloc = Allocator::new(Options::new(1 << 30), Box::new(gpu));
//! let a = alloc.allocate(&Request::new(600 << 20).op("dense/MatMul")).unwrap();
//! let oom = alloc.allocate(&Request::new(600 << 20).op("dense_1/MatMul")).unwrap_err();
//! assert!(oom.report().contains("600.00MiB from dense/MatMul"));
//! alloc.free(a).unwrap();
//! ```

pub mod abi;
mod allocator;
pub mod atomic;
pub mod bfc;
pub mod device;
pub mod diff;
pub mod dump;
pub mod export;
mod hash;
pub mod import;
pub mod input_error;
pub mod live;
pub mod pickle;
pub mod play;
pub mod record;
pub mod render;
pub mod replay;
pub mod scope;
pub mod size;
pub mod stack;
pub mod trace;
pub mod verdict;
pub mod view;
pub mod workload;

pub use allocator::{Allocator, Oom, Recording, Request};

/// The README's Rust example, compiled and run as a doctest so it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
