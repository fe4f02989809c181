//! The C ABI of `liboomscope.so`: PyTorch's pluggable-allocator functions, name scopes,
//! steps, dumps and statistics, for any process that can load a shared library.
//!
//! ```c
//! void*  oomscope_malloc(ssize_t size, int device, void* stream);       // NULL on failure
//! void*  oomscope_torch_malloc(ssize_t size, int device, void* stream); // throws std::runtime_error
//! void   oomscope_free(void* ptr, ssize_t size, int device, void* stream);
//! void   oomscope_record_stream(void* ptr, void* stream);
//! int    oomscope_synchronize(void);                // frees held back for other streams, released
//! void   oomscope_empty_cache(void);                // torch.cuda.empty_cache()
//! void   oomscope_set_memory_fraction(double fraction, int device);  // set_per_process_memory_fraction
//! void   oomscope_scope_push(const char* name);     // this thread's scope: "model/layer1" + ...
//! void   oomscope_scope_pop(void);
//! void   oomscope_scope_clear(void);              // leaves every scope of this thread
//! void   oomscope_step(long step);
//! int    oomscope_kind_set(int kind);          // what this thread allocates for; returns the kind it replaces
//! int    oomscope_tag(void* ptr, int device, const char* name, int kind);  // what a live allocation is; 0 when tagged
//! int    oomscope_tag_shape(void* ptr, int device, const int64_t* dims, int ndim, const char* dtype);  // its tensor's shape
//! int    oomscope_dump(const char* path);           // NULL: into OOMSCOPE_DUMP_DIR; 0 on success
//! int    oomscope_dump_at_exit(void);               // OOMSCOPE_DUMP_AT_EXIT's dump, now (once)
//! int    oomscope_stats(int device, struct oomscope_stats* out);  // 0 on success
//! size_t oomscope_last_error(char* buf, size_t len);  // this thread's last error; its length
//! const char* oomscope_version(void);
//! int    oomscope_c10_oom_available(void);    // 1: an OOM reaches PyTorch as c10::OutOfMemoryError
//! ```
//!
//! Settings come from the environment (`oomscope_core::config`). Every entry point catches panics and
//! turns bad input (null pointers, negative sizes, double frees, unknown pointers) into an
//! error value or a warning on stderr: nothing unwinds across the boundary except the
//! exception `oomscope_torch_malloc` throws on purpose, which only a C++ caller sees.

pub mod job;
pub mod runtime;

use oomscope_format::Kind;
use runtime::{Failure, runtime};
use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int, c_long, c_void};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

// Thread-locals are reached with `try_with` only: a thread-exit destructor may call in after
// they are destroyed, and a panic outside `guard`'s catch would abort the host process.
fn set_error(message: &str) {
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = message.to_string());
}

/// Runs `f`, turning a panic into `fallback` and an error message.
fn guard<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(p) => {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown".into());
            let msg = format!("oomscope: internal error: {what} (please report it)");
            // Not eprintln!: it panics when stderr is closed, and this runs outside the catch.
            let _ = writeln!(std::io::stderr(), "{msg}");
            set_error(&msg);
            fallback
        }
    }
}

fn malloc_inner(size: isize, device: c_int, stream: *mut c_void) -> Result<*mut c_void, Failure> {
    let rt = runtime()?;
    let result = rt.malloc(size, device, stream as usize).map(|a| a as *mut c_void);
    // A process that allocates on a GPU watches its job (one atomic load once it does).
    rt.watch_job();
    result
}

/// PyTorch's pluggable-allocator `malloc`. Returns NULL on failure, with the reason in
/// [`oomscope_last_error`]; at an OOM the dump is written and the report printed first.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    guard(std::ptr::null_mut(), || match malloc_inner(size, device, stream) {
        Ok(p) => p,
        Err(f) => {
            set_error(f.message());
            std::ptr::null_mut()
        }
    })
}

