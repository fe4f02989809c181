//! A paste that holds an error, but not an out-of-memory one and none of the look-alikes
//! oomscope knows by name (`Expected all tensors to be on the same device`, a crash, an exit
//! status): said plainly, with the error's own line, rather than "no out-of-memory error
//! found", which reads as if oomscope had missed one.
//!
//! Only where nothing in the text speaks of memory running out in any words: a paste whose
//! out-of-memory words oomscope does not know keeps the "looked for" answer, which names
//! what it looked for.

/// Words of memory running out, in any runtime's spelling (lower-cased text).
const MEMORY_WORDS: &[&str] = &[
    "out of memory",
    "outofmemory",
    "out_of_memory",
    "out of device memory",
    "memoryerror",
    "memory error",
    "resource_exhausted",
    "resourceexhausted",
    "exhausted",
    "alloc",
    "not enough memory",
    "insufficient memory",
    "memory isn't enough",
    "memory is not enough",
    "vram",
    // OpenCL's and HSA's `out of resources`: memory, as often as not.
    "out of resource",
    "out_of_resource",
    "memory is insufficient",
    "memory insufficient",
    "显存",
    "内存不足",
    "メモリ不足",
];

/// Crash and abort lines as shells and runtimes print them (case as printed).
const CRASHES: &[&str] = &[
    "Segmentation fault",
    "segmentation fault",
    "Illegal instruction",
    "Floating point exception",
    "Aborted (core dumped)",
    "core dumped",
    "terminate called after throwing",
    "terminate called without an active exception",
    "Fatal Python error",
];

