//! The real PyTorch snapshots people committed to public repositories (read from
//! `../shared/data/torch-snapshots/`, never copied here): imports name user code.

use crate::common::*;

fn snapshots() -> Vec<std::path::PathBuf> {
    let dir = shared().join("data/torch-snapshots");
    let mut files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    assert!(files.len() >= 10, "{}", dir.display());
    files
}

#[test]
#[cfg_attr(oomscope_missing = "shared", ignore = "needs the real data in ../shared, which is not here")]
fn imports_name_user_code_not_pytorchs_frames() {
    let internal =
        ["memory_snapshot.cpp", "gather_with_cpp", "CUDACachingAllocator", "c10::", "torch::", "_Py", "unknown"];
    let mut named_by_user = 0;
    for f in snapshots() {
        let o = oomscope(&["import", f.to_str().unwrap(), "--format", "json"]);
        assert_eq!(o.status.code(), Some(0), "{}: {}", f.display(), stderr(&o));
        let d: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
        for n in d["usage_by_node"].as_array().unwrap() {
            let op = n["op"].as_str().unwrap();
            assert!(!internal.iter().any(|i| op.contains(i)), "{}: node {op:?}", f.display());
            if op.contains(".py:") {
                named_by_user += 1;
            }
        }
    }
    // Of the snapshots with frames, the nodes point at the user's own lines.
    assert!(named_by_user >= 20, "{named_by_user} nodes name a line of user code");
}
