//! The terminal UI of oomscope (reserved).
//!
//! This crate will hold the ratatui view of allocator state, live or from a dump: app
//! state, update (keys to actions) and draw kept apart, and testable without a terminal.
//! It depends on the dump model only; it never needs to know how the allocator works.