unsafe extern "C-unwind" {
    /// `throw.cpp`: throws PyTorch's `c10::OutOfMemoryError` for an OOM (`oom` not 0) when
    /// the process has PyTorch, else `std::runtime_error(message)`.
    fn oomscope_cxx_throw(message: *const c_char, oom: c_int) -> !;
    /// `throw.cpp`: 1 when PyTorch's libc10 is loaded with every piece an OOM is made of.
    fn oomscope_cxx_c10_available() -> c_int;
}

/// 1 when an OOM would reach PyTorch now as its own `c10::OutOfMemoryError` (the process has
/// PyTorch's libc10, with every piece the exception is made of), else 0.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_c10_oom_available() -> c_int {
    // SAFETY: looks symbols up in loaded libraries; no argument, no exception.
    guard(0, || unsafe { oomscope_cxx_c10_available() })
}

/// [`oomscope_malloc`] for PyTorch: on an OOM it throws what PyTorch's allocator throws, a
/// `c10::OutOfMemoryError` (Python's `torch.OutOfMemoryError`; cuDNN catches it and tries
/// an algorithm with a smaller workspace), with PyTorch's text (`CUDA out of memory. Tried
/// to allocate ...`); without PyTorch in the process, or on bad input, a
/// `std::runtime_error`. Only C++ callers may use it.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn oomscope_torch_malloc(size: isize, device: c_int, stream: *mut c_void) -> *mut c_void {
    let result = guard(Err(Failure::Error("oomscope: internal error".into())), || malloc_inner(size, device, stream));
    match result {
        Ok(p) => p,
        Err(f) => {
            set_error(f.message());
            let (text, oom) = match f {
                Failure::Oom(m) => (m, 1),
                // PyTorch reports a NULL as a generic error; say what went wrong instead.
                Failure::Error(m) => (format!("oomscope could not allocate: {m}"), 0),
            };
            let c = CString::new(text.replace('\0', " ")).unwrap_or_default();
            // SAFETY: the C++ side copies the message before it throws; the exception
            // unwinds through this `C-unwind` frame to PyTorch's C++ caller.
            unsafe { oomscope_cxx_throw(c.as_ptr(), oom) }
        }
    }
}

/// PyTorch's pluggable-allocator `free`. NULL is ignored; a double free or a pointer
/// oomscope did not allocate is a warning on stderr.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_free(ptr: *mut c_void, _size: isize, device: c_int, _stream: *mut c_void) {
    guard((), || {
        if let Err(f) = runtime().and_then(|rt| rt.free(ptr as u64, device)) {
            set_error(f.message());
        }
    })
}

/// PyTorch's `record_stream` hook: `ptr` is used on `stream` too, so when it is freed its
/// memory is reused only after `stream` has passed that point.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_record_stream(ptr: *mut c_void, stream: *mut c_void) {
    guard((), || {
        if let Ok(rt) = runtime() {
            rt.record_stream(ptr as u64, stream as usize);
        }
    })
}

/// An OOM error reached the program (Python's hook): the report held back at an OOM in a
/// convolution, which PyTorch's cuDNN code did not catch after all, is written on stderr.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_say_held_report() {
    guard((), || {
        if let Ok(rt) = runtime() {
            rt.say_held_report();
        }
    })
}

/// Waits for the streams memory was held back for and releases it; returns how many
/// allocations were released (-1 on error).
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_synchronize() -> c_int {
    guard(-1, || match runtime() {
        Ok(rt) => rt.synchronize() as c_int,
        Err(f) => {
            set_error(f.message());
            -1
        }
    })
}

/// PyTorch's pluggable-allocator `reset` hook, which `torch.cuda.empty_cache()` calls: the
/// caching allocator gives its cached segments back to the device.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_empty_cache() {
    guard((), || match runtime() {
        Ok(rt) => rt.empty_cache(),
        Err(f) => set_error(f.message()),
    })
}

