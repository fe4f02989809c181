//! Output files in shared directories: a planted symlink, a device node, a FIFO or a
//! symlinked target must never be replaced or redirected; temporaries left by killed
//! writes are cleaned up.

use crate::common::*;
use std::fs;
use std::os::unix::fs::{FileTypeExt, symlink};

const LOG: &str = "fixtures/logs/seed-001-mnist.txt";

#[test]
fn a_symlink_planted_under_a_guessable_temporary_name_is_not_followed() {
    let dir = temp_dir("planted-temp");
    let victim = dir.join("victim.txt");
    fs::write(&victim, b"precious").unwrap();
    // The names a writer with a nearby pid would have used for a temporary file.
    let next = std::process::id();
    for pid in next..next + 200 {
        symlink(&victim, dir.join(format!(".out.json.{pid}.tmp"))).unwrap();
    }
    let out = dir.join("out.json");
    let o = oomscope(&["import", LOG, "-o", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(fs::read(&victim).unwrap(), b"precious", "the planted link's target is untouched");
    assert!(fs::read_to_string(&out).unwrap().starts_with('{'));
}

#[test]
fn a_symlinked_output_replaces_its_destination_and_stays_a_link() {
    let dir = temp_dir("symlinked-output");
    fs::write(dir.join("real.json"), b"old").unwrap();
    let link = dir.join("latest.json");
    symlink("real.json", &link).unwrap();
    let o = oomscope(&["import", LOG, "-o", link.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert!(fs::read_to_string(dir.join("real.json")).unwrap().starts_with('{'));
}

#[test]
fn a_device_node_given_as_output_is_written_in_place_not_replaced() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // mknod needs root; /dev/null itself cannot be replaced by a user, so write to it.
        let o = oomscope(&["import", LOG, "-o", "/dev/null"]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(fs::metadata("/dev/null").unwrap().file_type().is_char_device());
        eprintln!("not root: the private device node is not made; /dev/null was written instead");
        return;
    }
    let dir = temp_dir("device-node");
    let node = dir.join("null");
    let c = std::ffi::CString::new(node.to_str().unwrap()).unwrap();
    // SAFETY: a valid path; (1, 3) is the null device.
    let made = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(made, 0, "mknod: {}", std::io::Error::last_os_error());
    let o = oomscope(&["import", LOG, "-o", node.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(fs::symlink_metadata(&node).unwrap().file_type().is_char_device(), "the device node is still a device");
}

#[test]
fn a_directory_given_as_output_is_refused_with_exit_2() {
    let dir = temp_dir("dir-output");
    let o = oomscope(&["import", LOG, "-o", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("directory"), "{}", stderr(&o));
}

#[test]
fn temporaries_left_by_killed_writes_are_removed_and_reported() {
    let dir = temp_dir("stale-temp");
    // pids beyond any pid_max: their writers are gone.
    let stale = [dir.join(".out.json.2147483000.tmp"), dir.join(".out.json.2147483001.0123abcd.tmp")];
    for s in &stale {
        fs::write(s, vec![0u8; 1 << 20]).unwrap();
    }
    let o = oomscope(&["import", LOG, "-o", dir.join("out.json").to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stale.iter().all(|s| !s.exists()), "{:?}", files_in(&dir));
    assert!(stderr(&o).contains("removed 2 temporary file(s) of 2.00MiB"), "{}", stderr(&o));
    assert_eq!(files_in(&dir), ["out.json"]);
}
