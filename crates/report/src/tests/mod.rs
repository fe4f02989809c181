//! Tests across the importers and the renderers.

mod fuzz_importers;