/// PyTorch's pluggable-allocator `memory_fraction` hook
/// (`torch.cuda.set_per_process_memory_fraction`).
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_set_memory_fraction(fraction: f64, device: c_int) {
    guard((), || {
        if let Err(f) = runtime().and_then(|rt| rt.set_memory_fraction(fraction, device)) {
            set_error(f.message());
            if let Ok(rt) = runtime() {
                rt.warn("fraction", f.message());
            }
        }
    })
}

/// Reads a C string; NULL or invalid UTF-8 is reported, not trusted.
///
/// # Safety
/// `s` is NULL or points to a NUL-terminated string.
unsafe fn text<'a>(s: *const c_char, what: &str) -> Result<std::borrow::Cow<'a, str>, oomscope_base::Problem> {
    if s.is_null() {
        return Err(oomscope_base::problem!("{what}: NULL instead of a string"));
    }
    // SAFETY: the caller promises a NUL-terminated string.
    let c = unsafe { CStr::from_ptr(s) };
    // `to_str` validates faster than `to_string_lossy`, which is for the rare bad name.
    Ok(c.to_str().map_or_else(|_| c.to_string_lossy(), std::borrow::Cow::Borrowed))
}

/// Enters name scope `name` on this thread: allocations are named `scope/.../op`.
///
/// # Safety
/// `name` is NULL (a warning) or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oomscope_scope_push(name: *const c_char) {
    guard((), || {
        // SAFETY: the ABI's contract: NULL or a C string.
        match unsafe { text(name, "oomscope_scope_push") } {
            Ok(n) => oomscope_core::scope::push_unguarded(&n),
            Err(e) => {
                set_error(&e);
                if let Ok(rt) = runtime() {
                    rt.warn("scope", &format!("{e}: ignored"));
                }
            }
        }
    })
}

/// Leaves the innermost scope of this thread (nothing when there is none).
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_scope_pop() {
    guard((), || {
        if !oomscope_core::scope::pop()
            && let Ok(rt) = runtime()
        {
            rt.warn("scope", "oomscope_scope_pop with no scope pushed on this thread: ignored");
        }
    })
}

/// Leaves every scope of this thread (a caller that lost count, after an exception, starts
/// afresh).
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_scope_clear() {
    guard((), || while oomscope_core::scope::pop() {})
}

/// Sets what this thread's allocations are for until it is set again (the kinds'
/// numbers: 0 unknown, 1 weight, 2 gradient, 3 optimizer state, 4 input, 5 activation,
/// 6 temporary, 7 backward-pass tensor, 8 collective buffer); returns the kind it replaces,
/// for the caller to put back. An unknown number is taken as 0, with a warning.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_kind_set(kind: c_int) -> c_int {
    guard(0, || {
        let k = match Kind::from_code(kind) {
            Some(k) => k,
            None => {
                if let Ok(rt) = runtime() {
                    rt.warn("kind", &format!("oomscope_kind_set({kind}): no such kind; taken as 0 (unknown)"));
                }
                Kind::Unknown
            }
        };
        oomscope_core::scope::set_kind(k).code()
    })
}

/// Says what the live allocation at `ptr` on `device` is, learned after it was allocated (a
/// parameter moved to the GPU, a gradient, optimizer state): its name becomes `name` (NULL:
/// kept) and its kind `kind`. 0 when tagged, 1 when nothing is allocated there, -1 on bad
/// input.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oomscope_tag(ptr: *mut c_void, device: c_int, name: *const c_char, kind: c_int) -> c_int {
    guard(-1, || {
        let Some(kind) = Kind::from_code(kind) else {
            set_error(&format!("oomscope_tag: {kind} is not a kind's number"));
            return -1;
        };
        let name = if name.is_null() {
            None
        } else {
            // SAFETY: the ABI's contract: NULL or a C string.
            match unsafe { text(name, "oomscope_tag") } {
                Ok(n) => Some(n),
                Err(e) => {
                    set_error(&e);
                    return -1;
                }
            }
        };
        match runtime() {
            Ok(rt) => c_int::from(!rt.tag(ptr as u64, device, name.as_deref(), kind)),
            Err(f) => {
                set_error(f.message());
                -1
            }
        }
    })
}

