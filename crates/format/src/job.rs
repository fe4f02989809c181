//! A job's failure as `oomscope report DIR` gives it (`--format json`) and the terminal UI
//! shows it: every rank side by side, the first to fail and its verdict, what sets it apart,
//! and the job's verdict, in words. Plain data: `oomscope_diagnose::job` finds it,
//! `oomscope_report::job` words it.

use crate::{KindBytes, Verdict};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// What names the job (torchrun's run id, SLURM's job, the rendezvous address).
    pub job: Option<String>,
    /// Every rank with a dump, by rank.
    pub ranks: Vec<JobRank>,
    /// The rank that ran out of memory first, when one did.
    pub first_failure: Option<FirstFailure>,
    /// The job's verdict, when a rank failed.
    pub verdict: Option<JobVerdict>,
    /// What sets the failing rank apart from the others, the largest first.
    pub differences: Vec<JobDifference>,
    /// Other jobs with dumps in the same directory, not shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub other_jobs: Vec<String>,
}

/// One rank at the failure (its OOM dump, or its state when another rank failed, or its
/// latest dump).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRank {
    pub rank: u32,
    pub host: String,
    pub pid: u32,
    pub gpu: Option<u32>,
    pub node_rank: Option<u32>,
    /// The dump shown for it.
    pub dump: String,
    /// It ran out of memory.
    pub oom: bool,
    /// Bytes in use, reserved, and the most in use.
    pub allocated: u64,
    pub reserved: u64,
    pub peak: u64,
    /// Its last step mark (-1: none).
    pub step: i64,
    /// Live bytes by kind, largest first.
    pub by_kind: Vec<KindBytes>,
    /// Device memory held outside the framework, when known.
    pub others: u64,
    /// The failed request, when it failed.
    pub request: Option<u64>,
    /// When its dump was taken, milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dumped_unix_ms: Option<u64>,
    /// Live bytes at each step mark its dump keeps, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepBytes>,
}

/// Live bytes at a step mark.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepBytes {
    pub step: i64,
    pub bytes: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FirstFailure {
    pub rank: u32,
    pub host: String,
    pub gpu: Option<u32>,
    pub dump: String,
    pub step: i64,
    pub request: Option<u64>,
    /// Its own verdict, as its dump's.
    pub verdict: Verdict,
}

/// Why a job failed, across its ranks, as its report names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobVerdictKind {
    /// One rank's data or work.
    Imbalance,
    /// One rank keeps memory across steps.
    Leak,
    /// Every rank alike: the model and batch themselves.
    Alike,
    /// Memory outside the framework on one GPU.
    Outside,
    /// One rank's dump only.
    #[default]
    Alone,
}

impl JobVerdictKind {
    /// The name the JSON gives it.
    pub fn name(self) -> &'static str {
        match self {
            JobVerdictKind::Imbalance => "imbalance",
            JobVerdictKind::Leak => "leak",
            JobVerdictKind::Alike => "alike",
            JobVerdictKind::Outside => "outside",
            JobVerdictKind::Alone => "alone",
        }
    }
}

/// What a difference of the failing rank is of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DifferenceKind {
    /// Live bytes of one kind of memory.
    #[default]
    Kind,
    /// Live bytes of one op.
    Node,
    /// The shape of an op's tensors.
    Shape,
    /// The request that failed.
    Request,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobVerdict {
    pub kind: JobVerdictKind,
    pub headline: String,
    pub evidence: Vec<String>,
    pub fix: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobDifference {
    /// A kind's bytes, an op's, a shape, or the request that failed (when what the rank
    /// held does not set it apart: `median` is then the other ranks' largest tensor's).
    pub what: DifferenceKind,
    /// The kind's name, the op's.
    pub name: String,
    /// On the failing rank.
    pub bytes: u64,
    /// The other ranks' median (kinds and nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub median: Option<u64>,
    /// The failing rank's shape and the one most others have (shapes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usual: Option<Vec<i64>>,
}
