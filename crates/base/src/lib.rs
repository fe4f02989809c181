//! What every oomscope crate needs, and nothing else: sizes and shapes as the frameworks
//! print them ([`size`], [`shape`]), the fast hash map of the allocator's tables ([`hash`]),
//! the bin arithmetic of TensorFlow's allocator and report ([`bins`]), paths quoted for a
//! shell ([`shell`]), and untrusted text made safe to show ([`text`]). The smallest crate, so that the UI and the allocator can share it.

pub mod bins;
pub mod hash;
pub mod problem;
pub mod shape;
pub mod shell;
pub mod size;
pub mod text;

pub use problem::Problem;
pub use size::human;
