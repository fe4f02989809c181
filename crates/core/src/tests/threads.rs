//! Many threads allocating and freeing through one allocator, each inside its own name
//! scopes: the final state is consistent and every allocation is recorded under its
//! thread's scoped name.

use crate::Allocator;
use crate::Request;
use crate::bfc::Options;
use crate::device::SimDevice;
use crate::scope;
use oomscope_format::Source;
use std::sync::Arc;

#[test]
fn threads_with_scoped_names_leave_a_consistent_state() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 2_000;
    let limit = 256 << 20;
    let mut o = Options::new(limit);
    o.allow_growth = true;
    let alloc = Arc::new(Allocator::new(o, Box::new(SimDevice::new(limit, 0))));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let alloc = Arc::clone(&alloc);
            std::thread::spawn(move || {
                let _model = scope::push("model");
                let _layer = scope::push(&format!("layer{t}"));
                let mut kept = Vec::new();
                let mut seed = t as u64 * 7919 + 1;
                for i in 0..ROUNDS {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let bytes = 256 + seed % (64 << 10);
                    let addr = alloc.allocate(&Request::new(bytes).op("Conv2D")).expect("fits");
                    if i % 4 == 0 {
                        kept.push(addr); // leave some live at the end
                    } else {
                        alloc.free(addr).expect("own allocation");
                    }
                    if i % 50 == 0 {
                        assert!(alloc.with_engine(|e| e.check()).is_ok());
                    }
                }
                kept.len()
            })
        })
        .collect();
    let kept: usize = handles.into_iter().map(|h| h.join().expect("no panic")).sum();
    alloc.with_engine(|e| e.check()).unwrap();
    let d = alloc.dump(Source::default());
    assert_eq!(d.live_chunks().count(), kept);
    assert_eq!(d.stats.num_allocs, (THREADS * ROUNDS) as u64);
    assert_eq!(d.stats.num_frees, (THREADS * ROUNDS - kept) as u64);
    assert_eq!(d.usage_by_node.len(), THREADS, "one node per thread scope: {:?}", d.usage_by_node);
    for t in 0..THREADS {
        let name = format!("model/layer{t}/Conv2D");
        let node = d.usage_by_node.iter().find(|n| n.op == name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(node.count, (ROUNDS / 4) as u64);
    }
}

#[test]
fn an_oom_carries_the_report_and_the_allocator_goes_on() {
    let limit = 256 << 20;
    let alloc = Allocator::new(Options::new(limit), Box::new(SimDevice::new(limit, 0)));
    let a = scope::with("encoder", || {
        alloc.allocate(&Request::new(100 << 20).op("MatMul").shape(&[1024, 25600]).dtype("float32"))
    })
    .unwrap();
    let mut oom = alloc.allocate(&Request::new(200 << 20).op("decoder/MatMul")).unwrap_err();
    assert!(oom.dump.verdict.is_none(), "the allocator does no analysis");
    // A BFC dump: no settings of the caching allocator to try by replay.
    oomscope_report::verdict::attach(&mut oom.dump, &mut |_, _| None);
    let report = oomscope_report::render(&oom.dump, oomscope_report::Format::Tf);
    assert!(report.starts_with(
        "Allocator (GPU_0_bfc) ran out of memory trying to allocate 200.00MiB (rounded to 209715200)requested by op decoder/MatMul\n"
    ));
    assert!(report.contains("  100.00MiB from encoder/MatMul\n"), "{report}");
    assert!(oom.to_string().contains("out of memory"));
    assert!(report.contains("\nVerdict: true peak\n"), "the report ends with the verdict: {report}");
    let chunk = oom.dump.live_chunks().next().unwrap();
    assert_eq!(chunk.shape.as_deref(), Some(&[1024, 25600][..]));
    alloc.free(a).unwrap();
    assert!(alloc.allocate(&Request::new(200 << 20)).is_ok(), "works again after the free");
    assert!(alloc.free(12345).is_err(), "a foreign pointer is an error, not a crash");
}

#[test]
fn stacks_are_captured_raw_and_symbolized_in_the_dump() {
    let limit = 8 << 20;
    let alloc = Allocator::with_recording(
        Options::new(limit),
        Box::new(SimDevice::new(limit, 0)),
        crate::Recording { ops: true, stacks: true },
    );
    alloc.allocate(&Request::new(1 << 20).op("x")).unwrap();
    let d = alloc.dump(Source::default());
    let chunk = d.live_chunks().next().unwrap();
    let stack = &d.stacks[chunk.stack.expect("a stack index") as usize];
    assert!(!stack.ips.is_empty());
    let functions: Vec<&str> = stack.frames.iter().filter_map(|f| f.function.as_deref()).collect();
    assert!(
        functions.iter().any(|f| f.contains("stacks_are_captured_raw_and_symbolized_in_the_dump")),
        "the test function is on the stack: {functions:?}"
    );
}
