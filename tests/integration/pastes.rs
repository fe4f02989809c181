//! What pasting does to a text must not change how it is read: every real text of the
//! message sets, wrapped at 60 and 80 columns, quoted, in bold, in a code block, with a
//! launcher's prefix on every line, lower-cased, or with its last line cut, reads as the
//! original does (the same verdict, the same request) or says what it lost. And no text,
//! however damaged, makes the reader panic.

use crate::common::root;
use oomscope_format::{Dump, PasteDamage};
use oomscope_ingest::import;
use proptest::prelude::RngExt;
use proptest::test_runner::{RngAlgorithm, TestRng};
use std::path::Path;

const SETS: &[&str] = &[
    "messages",
    "messages-heldout",
    "messages-fresh",
    "messages-unseen",
    "messages-fourth",
    "messages-fifth",
    "messages-sixth",
    "messages-seventh",
    "messages-eighth",
    "messages-ninth",
    "messages-tenth",
    "messages-eleventh",
    "messages-twelfth",
    "messages-thirteenth",
    "messages-fourteenth",
    "messages-fifteenth",
    "messages-sixteenth",
    "messages-seventeenth",
    "messages-eighteenth",
    "messages-nineteenth",
    "messages-twentieth",
    "messages-twenty-first",
    "messages-twenty-second",
    "messages-twenty-third",
    "messages-twenty-fourth",
    "messages-twenty-fifth",
    "messages-twenty-sixth",
    "messages-twenty-seventh",
    "messages-twenty-eighth",
    "messages-twenty-ninth",
    "messages-thirtieth",
    "messages-thirty-first",
    "messages-thirty-second",
    "messages-thirty-third",
    "messages-thirty-fourth",
    "messages-thirty-fifth",
    "messages-thirty-sixth",
    "messages-thirty-seventh",
    "messages-thirty-eighth",
    "messages-thirty-ninth",
    "messages-fortieth",
    "messages-forty-first",
    "messages-forty-second",
    "messages-forty-third",
    "messages-forty-fourth",
    "messages-forty-fifth",
    "messages-forty-sixth",
    "messages-forty-seventh",
    "messages-forty-eighth",
    "messages-forty-ninth",
    "messages-fiftieth",
    "messages-fifty-first",
    "messages-fifty-second",
    "messages-fifty-third",
    "messages-fifty-fourth",
    "messages-fifty-fifth",
    "messages-fifty-sixth",
    "messages-fifty-seventh",
    "messages-fifty-eighth",
    "messages-fifty-ninth",
    "messages-sixtieth",
    "messages-sixty-first",
    "messages-sixty-second",
    "messages-sixty-third",
    "messages-sixty-fourth",
    "messages-sixty-fifth",
    "messages-sixty-sixth",
    "messages-sixty-seventh",
    "messages-sixty-eighth",
    "messages-sixty-ninth",
    "messages-seventieth",
    "messages-seventy-first",
    "messages-seventy-second",
    "messages-seventy-third",
    "messages-seventy-fourth",
    "messages-seventy-fifth",
    "messages-seventy-sixth",
    "messages-seventy-seventh",
    "messages-seventy-eighth",
    "messages-seventy-ninth",
    "messages-eightieth",
    "messages-eighty-first",
    "messages-eighty-second",
    "messages-eighty-third",
    "messages-eighty-fourth",
    "messages-eighty-fifth",
    "messages-eighty-sixth",
    "messages-eighty-seventh",
    "messages-eighty-eighth",
    "messages-eighty-ninth",
    "messages-ninetieth",
    "messages-ninety-first",
    "messages-ninety-second",
    "messages-ninety-third",
    "messages-ninety-fourth",
    "messages-ninety-fifth",
    "messages-ninety-sixth",
    "messages-ninety-seventh",
    "messages-ninety-eighth",
    "messages-ninety-ninth",
    "messages-hundredth",
    "messages-hundred-and-first",
    "messages-hundred-and-second",
    "messages-hundred-and-third",
    "messages-hundred-and-fourth",
];

/// Every text of the sets: (set/file, text).
fn texts() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for set in SETS {
        let dir = root().join("fixtures").join(set);
        let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for f in files.iter().filter(|f| f.extension().is_some_and(|e| e == "txt")) {
            let text = String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned();
            out.push((format!("{set}/{}", f.file_name().unwrap().to_string_lossy()), text));
        }
    }
    out
}

