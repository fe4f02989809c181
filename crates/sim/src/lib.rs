//! Simulation: networks described in JSON expanded into the trace TF's executor would
//! produce and the largest batch that fits a device ([`workload`]), and PyTorch snapshots
//! replayed through the caching allocator, as recorded and under changed settings
//! ([`torch_replay`]).

pub mod torch_replay;
pub mod workload;
