//! The names of the dump files oomscope writes, a small protocol of their own: the library
//! in a training process and `oomscope run` write them, `oomscope run` and `oomscope report
//! DIR` find them again by name. One type writes them ([`Display`](fmt::Display)) and reads
//! them back ([`FromStr`]), so the two sides cannot drift apart.
//!
//! `oomscope-[rankR-]PID-DEVICE-MOMENT.dump.json`: `rankR` when the process knows its rank
//! in a job; `DEVICE` as `gpu0` (or `cpu0`, `tpu0`: what a framework's log names); `MOMENT`
//! is `oomN` (the N-th OOM of the process), `stateN` (asked for by the program after N OOMs),
//! `stepNNNNN` (at a step mark, five digits at least so names sort by step), `exit`, or
//! `jobN` (the state of a rank when another rank of its job ran out of memory, the N-th
//! time).

use std::fmt;
use std::str::FromStr;

/// Every dump file's name starts with this and ends with [`SUFFIX`].
pub const PREFIX: &str = "oomscope-";
pub const SUFFIX: &str = ".dump.json";

/// A dump file's name, as data.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DumpName {
    /// The process's rank in its job, when it has one.
    pub rank: Option<u32>,
    pub pid: u32,
    pub device: DeviceTag,
    pub moment: Moment,
}

/// A device as a dump's name gives it: `gpu0`, `cpu0`, `tpu3`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DeviceTag {
    /// Lowercase ASCII letters: `gpu`, `cpu`, `tpu`.
    pub kind: String,
    pub index: u32,
}

impl DeviceTag {
    pub fn gpu(index: u32) -> DeviceTag {
        DeviceTag { kind: "gpu".into(), index }
    }

    /// From a framework's device name (`GPU:0`, `/device:CPU:0`, `gpu0`); `None` when it does
    /// not end in letters and a number.
    pub fn from_framework(name: &str) -> Option<DeviceTag> {
        let last = name.rsplit('/').next().unwrap_or(name);
        let compact: String = last.chars().filter(|c| *c != ':').collect::<String>().to_ascii_lowercase();
        let compact = compact.strip_prefix("device").unwrap_or(&compact);
        compact.parse().ok()
    }
}

/// When the dump was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Moment {
    /// The N-th OOM of the process (from 1).
    Oom(u64),
    /// Asked for by the program (`oomscope_dump`), after N OOMs.
    State(u64),
    /// At a step mark.
    Step(i64),
    /// At the process's exit.
    Exit,
    /// Another rank of the job ran out of memory: this rank's state then, the N-th time.
    Job(u64),
}

impl Moment {
    /// Whether the dump was written because this process ran out of memory.
    pub fn is_oom(self) -> bool {
        matches!(self, Moment::Oom(_))
    }
}

impl fmt::Display for DeviceTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.kind, self.index)
    }
}

impl FromStr for DeviceTag {
    type Err = ();
    fn from_str(s: &str) -> Result<DeviceTag, ()> {
        let letters = s.len() - s.trim_start_matches(|c: char| c.is_ascii_lowercase()).len();
        let (kind, index) = s.split_at(letters);
        if kind.is_empty() || index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return Err(());
        }
        Ok(DeviceTag { kind: kind.into(), index: index.parse().map_err(|_| ())? })
    }
}

impl fmt::Display for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Moment::Oom(n) => write!(f, "oom{n}"),
            Moment::State(n) => write!(f, "state{n}"),
            Moment::Step(s) => write!(f, "step{s:05}"),
            Moment::Exit => f.write_str("exit"),
            Moment::Job(n) => write!(f, "job{n}"),
        }
    }
}

impl FromStr for Moment {
    type Err = ();
    fn from_str(s: &str) -> Result<Moment, ()> {
        let number = |prefix: &str| s.strip_prefix(prefix).filter(|n| !n.is_empty() && !n.starts_with('+'));
        if s == "exit" {
            Ok(Moment::Exit)
        } else if let Some(n) = number("oom") {
            n.parse().map(Moment::Oom).map_err(|_| ())
        } else if let Some(n) = number("state") {
            n.parse().map(Moment::State).map_err(|_| ())
        } else if let Some(n) = number("step") {
            n.parse().map(Moment::Step).map_err(|_| ())
        } else if let Some(n) = number("job") {
            n.parse().map(Moment::Job).map_err(|_| ())
        } else {
            Err(())
        }
    }
}

impl fmt::Display for DumpName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(PREFIX)?;
        if let Some(r) = self.rank {
            write!(f, "rank{r}-")?;
        }
        write!(f, "{}-{}-{}{SUFFIX}", self.pid, self.device, self.moment)
    }
}

/// A file name that is not one of oomscope's dump names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotADumpName;

impl fmt::Display for NotADumpName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not an oomscope dump name ({PREFIX}[rankR-]PID-DEVICE-MOMENT{SUFFIX})")
    }
}

impl std::error::Error for NotADumpName {}