/// How a text reads: the verdict (or `refused`, or the error), the request, and whether it
/// says the paste was cut short.
#[derive(Debug, PartialEq)]
struct Reading {
    verdict: String,
    request: Option<u64>,
    cut: bool,
}

fn reading(name: &str, text: &str) -> Reading {
    match import::import(Path::new(name), text.as_bytes(), None, None) {
        Ok(mut d) => {
            oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
            let cut = d.imported.as_ref().is_some_and(|i| i.pasted.contains(&PasteDamage::CutShort));
            let verdict = serde_json::to_value(d.verdict.as_ref().map(|v| v.kind)).unwrap();
            Reading { verdict: verdict.as_str().unwrap_or("none").into(), request: request(&d), cut }
        }
        Err(e) if e.message.contains("not an out-of-memory error") => {
            Reading { verdict: "refused".into(), request: None, cut: false }
        }
        Err(e) => Reading { verdict: "unread".into(), request: None, cut: e.message.contains("cut short") },
    }
}

fn request(d: &Dump) -> Option<u64> {
    d.oom.as_ref().map(|o| o.requested).filter(|&r| r > 0)
}

/// `fold -s -w width`: at the last blank that fits, a word longer than the line where it ends.
fn wrapped(text: &str, width: usize) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut rest: Vec<char> = line.chars().collect();
        while rest.len() > width {
            let cut = rest[..=width].iter().rposition(|&c| c == ' ').filter(|&c| c > 0);
            let (piece, next) = match cut {
                Some(c) => (rest[..c].iter().collect::<String>(), c + 1),
                None => (rest[..width].iter().collect::<String>(), width),
            };
            out.push_str(&piece);
            out.push('\n');
            rest.drain(..next);
        }
        out.extend(rest);
        out.push('\n');
    }
    out
}

fn each_line(text: &str, f: impl Fn(&str) -> String) -> String {
    text.lines().map(|l| f(l) + "\n").collect()
}

