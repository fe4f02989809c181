//! Call stacks: raw instruction pointers on the hot path (a few microseconds), symbols only
//! when a report is written (the first resolution loads debug info: tens of milliseconds).

use oomscope_format::{Dump, Frame};

/// Frames kept per stack.
pub const MAX_FRAMES: usize = 64;

/// The caller's stack as instruction pointers, innermost first, skipping `skip` frames
/// (this function's own frame is always skipped).
pub fn capture(skip: usize) -> Vec<u64> {
    let mut ips = Vec::with_capacity(32);
    let mut to_skip = skip + 1;
    backtrace::trace(|frame| {
        if to_skip > 0 {
            to_skip -= 1;
            return true;
        }
        ips.push(frame.ip() as usize as u64);
        ips.len() < MAX_FRAMES
    });
    ips
}

/// Resolves one instruction pointer to its frames (several when calls were inlined).
pub fn resolve(ip: u64) -> Vec<Frame> {
    let mut frames = Vec::new();
    backtrace::resolve(ip as usize as *mut std::ffi::c_void, |symbol| {
        frames.push(Frame {
            ip,
            function: symbol.name().map(|n| n.to_string()),
            file: symbol.filename().map(|p| p.display().to_string()),
            line: symbol.lineno(),
        });
    });
    if frames.is_empty() {
        frames.push(Frame { ip, ..Frame::default() });
    }
    frames
}

/// Fills in the frames of every stack of a dump taken in this process. Stacks that already
/// have frames (from another process or an importer) are left alone.
pub fn symbolize(dump: &mut Dump) {
    for stack in &mut dump.stacks {
        if stack.frames.is_empty() {
            stack.frames = stack.ips.iter().flat_map(|&ip| resolve(ip)).collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn marker_function_for_stack_test() -> Vec<u64> {
        capture(0)
    }

    #[test]
    fn captures_and_resolves_our_own_frames() {
        let ips = marker_function_for_stack_test();
        assert!(!ips.is_empty() && ips.len() <= MAX_FRAMES);
        let names: Vec<String> = ips.iter().flat_map(|&ip| resolve(ip)).filter_map(|f| f.function).collect();
        assert!(
            names.iter().any(|n| n.contains("marker_function_for_stack_test")),
            "the capturing function is among the frames: {names:?}"
        );
    }
}
