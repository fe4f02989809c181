//! oomscope's allocators and what they record, upstream of everything else: no I/O besides
//! the device, no analysis, no rendering. Data flows one way (`docs/architecture.md`):
//!
//! ```text
//! device (sim | cuda) -> bfc (the allocator, pure) -> record (ops, events) -> Dump
//!     -> analysis (verdict), renderers, importers, live feed -> CLI / TUI
//! ```
//!
//! - [`device`]: where regions come from: the [`device::Device`] trait, a simulated GPU, CUDA.
//! - [`bfc`]: TensorFlow's BFC allocator, re-implemented to the byte (single-threaded core).
//! - [`caching`]: PyTorch's CUDA caching allocator, re-implemented the same way.
//! - [`Allocator`]: the thread-safe, recording allocator a training process uses; its
//!   [`Oom`] error carries the dump of that moment (the caller adds the verdict and renders).
//! - [`record`], [`scope`], [`stack`]: what each allocation is recorded with.
//! - [`trace`]: a sequence of requests in memory, what a replay feeds an allocator.
//! - [`config`]: how a process under `oomscope run` sets its allocator up (environment).
//!
//! ```
//! use oomscope_core::{Allocator, Request, bfc::Options, device::SimDevice};
//! let gpu = SimDevice::new(1 << 30, 0);
//! let alloc = Allocator::new(Options::new(1 << 30), Box::new(gpu));
//! let a = alloc.allocate(&Request::new(600 << 20).op("dense/MatMul")).unwrap();
//! let oom = alloc.allocate(&Request::new(600 << 20).op("dense_1/MatMul")).unwrap_err();
//! assert_eq!(oom.dump.usage_by_node[0].op, "dense/MatMul");
//! alloc.free(a).unwrap();
//! ```

mod allocator;
pub mod bfc;
pub mod caching;
pub mod clock;
pub mod config;
pub mod device;
pub mod env;
pub mod record;
pub mod scope;
pub mod stack;
pub mod tape;
pub mod trace;

#[cfg(test)]
mod tests;

pub use allocator::{Allocator, Engine, Oom, Recording, Request, SlotChunk, View, Visit};