impl FromStr for DumpName {
    type Err = NotADumpName;
    fn from_str(s: &str) -> Result<DumpName, NotADumpName> {
        let inner = s.strip_prefix(PREFIX).and_then(|s| s.strip_suffix(SUFFIX)).ok_or(NotADumpName)?;
        let (rank, rest) = match inner.strip_prefix("rank").and_then(|r| r.split_once('-')) {
            Some((r, rest)) => (Some(r.parse().map_err(|_| NotADumpName)?), rest),
            None => (None, inner),
        };
        let mut parts = rest.splitn(3, '-');
        let (Some(pid), Some(device), Some(moment)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(NotADumpName);
        };
        Ok(DumpName {
            rank,
            pid: pid.parse().map_err(|_| NotADumpName)?,
            device: device.parse().map_err(|_| NotADumpName)?,
            moment: moment.parse().map_err(|_| NotADumpName)?,
        })
    }
}

/// The name of a job's failure file in the dump directory: `oomscope-job-JOB.failures`,
/// the job's name kept where it is letters, digits, `.`, `_` and `-` (other characters, and
/// names past 48 characters, are replaced and the name's hash added, so that two jobs never
/// share a file).
pub fn job_failures_name(job: &str) -> String {
    let kept: String = job
        .chars()
        .take(48)
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    if kept == job && !kept.is_empty() && !kept.starts_with('.') {
        return format!("{PREFIX}job-{kept}.failures");
    }
    // FNV-1a: stable across builds and machines, which every node must agree on.
    let hash = job.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    format!("{PREFIX}job-{kept}-{hash:016x}.failures")
}

impl DumpName {
    /// Whether a file name is one of oomscope's dump names, of whatever moment.
    pub fn matches(file_name: &str) -> bool {
        file_name.parse::<DumpName>().is_ok()
    }

    /// The same process and device: the dumps one allocator wrote.
    pub fn same_owner(&self, other: &DumpName) -> bool {
        (self.rank, self.pid, &self.device) == (other.rank, other.pid, &other.device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_back_as_written() {
        let names = [
            DumpName { rank: None, pid: 4242, device: DeviceTag::gpu(0), moment: Moment::Oom(1) },
            DumpName { rank: Some(3), pid: 7, device: DeviceTag::gpu(3), moment: Moment::Step(20) },
            DumpName { rank: Some(0), pid: 7, device: "cpu0".parse().unwrap(), moment: Moment::Exit },
            DumpName { rank: None, pid: 1, device: DeviceTag::gpu(12), moment: Moment::State(0) },
            DumpName { rank: Some(511), pid: 99, device: DeviceTag::gpu(7), moment: Moment::Job(2) },
            DumpName { rank: None, pid: 1, device: DeviceTag::gpu(0), moment: Moment::Step(-1) },
            DumpName { rank: None, pid: 1, device: DeviceTag::gpu(0), moment: Moment::Step(123_456) },
        ];
        for n in names {
            let text = n.to_string();
            assert_eq!(text.parse::<DumpName>(), Ok(n.clone()), "{text}");
        }
    }

    #[test]
    fn the_names_written_before_ranks_still_read() {
        let n: DumpName = "oomscope-4242-gpu0-step00020.dump.json".parse().unwrap();
        assert_eq!((n.rank, n.pid, n.device.to_string(), n.moment), (None, 4242, "gpu0".into(), Moment::Step(20)));
        assert_eq!("oomscope-4242-tpu1-oom3.dump.json".parse::<DumpName>().unwrap().moment, Moment::Oom(3));
        assert_eq!(
            DumpName { rank: None, pid: 4242, device: DeviceTag::gpu(0), moment: Moment::Step(20) }.to_string(),
            "oomscope-4242-gpu0-step00020.dump.json"
        );
    }

    #[test]
    fn other_names_are_not_dump_names() {
        for s in [
            "oomscope-run-42.log",
            "oomscope-42-gpu0-oom1.json",
            "oomscope-x-gpu0-oom1.dump.json",
            "oomscope-42-gpu-oom1.dump.json",
            "oomscope-42-gpu0-later.dump.json",
            "oomscope-rankx-42-gpu0-oom1.dump.json",
            "oomscope-42-gpu0-oom.dump.json",
            "oomscope-42-gpu0-oom+1.dump.json",
            "a.dump.json",
        ] {
            assert!(s.parse::<DumpName>().is_err(), "{s}");
        }
    }

    #[test]
    fn job_failure_files_are_named_the_same_on_every_node_and_apart_for_two_jobs() {
        assert_eq!(job_failures_name("3f2a-11"), "oomscope-job-3f2a-11.failures");
        let a = job_failures_name("10.0.0.1:29500");
        let b = job_failures_name("10.0.0.1_29500");
        assert!(a.starts_with("oomscope-job-10.0.0.1_29500-") && a.ends_with(".failures"), "{a}");
        assert_ne!(a, b);
        assert_eq!(a, job_failures_name("10.0.0.1:29500"));
        assert!(!job_failures_name("../../etc").contains('/'));
        assert!(job_failures_name(&"x".repeat(500)).len() < 100);
    }

    #[test]
    fn framework_device_names_become_tags() {
        assert_eq!(DeviceTag::from_framework("GPU:0").map(|t| t.to_string()), Some("gpu0".into()));
        assert_eq!(
            DeviceTag::from_framework("/job:localhost/replica:0/task:0/device:CPU:0").unwrap().to_string(),
            "cpu0"
        );
        assert_eq!(DeviceTag::from_framework("TPU_3").map(|t| t.to_string()), None);
    }
}
