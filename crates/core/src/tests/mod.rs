//! Tests of the allocators as a whole: random sequences against their invariants and an
//! outside model, many threads through one allocator, and TensorFlow's own BFC scenarios.

mod properties;
mod tf_scenarios;
mod threads;