/// The error a text shows: its line (1-based, in `text`) and its words, trimmed.
pub fn another_error(text: &str) -> Option<(usize, String)> {
    // (Also in other words: `not enough allocatable device memory`, `insufficient VRAM`.)
    let says_memory = |lower: &str| {
        MEMORY_WORDS.iter().any(|w| lower.contains(w))
            || has_word(lower, "oom")
            || super::message::ran_out_of_some(lower)
    };
    // (A stack frame's function names are not words the text says: `AllocateHistogram(int)+0x185`;
    // the text is lower-cased line by line without them only where the words are found.)
    if super::message::cut_in_oom_words(text)
        || says_memory(&text.to_lowercase())
            && says_memory(
                &text
                    .lines()
                    .filter(|l| !stack_frame(l) && !fell_back(l))
                    .map(|l| l.to_lowercase() + "\n")
                    .collect::<String>(),
            )
    {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    // A traceback ends in the exception that ended the program: the last one is the error.
    if let Some(i) = lines.iter().rposition(|l| exception_line(l)) {
        return Some((i + 1, words(lines[i])));
    }
    // A C++ exception's `what():` says more than `terminate called ...` above it.
    if let Some(i) = lines.iter().position(|l| CRASHES.iter().any(|c| l.contains(c))) {
        let what = lines[i..].iter().take(3).position(|l| l.trim_start().starts_with("what():"));
        let at = what.map_or(i, |w| i + w);
        return Some((at + 1, words(lines[at])));
    }
    if let Some(i) = lines.iter().position(|l| log_error_line(l)) {
        return Some((i + 1, words(lines[i])));
    }
    // An error's words inside a line (two lines a paste joined: `... failed with status 5
    // error: Internal Error (0000000e:Internal Error)`).
    lines
        .iter()
        .position(|l| [" error: ", " Error: ", " ERROR: ", " ERROR "].iter().any(|w| l.contains(w)))
        .map(|i| (i + 1, words(lines[i])))
}

/// A line that says an allocation went elsewhere instead (Triton's `Failed to allocate CUDA
/// memory ... falling back to pinned system memory`): nothing failed there, whatever its words.
fn fell_back(l: &str) -> bool {
    l.contains("falling back to") || l.contains("fall back to")
}

/// A native stack trace's frame: `[bt] (3) lib.so(f(int)+0x185) [0x7f...]`, `#4 0x7f... in f`,
/// `  at f (file.cc:12)`, `12  paddle::memory::...`.
fn stack_frame(l: &str) -> bool {
    let t = l.trim_start();
    t.contains("+0x")
        || t.starts_with("[bt]")
        || t.starts_with("at ")
        || (t.starts_with('#') || t.starts_with(|c: char| c.is_ascii_digit()))
            && t.split_whitespace().nth(1).is_some_and(|w| w.starts_with("0x") || w.contains("::"))
}

/// `RuntimeError: ...`, `torch.cuda.DeferredCudaCallError: ...`, `ValueError` alone: a
/// Python exception's line (not a traceback's `File ...` line or a word in prose).
/// A warning's line counts too (`.../epoch_iterator.py:164: UserWarning: ...`): pasted as the
/// failure, it is still no out-of-memory error.
fn exception_line(l: &str) -> bool {
    const ENDINGS: &[&str] = &["Error", "Exception", "Exit", "Interrupt", "Failure", "Fault", "Warning"];
    if !ENDINGS.iter().any(|e| l.contains(e)) {
        return false;
    }
    let t = clean(l);
    let name_like = |name: &str| {
        let last = name.rsplit('.').next().unwrap_or(name);
        !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
            && last.starts_with(|c: char| c.is_ascii_uppercase())
            && ENDINGS.iter().any(|s| last.ends_with(s))
    };
    // The name alone, or before `: ` (after a warning's `file:line: `; TensorFlow 1.x's
    // `InternalError (see above for traceback): ...`).
    name_like(t)
        || t.split(": ")
            .take(3)
            .collect::<Vec<_>>()
            .split_last()
            .is_some_and(|(_, heads)| heads.iter().any(|h| name_like(h.trim_end_matches(" (see above for traceback)"))))
}

/// A log's error line: `ERROR: ...`, `error: ...`, `FATAL ...`, `E1127 10:00:00 ...] ...`.
fn log_error_line(l: &str) -> bool {
    let t = clean(l);
    // (A tagged logger's `[TensorRT-LLM][ERROR] ...` may come anywhere on a line: inside a
    // table's cell, after a status.)
    ["ERROR", "Error:", "error:", "FATAL", "Fatal error", "[E]", "[ERROR]"].iter().any(|p| t.starts_with(p))
        || t.contains("][ERROR] ")
        || t.starts_with('E')
            && t[1..].starts_with(|c: char| c.is_ascii_digit())
            && t.split_whitespace().next().is_some_and(|w| w[1..].chars().all(|c| c.is_ascii_digit()))
            && t.contains("] ")
}

/// The line without the markdown and quote marks a paste may keep around it.
fn clean(l: &str) -> &str {
    l.trim().trim_matches(|c: char| c == '*' || c == '`' || c == '>' || c.is_whitespace())
}

/// The line's words as quoted back: trimmed, at most 160 characters.
fn words(l: &str) -> String {
    let t = clean(l);
    if t.chars().count() <= 160 {
        return t.to_string();
    }
    t.chars().take(157).collect::<String>() + "..."
}

fn has_word(l: &str, w: &str) -> bool {
    l.match_indices(w).any(|(at, _)| {
        let before = l[..at].chars().next_back().is_none_or(|c| !c.is_alphanumeric());
        let after = l[at + w.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric());
        before && after
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceback_is_its_last_exception() {
        let text = "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n    x.cuda()\n\
                    RuntimeError: Expected all tensors to be on the same device, but found at least two devices\n";
        let (line, words) = another_error(text).unwrap();
        assert_eq!(line, 4);
        assert!(words.starts_with("RuntimeError: Expected all tensors"), "{words}");
    }

    #[test]
    fn memory_words_anywhere_leave_it_unread() {
        assert_eq!(another_error("RuntimeError: something\nCUDA out of memory\n"), None);
        assert_eq!(another_error("ValueError: bad\nfailed to allocate 2 GiB\n"), None);
        assert_eq!(another_error("ERROR: OOM at step 3\n"), None);
        // Cut inside the words: `out of mem`, `OutOfMem`.
        assert_eq!(another_error("RuntimeError: CUDA out of mem\n"), None);
        assert_eq!(another_error("Traceback ...\ntorch.cuda.OutOfMem\n"), None);
        // Not an error: a run's progress.
        assert_eq!(another_error("loss 0.31 at step 200\nall good\n"), None);
    }

    #[test]
    fn a_stack_frames_function_names_are_not_the_texts_words() {
        let text = "xgboost.core.XGBoostError: b'[23:05:47] updater_gpu_hist.cu: 279: invalid argument\n\
                    [bt] (3) libxgboost.so(xgboost::tree::DeviceHistogram::AllocateHistogram(int)+0x185) [0x7fda]\n";
        assert_eq!(another_error(text).map(|e| e.0), Some(1));
        assert!(stack_frame("#4 0x00007f in cudaMalloc ()") && stack_frame("  12  paddle::memory::Alloc(int)"));
        assert!(!stack_frame("# Allocation failed") && !stack_frame("2 allocations failed"));
    }

    #[test]
    fn crashes_and_log_errors() {
        let text = "terminate called after throwing an instance of 'std::runtime_error'\n  what():  failed to create plan\nAborted (core dumped)\n";
        assert_eq!(another_error(text), Some((2, "what():  failed to create plan".into())));
        assert_eq!(another_error("step 1\nIllegal instruction (core dumped)\n").unwrap().0, 2);
        assert_eq!(another_error("E1127 10:00:00.1 123 main.cc:9] bad flag\n").unwrap().0, 1);
        let cell =
            "| trt | 1 | UNAVAILABLE: [TensorRT-LLM][ERROR] CUDA runtime error in cudaGetDevice(): no device |\n";
        assert_eq!(another_error(cell).unwrap().0, 1);
        let warned = "/usr/lib/python3/site-packages/keras/trainers/epoch_iterator.py:164: UserWarning: Your input ran out of data\n";
        assert_eq!(another_error(warned).unwrap().0, 1);
        let tf1 = "> InvalidArgumentError (see above for traceback): Incompatible shapes: [64,10] vs. [32,10]\n";
        assert_eq!(another_error(tf1).unwrap().0, 1);
        // Prose with `Error` in it is no exception line.
        assert_eq!(another_error("The Error was strange, said the user\n"), None);
        let long = format!("ValueError: {}\n", "x".repeat(400));
        assert_eq!(another_error(&long).unwrap().1.chars().count(), 160);
    }
}