/// Records the shape (`ndim` dimensions at `dims`) and dtype (NULL: not said) of the tensor
/// that holds the live allocation at `ptr` on `device`, known once the op that made it
/// returned. 0 when recorded, 1 when nothing is allocated there, -1 on bad input.
///
/// # Safety
/// `dims` points to `ndim` values (or is NULL with `ndim` 0); `dtype` is NULL or a
/// NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oomscope_tag_shape(
    ptr: *mut c_void,
    device: c_int,
    dims: *const i64,
    ndim: c_int,
    dtype: *const c_char,
) -> c_int {
    guard(-1, || {
        if !(0..=64).contains(&ndim) || (dims.is_null() && ndim > 0) {
            set_error(&format!("oomscope_tag_shape: {ndim} dimensions at {dims:?}"));
            return -1;
        }
        let shape: &[i64] = if ndim == 0 {
            &[]
        } else {
            // SAFETY: the ABI's contract: `dims` holds `ndim` values (checked non-NULL above).
            unsafe { std::slice::from_raw_parts(dims, ndim as usize) }
        };
        let dtype = if dtype.is_null() {
            None
        } else {
            // SAFETY: the ABI's contract: NULL or a C string.
            unsafe { text(dtype, "oomscope_tag_shape") }.ok()
        };
        match runtime() {
            Ok(rt) => c_int::from(!rt.tag_shape(ptr as u64, device, shape, dtype.as_deref())),
            Err(f) => {
                set_error(f.message());
                -1
            }
        }
    })
}

/// Marks the start of training step `step` on every device.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_step(step: c_long) {
    guard((), || {
        if let Ok(rt) = runtime() {
            // `long` is 64 bits on the platforms oomscope runs on (Linux, LP64).
            #[allow(clippy::useless_conversion)]
            rt.step(i64::from(step));
        }
    })
}

/// Writes the current state as a dump: to `path` (with `-gpuN` added when several devices
/// are in use), or into the dump directory when `path` is NULL. 0 on success, -1 on error.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oomscope_dump(path: *const c_char) -> c_int {
    guard(-1, || {
        let target = if path.is_null() {
            None
        } else {
            // SAFETY: the ABI's contract: NULL or a C string.
            match unsafe { text(path, "oomscope_dump") } {
                Ok(p) => Some(std::path::PathBuf::from(p.into_owned())),
                Err(e) => {
                    set_error(&e);
                    return -1;
                }
            }
        };
        match runtime().and_then(|rt| rt.dump(target)) {
            Ok(_) => 0,
            Err(f) => {
                set_error(f.message());
                -1
            }
        }
    })
}

/// Writes the dump at exit now, when `OOMSCOPE_DUMP_AT_EXIT` asks for one and it was not
/// written yet; the library's destructor, which writes it at `exit()`, then writes none.
/// For runtimes that free memory while they shut down, after the program ended but before
/// that destructor runs: the PyTorch hook calls it from Python's `atexit`, before the
/// interpreter tears its modules down (and frees the tensors their globals hold). A process
/// that never allocated writes nothing (and does not set oomscope up to find that out).
/// Returns 1 when it was written now, else 0 (not asked for, written already, nothing
/// allocated); a dump that could not be written is said on stderr, as at a step.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_dump_at_exit() -> c_int {
    guard(0, || runtime::started().map_or(0, |rt| c_int::from(rt.dump_at_exit())))
}

