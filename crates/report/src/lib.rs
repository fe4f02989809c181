//! Every renderer, reading dumps only, so a report looks the same live, replayed or
//! re-rendered: TF's text ([`tf`]), PyTorch's words ([`torch`]), the short summary
//! ([`summary`]), the verdict's words ([`verdict`], from a diagnosis of `oomscope-diagnose`)
//! and a pasted message's ([`message`]), a replay's account of itself ([`replay`]), JSON; exports for other viewers ([`export`]) and
//! what grew between two dumps ([`diff`]).

pub mod diff;
pub mod export;
pub mod fit;
pub mod html;
pub mod job;
pub mod message;
pub mod pickle;
pub mod replay;
pub mod summary;
pub mod tf;
pub mod torch;
pub mod verdict;

#[cfg(test)]
mod tests;

use oomscope_format::Dump;
use std::fmt;
use std::str::FromStr;

/// The report formats every command that prints a report accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// TensorFlow's OOM text and "Current usage from device".
    Tf,
    /// The short human report.
    Summary,
    /// The dump itself, as one line of JSON.
    Json,
    /// A self-contained HTML page ([`html`]).
    Html,
}

impl FromStr for Format {
    type Err = oomscope_base::Problem;
    fn from_str(s: &str) -> Result<Format, oomscope_base::Problem> {
        match s {
            "tf" => Ok(Format::Tf),
            "summary" => Ok(Format::Summary),
            "json" => Ok(Format::Json),
            "html" => Ok(Format::Html),
            other => Err(oomscope_base::problem!("unknown format {other:?}; expected tf, summary, json or html")),
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Format::Tf => "tf",
            Format::Summary => "summary",
            Format::Json => "json",
            Format::Html => "html",
        })
    }
}

/// What an OOM leaves behind: the report to print and to hand to the live feed, and how
/// writing the dump went.
#[derive(Debug)]
pub struct PostMortem<E> {
    /// TF's text (or PyTorch's words for its allocator), then the verdict.
    pub report: String,
    pub written: Result<(), E>,
}

/// The one post-mortem sequence, the same wherever an OOM is met (the library inside a
/// training process, `oomscope run` reading a framework's log, the demo): the verdict is
/// attached to the dump (`replay` tries a fix of the allocator's settings, as
/// [`verdict::attach`] says), the dump is written by `write` with its verdict, and the report
/// is rendered from what was written, so that what is printed now and `oomscope report` of
/// the dump later are the same bytes. The caller prints the report and hands the dump and it
/// to the live feed.
pub fn post_mortem<E>(
    dump: &mut Dump,
    replay: &mut dyn FnMut(&Dump, oomscope_format::SettingChange) -> Option<oomscope_format::WhatIf>,
    write: impl FnOnce(&Dump) -> Result<(), E>,
) -> PostMortem<E> {
    verdict::attach(dump, replay);
    let written = write(dump);
    PostMortem { report: render(dump, Format::Tf), written }
}

/// The report a post-mortem view shows (TF's text and the verdict), when the dump has
/// something to report: an OOM, or an imported log or snapshot.
pub fn view_report(dump: &Dump) -> Option<String> {
    (dump.oom.is_some() || dump.imported.is_some()).then(|| render(dump, Format::Tf))
}

/// The report in the given format, ending with a newline. The TF text is followed by the
/// verdict, set apart by a blank line: TF's part stays byte for byte what TF prints.
pub fn render(dump: &Dump, format: Format) -> String {
    render_as(dump, format, None)
}

/// [`render`], with TF's text as `tf_style` (a TensorFlow version's) prints it.
pub fn render_as(dump: &Dump, format: Format, tf_style: Option<&oomscope_format::TfVariant>) -> String {
    if format == Format::Html {
        return html::page(dump);
    }
    // A message has no allocator state for TF's text: its report is the summary.
    if let Some(m) = dump.imported.as_ref().and_then(|i| i.message.as_ref())
        && format != Format::Json
    {
        return message::summary(dump, m);
    }
    match format {
        Format::Tf => {
            // A rank of a job says first which it is; a replay how it went.
            let mut s = process_line(dump);
            s.push_str(&replay::account(dump));
            s.push_str(&match tf_style {
                // PyTorch's allocator made this dump: its words, not TF's.
                _ if dump.allocator_kind() == oomscope_format::AllocatorKind::Caching => torch::render(dump),
                Some(v) => tf::render_variant(dump, v),
                None => tf::render(dump),
            });
            if let Some(v) = &dump.verdict {
                s.push('\n');
                s.push_str(&verdict::render(v));
            }
            s
        }
        Format::Summary | Format::Html => process_line(dump) + &replay::account(dump) + &summary::render(dump),
        Format::Json => {
            // Serializing plain data to a String cannot fail (no maps with non-string keys).
            let mut s = serde_json::to_string(dump).unwrap_or_default();
            s.push('\n');
            s
        }
    }
}

/// `rank 2 of 4 (host gpu-07, local rank 2), GPU 2`, a line, for a dump of a rank of a job
/// (nothing otherwise): among the reports of many ranks, which one this is.
pub fn process_line(dump: &Dump) -> String {
    match &dump.process {
        Some(p) if p.in_job() => format!("{}\n", describe_process(p, dump.gpu())),
        _ => String::new(),
    }
}

/// A rank and where it ran, in words: `rank 2 of 4 (host gpu-07, local rank 2), GPU 2`.
pub fn describe_process(p: &oomscope_format::ProcessInfo, gpu: Option<u32>) -> String {
    let mut s = match (p.rank, p.world_size) {
        (Some(r), Some(w)) => format!("rank {r} of {w}"),
        (Some(r), None) => format!("rank {r}"),
        _ => format!("process {}", p.pid),
    };
    let mut place = Vec::new();
    if !p.host.is_empty() {
        place.push(format!("host {}", oomscope_base::text::safe_line(&p.host)));
    }
    if p.multi_node()
        && let Some(n) = p.node_rank
    {
        place.push(format!("node {n}"));
    }
    if let Some(l) = p.local_rank {
        place.push(format!("local rank {l}"));
    }
    if !place.is_empty() {
        s.push_str(&format!(" ({})", place.join(", ")));
    }
    if let Some(g) = gpu {
        s.push_str(&format!(", GPU {g}"));
    }
    s
}

/// The README's Rust example, compiled and run as this crate's doctest so it stays true.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