/// The damages, by name.
fn damaged(text: &str) -> Vec<(&'static str, String)> {
    let bold = |l: &str| {
        let t = l.trim();
        if t.is_empty() { l.to_string() } else { format!("{}**{t}**", &l[..l.len() - l.trim_start().len()]) }
    };
    let mut lines: Vec<&str> = text.trim_end().lines().collect();
    let last = lines.pop().unwrap_or("");
    let half: String = last.chars().take(last.chars().count() / 2).collect();
    let cut = lines.iter().map(|l| format!("{l}\n")).collect::<String>() + &half + "\n";
    vec![
        ("wrapped at 60", wrapped(text, 60)),
        ("wrapped at 80", wrapped(text, 80)),
        ("quoted", each_line(text, |l| format!("> {l}"))),
        ("in bold", each_line(text, bold)),
        ("in a code block", format!("```\n{}\n```\n", text.trim_end())),
        ("torchrun's prefix", each_line(text, |l| format!("[rank0]: {l}"))),
        ("vLLM's prefix", each_line(text, |l| format!("(VllmWorker rank=0 pid=4242) {l}"))),
        ("a logger's prefix", each_line(text, |l| format!("2026-11-27 10:00:00,123 - ERROR - {l}"))),
        ("Docker Compose's prefix", each_line(text, |l| format!("trainer-1  | {l}"))),
        // A web page's copy: a zero-width space inside every word of twelve letters or more.
        (
            "copied with zero-width spaces",
            each_line(text, |l| {
                l.split(' ')
                    .map(|w| {
                        if w.chars().count() >= 12 {
                            w.chars().take(6).collect::<String>() + "\u{200B}" + &w.chars().skip(6).collect::<String>()
                        } else {
                            w.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ")
            }),
        ),
        ("the last line cut", cut),
        ("lower-cased", text.to_lowercase()),
    ]
}

/// PyTorch's words are the same in every release that prints them: a lower-cased paste of
/// its message must still read. Other frameworks' (TensorFlow's allocator report, XLA's
/// account) are read by their exact words, in their case.
fn words_allow_lower_case(r: &Reading, name: &str, text: &str) -> bool {
    let d = import::import(Path::new(name), text.as_bytes(), None, None);
    r.verdict != "refused"
        && d.is_ok_and(|d| {
            d.imported.and_then(|i| i.message).is_some_and(|m| m.format.is_torch_cache() && m.xla.is_none())
        })
}

#[test]
fn pasting_does_not_change_how_a_text_reads() {
    let texts = texts();
    assert!(texts.len() >= 450, "{} texts", texts.len());
    let mut misses = Vec::new();
    let mut counts = std::collections::BTreeMap::new();
    for (name, text) in &texts {
        let original = reading(name, text);
        for (how, variant) in damaged(text) {
            if how == "lower-cased" && !words_allow_lower_case(&original, name, text) {
                continue;
            }
            let got = reading(name, &variant);
            let same = got.verdict == original.verdict
                && (got.request == original.request || original.request.is_none() && got.verdict != "unread");
            let entry = counts.entry(how).or_insert((0, 0));
            entry.1 += 1;
            // A cut that lost figures is said ("the paste's last line ends mid-way").
            if same || (how == "the last line cut" && got.cut) {
                entry.0 += 1;
            } else {
                misses.push(format!("{name} {how}: {original:?} -> {got:?}"));
            }
        }
    }
    let summary: Vec<String> = counts.iter().map(|(how, (ok, n))| format!("{how}: {ok} of {n}")).collect();
    eprintln!("{}", summary.join("\n"));
    // Wrapping, quotes, markdown and prefixes lose nothing: every text reads as it did. A cut
    // loses what was after it, and is said where the message reaches the cut (where it does
    // not, the text read otherwise is listed here); a lower-cased paste of PyTorch's message
    // reads as the original.
    for (how, (ok, n)) in &counts {
        let floor = match *how {
            "the last line cut" => 95,
            "lower-cased" => 98,
            _ => 100,
        };
        assert!(ok * 100 >= n * floor, "{how}: {ok} of {n} read as the original:\n{}", misses.join("\n"));
    }
    eprintln!("{}", misses.join("\n"));
}

/// Figures that cannot all be true get no verdict built on them, and the reason.
#[test]
fn figures_that_contradict_each_other_get_no_verdict() {
    let head = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of";
    let cases = [
        // The process holds less than its own cache.
        (
            format!(
                "{head} 23.65 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 10.00 GiB \
                 memory in use. Of the allocated memory 15.00 GiB is allocated by PyTorch, and 1.00 GiB is reserved \
                 by PyTorch but unallocated."
            ),
            "less than the 16.00 GiB its own cache holds",
        ),
        // 21 + 5 + 1 GiB on a 24 GiB card.
        (
            format!(
                "{head} 24.00 GiB of which 1.00 GiB is free. Of the allocated memory 21.00 GiB is allocated by \
                 PyTorch, and 5.00 GiB is reserved by PyTorch but unallocated."
            ),
            "more than the 24.00 GiB device",
        ),
        // Free beyond any device (a driver's figure underflowed).
        (
            format!(
                "{head} 512.00 MiB of which 17179869183.96 GiB is free. Of the allocated memory 292.04 MiB is \
                 allocated by PyTorch, and 137.96 MiB is reserved by PyTorch but unallocated."
            ),
            "more than any device holds",
        ),
        // Processes listed beyond any device, whose sum passes what a number holds (a paste
        // that cut `14.59 GiB` to `14.59e`, read as exabytes).
        (
            format!(
                "{head} 14.75 GiB of which 161.06 MiB is free. Process 121503 has 14.59e. Process 121504 has 14.59e. Process 121505 has 14.59e. \
                 Of the allocated memory 14.39 GiB is allocated by PyTorch, and 61.74 MiB is reserved by PyTorch but \
                 unallocated."
            ),
            "more than any device holds",
        ),
        // Older wording: reserved in all less than allocated.
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.93 GiB total capacity; 6.00 GiB \
             already allocated; 10.00 MiB free; 3.00 GiB reserved in total by PyTorch)"
                .to_string(),
            "3.00 GiB reserved in all is less than the 6.00 GiB allocated",
        ),
        // Figures no framework prints: negative, not a number, an exponent beyond any device,
        // a device of 0 bytes (not "one tensor too large" for a request of 2 GiB).
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate -2.00 GiB. GPU 0 has a total capacity of \
             24.00 GiB of which nan GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 1.00 \
             GiB is reserved by PyTorch but unallocated."
                .to_string(),
            "-2.00 GiB, nan GiB are not a size",
        ),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1e308 GiB. GPU 0 has a total capacity of \
             24.00 GiB of which 1.00 GiB is free. Of the allocated memory 20.00 GiB is allocated by PyTorch, and 1.00 \
             GiB is reserved by PyTorch but unallocated."
                .to_string(),
            "1e308 GiB is not a size",
        ),
        (
            format!(
                "{head} 0 bytes of which 0 bytes is free. Of the allocated memory 0 bytes is allocated by PyTorch, and \
                 0 bytes is reserved by PyTorch but unallocated."
            ),
            "0 bytes (the device's total) is not a size",
        ),
    ];
    for (text, says) in cases {
        let mut d = import::import(Path::new("paste.txt"), text.as_bytes(), None, None).unwrap();
        oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
        let v = d.verdict.unwrap();
        assert_eq!(v.kind, oomscope_format::VerdictKind::Undetermined, "{text}: {v:?}");
        assert!(v.headline.contains("contradict") || v.headline.contains("cannot be true"), "{}", v.headline);
        assert!(v.headline.contains(says), "{}", v.headline);
    }
}

