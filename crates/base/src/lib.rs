//! What every oomscope crate needs, and nothing else: sizes and shapes as the frameworks
//! print them ([`size`], [`shape`]), and the fast hash map of the allocator's tables
//! ([`hash`]). The smallest crate, so that the UI and the allocator can share it.

pub mod hash;
pub mod shape;
pub mod size;

pub use size::human;
