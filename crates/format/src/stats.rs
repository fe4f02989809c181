//! The allocator's statistics and the device's refusals, as a dump records them.

use serde::{Deserialize, Serialize};

/// Allocator statistics: TF's `AllocatorStats` with the fields TF leaves at 0 filled in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub bytes_limit: u64,
    /// Sum of the sizes of in-use chunks (chunk size, not the request).
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: u64,
    pub num_allocs: u64,
    pub num_frees: u64,
    /// Largest chunk ever handed out.
    pub largest_alloc_size: u64,
    /// Bytes obtained from the device (sum of the regions).
    pub pool_bytes: u64,
    pub peak_pool_bytes: u64,
    /// TF's `bytes_reserved`: used by its async allocator only; 0 for BFC, as in TF.
    pub bytes_reserved: u64,
    pub peak_bytes_reserved: u64,
    /// Largest free chunk in the pool (TF prints 0 here).
    pub largest_free_block: u64,
    /// Free bytes in the pool (`pool_bytes - bytes_in_use`).
    pub free_bytes: u64,
    /// TensorBoard's definition: `1 - largest_free_block / free_bytes` (0 when nothing is free).
    pub fragmentation: f64,
    /// Failed allocation requests.
    pub num_ooms: u64,
    /// Region requests the device refused.
    pub num_device_refusals: u64,
    /// Bytes taken directly from the device outside the pool (cuDNN, cuBLAS handles).
    #[serde(default)]
    pub outside_bytes: u64,
}

/// A device refusal: the region size asked for and the event it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    pub seq: u64,
    pub bytes: u64,
    /// Free device memory at the time, as the device reported it.
    pub device_free: u64,
    /// The request was for memory outside the pool.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outside: bool,
}