/// Memory outside this process that no listed process shows is blamed only beyond what a
/// context, libraries and a display may take (1.5 GiB): 0.89 GiB outside on a 6 GB card is
/// the desktop's, and the request is this process's peak; 2.89 GiB outside is others'.
#[test]
fn a_little_memory_outside_the_process_is_not_blamed_unless_a_process_is_listed() {
    let text = |outside: &str, listed: &str| {
        format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.45 GiB. GPU 0 has a total capacity of \
             {outside} of which 606.62 MiB is free. {listed}Including non-PyTorch memory, this process has 4.30 GiB \
             memory in use. Of the allocated memory 4.13 GiB is allocated by PyTorch, and 37.56 MiB is reserved by \
             PyTorch but unallocated."
        )
    };
    let read = |t: String| {
        let mut d = import::import(Path::new("paste.txt"), t.as_bytes(), None, None).unwrap();
        oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
        d.verdict.unwrap()
    };
    let verdict = |t: String| read(t).kind;
    use oomscope_format::VerdictKind::{Others, Peak};
    let v = read(text("5.78 GiB", ""));
    assert_eq!(v.kind, Peak);
    // Said, not hidden: it is what the request lacked.
    assert!(v.evidence.iter().any(|e| e.contains("without it the request would just fit")), "{:?}", v.evidence);
    assert_eq!(verdict(text("7.78 GiB", "")), Others);
    // Listed, the same 0.89 GiB is another process's, and without it the request fits.
    assert_eq!(verdict(text("5.78 GiB", "Process 4242 has 910.00 MiB memory in use. ")), Others);
}

