//! What users already have, read into oomscope's types: TensorFlow logs, PyTorch snapshots
//! and pasted out-of-memory messages become dumps ([`import`], with the [`pickle`] reader
//! they need); allocation traces in JSON Lines become [`oomscope_core::trace::Trace`]s
//! ([`trace`]); and [`input_kind`] tells from a file's first and last bytes which of these
//! (or a dump, or a model) it is, so every command can say which one reads it.

pub mod import;
pub mod input_kind;
pub mod pickle;
pub mod trace;

pub use oomscope_format::InputError;
