//! A thread-local stack of name scopes, so callers that cannot pass an op name with each
//! allocation still get one: inside `model/layer1`, an allocation for `Conv2D` is recorded as
//! `model/layer1/Conv2D`, and one with no name as `model/layer1`. Beside the names, each
//! thread has a current [`Kind`]: what its allocations are for when the request does not
//! say (the PyTorch hook sets `activation` in a module's forward, `optimizer` in a step).
//!
//! ```
//! use oomscope_core::scope;
//! let name = scope::with("model", || {
//!     let _layer = scope::push("layer1");
//!     scope::qualified(Some("Conv2D"))
//! });
//! assert_eq!(name.as_deref(), Some("model/layer1/Conv2D"));
//! assert_eq!(scope::current(), "");
//! ```

use oomscope_format::Kind;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;

/// Separator between scopes, as in TF's name scopes.
pub const SEPARATOR: char = '/';

#[derive(Default)]
struct Stack {
    /// The joined path, `a/b/c`.
    joined: String,
    /// Length of `joined` before each push, to pop in O(1).
    marks: Vec<usize>,
    /// Reused buffer for scope + op names.
    scratch: String,
}

thread_local! {
    static STACK: RefCell<Stack> = RefCell::new(Stack::default());
    static KIND: Cell<Kind> = const { Cell::new(Kind::Unknown) };
}

/// Sets what this thread's allocations are for until it is set again; returns the kind it
/// replaces, for the caller to put back. (A thread whose locals are gone keeps none.)
pub fn set_kind(kind: Kind) -> Kind {
    KIND.try_with(|k| k.replace(kind)).unwrap_or(Kind::Unknown)
}

/// What this thread's allocations are for, when the request does not say.
pub fn kind() -> Kind {
    KIND.try_with(Cell::get).unwrap_or(Kind::Unknown)
}

/// Pops its scope when dropped. Not `Send`: a scope belongs to the thread that pushed it.
#[must_use = "the scope is popped when the guard is dropped"]
#[derive(Debug)]
pub struct ScopeGuard {
    _not_send: PhantomData<*const ()>,
}

impl Drop for ScopeGuard {
    fn drop(&mut self) {
        pop();
    }
}

/// Enters scope `name` until the guard is dropped.
pub fn push(name: &str) -> ScopeGuard {
    push_unguarded(name);
    ScopeGuard { _not_send: PhantomData }
}

/// Runs `f` inside scope `name`.
pub fn with<R>(name: &str, f: impl FnOnce() -> R) -> R {
    let _guard = push(name);
    f()
}

// Every access uses `try_with`: the C ABI may be called from a thread-exit destructor,
// after this thread's scopes are destroyed; there a thread has no scope, and pushes are
// ignored, rather than panicking.

/// Enters a scope without a guard (for the C ABI, where the caller pops explicitly).
pub fn push_unguarded(name: &str) {
    let _ = STACK.try_with(|s| {
        let mut s = s.borrow_mut();
        let mark = s.joined.len();
        s.marks.push(mark);
        if mark > 0 {
            s.joined.push(SEPARATOR);
        }
        s.joined.push_str(name);
    });
}

/// Leaves the innermost scope; returns false when there was none.
pub fn pop() -> bool {
    STACK
        .try_with(|s| {
            let mut s = s.borrow_mut();
            match s.marks.pop() {
                Some(mark) => {
                    s.joined.truncate(mark);
                    true
                }
                None => false,
            }
        })
        .unwrap_or(false)
}

/// Number of scopes entered on this thread.
pub fn depth() -> usize {
    STACK.try_with(|s| s.borrow().marks.len()).unwrap_or(0)
}

/// The current scope path (`""` outside any scope).
pub fn current() -> String {
    STACK.try_with(|s| s.borrow().joined.clone()).unwrap_or_default()
}

/// The full name for `op` in the current scope, `None` when there is neither.
pub fn qualified(op: Option<&str>) -> Option<String> {
    with_qualified(op, |name| name.map(str::to_string))
}

/// Calls `f` with the full name for `op` without allocating a new string for it.
pub fn with_qualified<R>(op: Option<&str>, f: impl FnOnce(Option<&str>) -> R) -> R {
    let mut f = Some(f);
    let scoped = STACK.try_with(|cell| {
        let f = f.take().expect("called once");
        let mut s = cell.borrow_mut();
        match (s.joined.is_empty(), op) {
            (true, None) => f(None),
            (true, Some(op)) => f(Some(op)),
            (false, None) => f(Some(&s.joined)),
            (false, Some(op)) => {
                let Stack { joined, scratch, .. } = &mut *s;
                scratch.clear();
                scratch.push_str(joined);
                scratch.push(SEPARATOR);
                scratch.push_str(op);
                f(Some(scratch))
            }
        }
    });
    match (scoped, f) {
        (Ok(r), _) => r,
        (Err(_), Some(f)) => f(op),
        (Err(_), None) => unreachable!("try_with fails before it calls its closure"),
    }
}

/// Whether `op` (its last part: `ResNet.layer1.0.conv1/conv2d`, `.../ConvolutionBackward0`)
/// is a convolution, whose workspace cuDNN can do without: PyTorch's cuDNN convolutions catch
/// the OOM of a workspace and try the next algorithm (`try_all` in `Conv_v7.cpp`,
/// `try_plans` and `try_configs` in `Conv_v8.cpp`).
pub fn convolution(op: &str) -> bool {
    let last = op.rsplit('/').next().unwrap_or(op);
    last.to_ascii_lowercase().contains("conv")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn convolutions_are_told_by_the_ops_last_part() {
        assert!(convolution("ResNet.layer1.0.conv1/ConvolutionBackward0"));
        assert!(convolution("ResNet.conv1/conv2d") && convolution("cudnn_convolution"));
        assert!(!convolution("ResNet.conv1/relu") && !convolution("ResNet.conv1/batch_norm"));
    }

    #[test]
    fn scopes_compose_and_unwind() {
        assert_eq!(qualified(None), None);
        assert_eq!(qualified(Some("MatMul")).as_deref(), Some("MatMul"));
        {
            let _a = push("shared_model");
            let _b = push("unet_01");
            assert_eq!(current(), "shared_model/unet_01");
            assert_eq!(qualified(None).as_deref(), Some("shared_model/unet_01"));
            assert_eq!(qualified(Some("Conv2D")).as_deref(), Some("shared_model/unet_01/Conv2D"));
            assert_eq!(depth(), 2);
        }
        assert_eq!(current(), "");
        assert!(!pop(), "popping an empty stack reports it");
    }

    #[test]
    fn each_thread_has_its_kind() {
        assert_eq!(kind(), Kind::Unknown);
        assert_eq!(set_kind(Kind::Activation), Kind::Unknown);
        let other = std::thread::spawn(kind).join().unwrap();
        assert_eq!(other, Kind::Unknown);
        assert_eq!(set_kind(Kind::Unknown), Kind::Activation);
    }

    #[test]
    fn threads_have_their_own_stacks() {
        let _a = push("main");
        let other = std::thread::spawn(|| {
            let _b = push("worker");
            current()
        })
        .join()
        .unwrap();
        assert_eq!(other, "worker");
        assert_eq!(current(), "main");
    }
}