/// Runtimes beside CUDA's name their device's out-of-memory error in their own words: each is
/// read as one (without figures: not enough to tell why), and their host-memory errors and a
/// kernel's shared-memory limit are refused, saying what they are.
#[test]
fn other_runtimes_out_of_memory_errors_are_read_and_their_look_alikes_refused() {
    let oom = [
        "RuntimeError: HIP error: hipErrorOutOfMemory",
        "\tInsufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
        "vkAllocateMemory failed -2",
        "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory",
        "clEnqueueNDRangeKernel failed: CL_MEM_OBJECT_ALLOCATION_FAILURE",
        "RuntimeError: level_zero backend failed with error: 39 (UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY)",
        "Could not allocate tensor with 58982400 bytes. There is not enough GPU video memory available!",
        // No runtime oomscope knows: a device, memory that ran out, a failure.
        "Error: failed to allocate 4294967296 bytes on device 0 (out of memory)",
        "terminate called after throwing an instance of 'std::runtime_error'\n  what():  [mylib] device_buffer.cpp:42\n\
         error: out of memory",
        // The same in other words: a device's memory short, an allocation on it failed, `OOM`.
        "Error: GPU memory is insufficient for this operation",
        "RuntimeError: memory allocation on GPU failed",
        "what():  hipMalloc failed.",
        "[ERROR] CUDA OOM at step 100, batch size 64",
        "RuntimeError: [MPS] out of memory",
        "* Device #1: Not enough allocatable device memory for this attack.",
        "Out of memory in cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) (intern/cycles/device/cuda/queue.cpp:21)",
        "System is out of GPU and shared host memory",
        "RuntimeError: 显存不足，请减小batch_size后重试",
        "jaxlib.xla_extension.XlaRuntimeError: INTERNAL: Failed to allocate 1073741824 bytes for new constant",
        "wgpu error: Out of Memory",
        // Cut inside the words at the paste's end.
        "RuntimeError: CUDA out of mem",
        "RuntimeError: CUDA error: out of memo",
    ];
    for text in oom {
        let d = import::import(Path::new("paste.txt"), text.as_bytes(), None, None)
            .unwrap_or_else(|e| panic!("{text}: {e}"));
        assert!(d.imported.and_then(|i| i.message).is_some(), "{text}");
    }
    let d = import::import(Path::new("paste.txt"), oom[7].as_bytes(), None, None).unwrap();
    assert_eq!(d.oom.map(|o| o.requested), Some(4_294_967_296));
    for text in &oom[7..] {
        let d = import::import(Path::new("paste.txt"), text.as_bytes(), None, None).unwrap();
        let m = d.imported.and_then(|i| i.message).unwrap();
        assert_eq!(m.format, oomscope_format::MessageFormat::DeviceRuntime, "{text}");
    }
    // A runtime's figures in words of its own, each named by the words beside it.
    let read = |text: &str| {
        let mut d = import::import(Path::new("paste.txt"), text.as_bytes(), None, None).unwrap();
        oomscope_report::verdict::attach(&mut d, &mut oomscope_replay::what_if::from_history);
        d
    };
    let d = read("[ERROR] Out of GPU memory: requested 12 GB, free 100 MB, total 8 GB");
    assert_eq!(d.oom.as_ref().map(|o| o.requested), Some(12 << 30));
    let m = d.imported.as_ref().and_then(|i| i.message.as_ref()).unwrap();
    assert_eq!((m.free, m.total), (Some(100 << 20), Some(8 << 30)));
    assert_eq!(d.verdict.unwrap().kind, oomscope_format::VerdictKind::SingleTensor);
    // What a model's load needs against what is available: the engine's budget, a peak; one
    // allocation's own figures give no such verdict without what the process holds.
    let d = read("ValueError: Not enough GPU memory to load the model: required 14.5 GiB, available 11.2 GiB");
    let v = d.verdict.unwrap();
    assert_eq!(v.kind, oomscope_format::VerdictKind::Peak, "{v:?}");
    assert!(v.headline.contains("14.50 GiB") && v.headline.contains("11.20 GiB"), "{v:?}");
    let d = read("RuntimeError: Insufficient VRAM. Need 8.0GB but only 6.0GB available.");
    assert_eq!(d.verdict.unwrap().kind, oomscope_format::VerdictKind::Undetermined);
    let refused = [
        ("RuntimeError: Native API failed. Native API returns: -6 (PI_ERROR_OUT_OF_HOST_MEMORY)", "host memory"),
        (
            "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 131072, Hardware limit: \
          101376.",
            "shared memory per block",
        ),
        ("Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space", "Java virtual machine"),
        // No runtime oomscope knows, in the host's memory.
        ("fatal: mmap: failed to allocate 8589934592 bytes of host memory", "host's memory (RAM)"),
        ("FullyFusedMLP: insufficient shared memory available on the GPU.", "shared memory per block"),
        (
            "ggml_vulkan: Failed to allocate pinned memory (Requested buffer size exceeds device buffer size limit: ErrorOutOfDeviceMemory)",
            "pinned host memory",
        ),
        ("failed (exitcode: -6) local_rank: 0 (pid: 1234) of binary: /usr/bin/python", "SIGABRT"),
        (
            "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout: \
             WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800343 ms",
            "timed out",
        ),
    ];
    for (text, says) in refused {
        let e = import::import(Path::new("paste.txt"), text.as_bytes(), None, None).unwrap_err().to_string();
        assert!(e.contains("not an out-of-memory error of the GPU") && e.contains(says), "{text}: {e}");
    }
    // An error of another kind, in no look-alike's words: refused with its own line; one
    // with memory's words in it is left to say what was looked for.
    let e = import::import(
        Path::new("paste.txt"),
        b"Traceback (most recent call last):\n  File \"t.py\", line 1\n\
        RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!\n",
        None,
        None,
    )
    .unwrap_err();
    assert_eq!(e.line, 3);
    assert!(
        e.message.starts_with("not an out-of-memory error: the paste's error is `RuntimeError: Expected all tensors"),
        "{e}"
    );
    let nans = "modules.devices.NansException: A tensor with all NaNs was produced: not enough precision";
    let e = import::import(Path::new("paste.txt"), nans.as_bytes(), None, None).unwrap_err();
    assert!(e.message.contains("the paste's error is `modules.devices.NansException"), "{e}");
    // Two lines a paste joined: the error's words inside the line.
    let metal = "ggml_metal_graph_compute: command buffer 0 failed with status 5\nerror: Internal Error (0000000e:Internal Error)\n";
    let e = import::import(Path::new("paste.txt"), metal.as_bytes(), None, None).unwrap_err();
    assert!(e.message.contains("the paste's error is `"), "{e}");
    // TensorFlow's oneDNN CPU allocator is host memory.
    let mkl = "ResourceExhaustedError: OOM when allocating tensor with shape[1000000,1000] and type float on \
               /job:localhost/replica:0/task:0/device:CPU:0 by allocator mklcpu [Op:RandomUniform]\n";
    let e = import::import(Path::new("paste.txt"), mkl.as_bytes(), None, None).unwrap_err();
    assert!(e.message.contains("TensorFlow's CPU allocator"), "{e}");
    let e = import::import(Path::new("paste.txt"), b"loss 0.3 at step 200\n", None, None).unwrap_err();
    assert!(e.message.starts_with("no out-of-memory error found"), "{e}");
}

