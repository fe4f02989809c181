//! The terminal UI of oomscope: a view of allocator state, live or from a dump.
//!
//! Structured as the ratatui examples are: [`model`] is the data shown, [`source`] fills it
//! from a dump or a live feed (the dump's own types: this crate does not know how an
//! allocator works), [`app`] the UI state and how keys and updates change it, [`draw`] turns
//! that state into cells, and [`term`] runs the loop on a real terminal. Everything but
//! `term` runs on ratatui's `TestBackend`, so every view and key is tested without a terminal.

pub mod app;
pub mod draw;
pub mod fmt;
pub mod model;
pub mod source;
pub mod term;
mod tree;

pub use app::{Action, App, View};
pub use draw::draw;
pub use model::{Device, Status, Update};
pub use term::run;

/// The ratatui this crate draws with, for callers' tests (`TestBackend`) and benchmarks.
pub use ratatui;