/// Statistics of one device, as `oomscope_stats` fills them (all bytes unless named).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OomscopeStats {
    /// Size of this struct, set by the caller (so later versions can add fields).
    pub size: u64,
    pub limit: u64,
    pub bytes_in_use: u64,
    pub peak_bytes_in_use: u64,
    pub pool_bytes: u64,
    pub peak_pool_bytes: u64,
    pub largest_free_block: u64,
    pub num_allocs: u64,
    pub num_frees: u64,
    pub num_ooms: u64,
    pub live_allocations: u64,
    pub fragmentation: f64,
}

/// Fills `out` for `device`: 0 on success, -1 when `out` is NULL or too small, or nothing
/// was allocated on `device` yet.
///
/// # Safety
/// `out` is NULL (an error) or points to an `oomscope_stats` whose `size` field says how
/// large it is.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oomscope_stats(device: c_int, out: *mut OomscopeStats) -> c_int {
    guard(-1, || {
        if out.is_null() {
            set_error("oomscope_stats: NULL instead of a struct");
            return -1;
        }
        // SAFETY: `out` is non-null and, by contract, at least `size` bytes; read the size
        // field first and refuse structs older than this one.
        let size = unsafe { std::ptr::read_unaligned(out as *const u64) };
        if size < std::mem::size_of::<OomscopeStats>() as u64 {
            set_error(&format!(
                "oomscope_stats: the struct is {size} bytes; this oomscope fills {} (set its `size` field)",
                std::mem::size_of::<OomscopeStats>()
            ));
            return -1;
        }
        let Some(slot) = runtime().ok().and_then(|rt| rt.existing(device)) else {
            set_error(&format!("oomscope_stats: nothing was allocated on device {device}"));
            return -1;
        };
        let s = slot.allocator.stats();
        let live = slot.allocator.with_engine(|e| oomscope_core::View::live_allocations(e)) as u64;
        let stats = OomscopeStats {
            size: std::mem::size_of::<OomscopeStats>() as u64,
            limit: s.bytes_limit,
            bytes_in_use: s.bytes_in_use,
            peak_bytes_in_use: s.peak_bytes_in_use,
            pool_bytes: s.pool_bytes,
            peak_pool_bytes: s.peak_pool_bytes,
            largest_free_block: s.largest_free_block,
            num_allocs: s.num_allocs,
            num_frees: s.num_frees,
            num_ooms: s.num_ooms,
            live_allocations: live,
            fragmentation: s.fragmentation,
        };
        // SAFETY: checked non-null and large enough above.
        unsafe { std::ptr::write_unaligned(out, stats) };
        0
    })
}

/// Copies this thread's last error (NUL-terminated, cut to fit) into `buf` and returns its
/// full length; with a NULL `buf`, only the length.
///
/// # Safety
/// `buf` is NULL or points to `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn oomscope_last_error(buf: *mut c_char, len: usize) -> usize {
    guard(0, || {
        let copy = |e: &str| {
            if !buf.is_null() && len > 0 {
                let n = e.len().min(len - 1);
                // SAFETY: `buf` holds `len` bytes by contract; we write n + 1 <= len.
                unsafe {
                    std::ptr::copy_nonoverlapping(e.as_ptr(), buf as *mut u8, n);
                    *buf.add(n) = 0;
                }
            }
            e.len()
        };
        // After the thread's destruction began there is no last error to give.
        LAST_ERROR.try_with(|e| copy(&e.borrow())).unwrap_or_else(|_| copy(""))
    })
}

/// `oomscope 0.1.0`.
#[unsafe(no_mangle)]
pub extern "C" fn oomscope_version() -> *const c_char {
    static VERSION: &CStr = c"oomscope 0.1.0";
    VERSION.as_ptr()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_version_matches_the_package() {
        // SAFETY: oomscope_version returns a pointer to a static NUL-terminated string.
        let v = unsafe { std::ffi::CStr::from_ptr(super::oomscope_version()) }.to_str().unwrap().to_string();
        assert_eq!(v, format!("oomscope {}", env!("CARGO_PKG_VERSION")));
    }
}