/// Every out-of-memory error of a paste is reported, each with the verdict of its own figures:
/// rank 0 out of room, rank 3 with its cache in pieces.
#[test]
fn every_oom_of_a_paste_gets_its_own_verdict() {
    let text = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
                capacity of 24.00 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 23.00 \
                GiB memory in use. Of the allocated memory 21.50 GiB is allocated by PyTorch, and 512.00 MiB is \
                reserved by PyTorch but unallocated.\n\
                [rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 3 has a total \
                capacity of 24.00 GiB of which 2.00 GiB is free. Including non-PyTorch memory, this process has 22.00 \
                GiB memory in use. Of the allocated memory 12.00 GiB is allocated by PyTorch, and 9.00 GiB is \
                reserved by PyTorch but unallocated.\n";
    let dir = crate::common::temp_dir("two-ooms");
    let file = dir.join("paste.txt");
    std::fs::write(&file, text).unwrap();
    let o = crate::common::oomscope(&["import", file.to_str().unwrap()]);
    let out = crate::common::stdout(&o);
    assert!(o.status.success(), "{}", crate::common::stderr(&o));
    assert!(out.contains("Verdict: true peak"), "rank 0's: {out}");
    assert!(out.contains("line 2: GPU 3, 4.00 GiB requested: fragmentation: "), "rank 3's own: {out}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A number below `n` from the deterministic generator (the same damage on every run).
fn below(rng: &mut TestRng, n: usize) -> usize {
    if n == 0 { 0 } else { rng.random_range(0..n) }
}

/// Pieces pasting and hand-editing put into texts.
const TOKENS: &[&str] = &[
    "\n",
    "> ",
    "**",
    "`",
    "[rank3]: ",
    "(VllmWorker rank=1 pid=7) ",
    "2026-11-27 10:00:00,123 - ERROR - ",
    " GiB",
    " MiB",
    "-",
    "nan",
    "1e308",
    "0 bytes",
    "18446744073709551615",
    " of which ",
    " is free",
    "Tried to allocate ",
    "GPU 3",
    "\u{1b}[31m",
    "é",
    "报错",
    "\t",
    "(",
    ")",
    ";",
    "Process 12 has ",
    "Limit:",
    "InUse:",
    "Bin (",
];

/// One random damage: a cut, a token put in, a range taken out or doubled, two lines swapped.
fn mutate(text: &str, rng: &mut TestRng) -> String {
    let chars: Vec<char> = text.chars().collect();
    let at = below(rng, chars.len() + 1);
    let to = (at + below(rng, 200)).min(chars.len());
    let s = |r: std::ops::Range<usize>| chars[r].iter().collect::<String>();
    match below(rng, 6) {
        0 => s(0..at),
        1 => s(0..at) + TOKENS[below(rng, TOKENS.len())] + &s(at..chars.len()),
        2 => s(0..at) + &s(to..chars.len()),
        3 => s(0..to) + &s(at..chars.len()),
        4 => {
            let mut lines: Vec<&str> = text.lines().collect();
            if lines.len() > 1 {
                let (a, b) = (below(rng, lines.len()), below(rng, lines.len()));
                lines.swap(a, b);
            }
            lines.join("\n")
        }
        _ => {
            let digit = char::from(b'0' + below(rng, 10) as u8);
            s(0..at) + &digit.to_string() + &s(at.min(chars.len())..chars.len())
        }
    }
}

/// Damage of every kind, piled up, on every real text: the reader and the verdict never
/// panic. `OOMSCOPE_FUZZ_ROUNDS` sets the rounds (each damages every text once more).
#[test]
fn no_paste_makes_the_reader_panic() {
    // What damage once made panic, read each time: XLA's buffer list with a size cut to `13.7e`
    // (read as 13.7 EiB, its share of the program multiplied past u64's end).
    let xla = "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 14745600000 bytes.\n\
               BufferAssignment OOM Debugging.\nBufferAssignment stats:\n\
               \x20            parameter allocation:   802.3KiB\n\
               \x20       maybe_live_out allocation:   13.73GiB\n\
               \x20    preallocated temp allocation:    7.92MiB\n\
               \x20                total allocation:   13.74GiB\n\
               Peak buffers:\n\tBuffer 1:\n\t\tSize: 13.7e: f32[500,18,640,640]\n";
    let read = std::panic::catch_unwind(|| reading("xla.txt", xla));
    assert!(read.is_ok_and(|r| r.verdict != "unread"), "{xla}");
    // PyTorch's allocated figure cut to `22.e` (22 EiB, past 64 bits, the most they count),
    // its cache's free figure added to it.
    let torch = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB. GPU 0 has a total \
                 capacty of 23.50 GiB of which 42.06 MiB is free. Of the allocated memory 22.ee. Including non-PyTorch \
                 memory, this process has 23.40 GiB memory in use. Of the allocated memory 22.99 GiB is allocated by \
                 PyTorch, and 1.76 MiB is reserved by PyTorch but unallocated.";
    let read = std::panic::catch_unwind(|| reading("torch.txt", torch));
    assert!(read.is_ok_and(|r| r.verdict != "unread"), "{torch}");
    // MPS's other allocations cut to `17E` and added to what MPS holds.
    let mps = "RuntimeError: MPS backend out of memory (MPS allocated: 8.89 GB, other allocations: 17Error: MPS \
               backend out of memory (MPS allocated: 8.89 GB, other allocations: 172.98 MB, max allowed: 9.07 GB). \
               Tried to allocate 256.00 MB on private pool.";
    let read = std::panic::catch_unwind(|| reading("mps.txt", mps));
    assert!(read.is_ok_and(|r| r.verdict != "unread"), "{mps}");
    let rounds: usize = std::env::var("OOMSCOPE_FUZZ_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(2);
    let texts = texts();
    let mut rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let started = std::time::Instant::now();
    let mut runs = 0u64;
    for round in 0..rounds {
        for (name, text) in &texts {
            let mut t = text.clone();
            for _ in 0..=round % 4 {
                t = mutate(&t, &mut rng);
            }
            let outcome = std::panic::catch_unwind(|| reading(name, &t));
            runs += 1;
            assert!(outcome.is_ok(), "{name} damaged (round {round}) panics the reader:\n{t}");
        }
    }
    eprintln!("{runs} damaged texts read in {:.1} s, no panic", started.elapsed().as_secs_f64());
}
