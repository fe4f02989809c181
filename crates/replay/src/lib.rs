//! A trace fed through oomscope's allocators on a simulated device ([`replay`]), and the
//! what-ifs of PyTorch's allocator settings that a fragmentation verdict quotes
//! ([`what_if`]): the same requests replayed under the settings in force and under a
//! changed one. Small on purpose: the library loaded into training processes links it to try
//! a fix at an OOM, and nothing of the importers or the workload simulator.

pub mod replay;
pub mod scaled;
pub mod what_if;

pub use replay::{Allocator, Outcome, Settings, replay, replay_observed};
