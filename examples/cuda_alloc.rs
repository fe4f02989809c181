//! Allocating through oomscope from Rust on a real GPU, with cudarc for the device work.
//!
//! ```text
//! cargo run --release --example cuda_alloc            # GPU 0 (or a simulated GPU without one)
//! ```
//!
//! The allocator hands out device pointers from regions it takes with `cuMemAlloc`, each
//! named by op; here one is cleared with `cuMemsetD8` to show they are real device memory.
//! Then a request larger than what is left fails, and the error carries TF's report, the
//! ranked ops and the verdict.

#![allow(clippy::unwrap_used)]

use oomscope_core::Allocator;
use oomscope_core::Request;
use oomscope_core::bfc::Options;
use oomscope_core::device::{CudaDevice, Device, SimDevice};
use oomscope_core::scope;
use std::process::ExitCode;

fn main() -> ExitCode {
    let (device, on_gpu): (Box<dyn Device>, bool) = match CudaDevice::open(0) {
        Ok(d) => (Box::new(d), true),
        Err(e) => {
            eprintln!("{e}\n(going on with a simulated 8 GiB GPU)");
            (Box::new(SimDevice::new(8 << 30, 0)), false)
        }
    };
    let mem = device.mem_info();
    // Grow on demand, up to 4 GiB or what is free: never the whole card.
    let mut opts = Options::new((4u64 << 30).min(mem.free));
    opts.allow_growth = true;
    let alloc = Allocator::new(opts, device);
    println!("{} free of {}", oomscope_base::size::human(mem.free), oomscope_base::size::human(mem.total));

    let _model = scope::push("model");
    let mut held = Vec::new();
    for (layer, mib) in [("embed", 256u64), ("block0", 512), ("block1", 512)] {
        let _s = scope::push(layer);
        match alloc.allocate(&Request::new(mib << 20).op("MatMul").shape(&[mib as i64, 1 << 18]).dtype("float32")) {
            Ok(ptr) => held.push((ptr, mib << 20)),
            Err(oom) => {
                eprintln!("{oom}");
                return ExitCode::FAILURE;
            }
        }
    }
    if on_gpu {
        let (ptr, bytes) = held[0];
        // SAFETY: `ptr` is a live allocation of `bytes` bytes on the current device.
        match unsafe { cudarc::driver::result::memset_d8_sync(ptr, 0, bytes as usize) } {
            Ok(()) => println!("cleared {} at {ptr:#x} on the GPU", oomscope_base::size::human(bytes)),
            Err(e) => eprintln!("cuMemsetD8: {e:?}"),
        }
    }
    println!("{} in use under model/*", oomscope_base::size::human(alloc.stats().bytes_in_use));

    // A request that cannot fit: the error is the whole post-mortem.
    match alloc.allocate(&Request::new(8 << 30).op("head/MatMul")) {
        Ok(_) => println!("unexpectedly, 8 GiB fit"),
        Err(mut oom) => {
            oomscope_report::verdict::attach(&mut oom.dump, &mut oomscope_replay::what_if::from_history);
            let report = oomscope_report::render(&oom.dump, oomscope_report::Format::Tf);
            let usage = report.find("Current usage from device").unwrap_or(0);
            println!("{}", &report[usage..]);
        }
    }
    for (ptr, _) in held {
        let _ = alloc.free(ptr);
    }
    ExitCode::SUCCESS
}
