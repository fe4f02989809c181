//! Which processes hold memory on a GPU, as NVML (`libnvidia-ml.so.1`, loaded at run time)
//! reports them: what PyTorch's OOM message lists ("Including non-PyTorch memory, this
//! process has ... memory in use. Process 123 has ... memory in use."), and what tells this
//! process's CUDA context apart from other processes. Without NVML (no driver, MIG, some
//! containers), nothing is known and nothing is said.

use oomscope_format::ProcessMemory;
use std::ffi::{CStr, c_char, c_int, c_uint, c_ulonglong, c_void};
use std::sync::OnceLock;

/// `nvmlProcessInfo_t` (the v2/v3 layout).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProcessInfo {
    pid: c_uint,
    used_gpu_memory: c_ulonglong,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

type Init = unsafe extern "C" fn() -> c_int;
type ByBusId = unsafe extern "C" fn(*const c_char, *mut *mut c_void) -> c_int;
type Processes = unsafe extern "C" fn(*mut c_void, *mut c_uint, *mut ProcessInfo) -> c_int;

const SUCCESS: c_int = 0;
const INSUFFICIENT_SIZE: c_int = 7;
/// `NVML_VALUE_NOT_AVAILABLE`: the memory of a process NVML may not see (another
/// container's).
const NOT_AVAILABLE: c_ulonglong = c_ulonglong::MAX;

struct Nvml {
    by_bus_id: ByBusId,
    processes: Processes,
}

// SAFETY: plain function pointers into a library that stays loaded for the process's life;
// NVML's calls are thread-safe.
unsafe impl Send for Nvml {}
// SAFETY: as above.
unsafe impl Sync for Nvml {}

/// NVML, loaded and initialized once; `None` where it cannot be.
fn nvml() -> Option<&'static Nvml> {
    static NVML: OnceLock<Option<Nvml>> = OnceLock::new();
    NVML.get_or_init(|| {
        // SAFETY: dlopen of the driver's NVML library; it is never unloaded.
        let lib = unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if lib.is_null() {
            return None;
        }
        let sym = |name: &CStr| {
            // SAFETY: `lib` is a live handle; the name is NUL-terminated.
            let p = unsafe { libc::dlsym(lib, name.as_ptr()) };
            (!p.is_null()).then_some(p)
        };
        let init = sym(c"nvmlInit_v2")?;
        let by_bus_id = sym(c"nvmlDeviceGetHandleByPciBusId_v2")?;
        let processes = sym(c"nvmlDeviceGetComputeRunningProcesses_v3")
            .or_else(|| sym(c"nvmlDeviceGetComputeRunningProcesses_v2"))?;
        // SAFETY: the symbols have these C signatures in every NVML that exports them.
        let (init, by_bus_id, processes) = unsafe {
            (
                std::mem::transmute::<*mut c_void, Init>(init),
                std::mem::transmute::<*mut c_void, ByBusId>(by_bus_id),
                std::mem::transmute::<*mut c_void, Processes>(processes),
            )
        };
        // SAFETY: initializes NVML; harmless to call more than once per process.
        (unsafe { init() } == SUCCESS).then_some(Nvml { by_bus_id, processes })
    })
    .as_ref()
}

/// The processes with memory on the GPU at `pci_bus_id` (`0000:19:00.0`, as the CUDA
/// driver names it), in NVML's order, this process marked; `None` when NVML cannot say.
pub fn processes(pci_bus_id: &str) -> Option<Vec<ProcessMemory>> {
    let nvml = nvml()?;
    let bus = std::ffi::CString::new(pci_bus_id).ok()?;
    let mut device: *mut c_void = std::ptr::null_mut();
    // SAFETY: `bus` is NUL-terminated and `device` is written by NVML.
    if unsafe { (nvml.by_bus_id)(bus.as_ptr(), &mut device) } != SUCCESS {
        return None;
    }
    let mut infos = vec![ProcessInfo::default(); 16];
    for _ in 0..4 {
        let mut count = c_uint::try_from(infos.len()).ok()?;
        // SAFETY: `infos` has room for `count` entries; NVML writes at most that many and
        // sets `count` to what it wrote, or to what it needs.
        let r = unsafe { (nvml.processes)(device, &mut count, infos.as_mut_ptr()) };
        match r {
            SUCCESS => {
                let me = std::process::id();
                return Some(
                    infos[..(count as usize).min(infos.len())]
                        .iter()
                        .map(|p| ProcessMemory {
                            pid: u64::from(p.pid),
                            bytes: if p.used_gpu_memory == NOT_AVAILABLE { 0 } else { p.used_gpu_memory },
                            this: p.pid == me,
                        })
                        .collect(),
                );
            }
            INSUFFICIENT_SIZE => infos.resize(count as usize + 8, ProcessInfo::default()),
            _ => return None,
        }
    }
    None
}
