//! What a dump made by an importer keeps besides the usual fields: where it came from, the
//! text variant of a TF log (so the log prints back as it was), the sections the input did
//! not have (renderers leave them out and say so, never invent them), and the parts of a
//! partial log that cannot be recomputed from the rest.

use serde::{Deserialize, Serialize};

/// A dump's imported origin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Imported {
    pub from: ImportedFrom,
    /// The TF text variant the log was written in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<TfVariant>,
    /// Sections the input did not have.
    #[serde(default)]
    pub absent: Vec<Section>,
    /// The lines after `Bin for X was Y, Chunk State:`, as printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_state: Option<Vec<String>>,
    /// `Bin for` figures as printed: (request, bin size), for logs without the chunk list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bin_for: Option<[u64; 2]>,
    /// The occupancy bar, as printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupancy: Option<String>,
    /// "N Chunks of size S": (N, S), as printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary_by_size: Option<Vec<[u64; 2]>>,
    /// "Sum Total of in-use chunks", as printed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sum_total: Option<u64>,
    /// "Remaining N nodes with X": (N, X).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_remaining: Option<[u64; 2]>,
    /// An out-of-memory message's figures.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<crate::Message>,
    /// Lines read, and lines that carried something the importer used.
    #[serde(default)]
    pub lines_read: u64,
    #[serde(default)]
    pub lines_used: u64,
    /// What pasting did to the text, undone before it was read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pasted: Vec<PasteDamage>,
}

/// The formats importers read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ImportedFrom {
    /// TensorFlow's OOM log (the BFC allocator's dump).
    #[default]
    TfLog,
    /// A PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`).
    TorchSnapshot,
    /// An out-of-memory message (PyTorch, XLA, TensorFlow, CUDA libraries).
    Message,
}

impl ImportedFrom {
    /// The name dumps use.
    pub fn name(self) -> &'static str {
        match self {
            ImportedFrom::TfLog => "tf-log",
            ImportedFrom::TorchSnapshot => "torch-snapshot",
            ImportedFrom::Message => "message",
        }
    }
}

impl Imported {
    /// True when the input did not have `section`.
    pub fn lacks(&self, section: Section) -> bool {
        self.absent.contains(&section)
    }
}

/// The parts of an allocator report.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// The failed request: size, rounded size, op.
    Request,
    /// The 21 bin lines.
    Bins,
    /// The free chunks of the request's bin.
    ChunkState,
    /// Regions and their chunks.
    Regions,
    /// In-use chunks by size.
    Summary,
    /// "Sum Total", "Total bytes in pool", the limit.
    Totals,
    /// The `Stats:` rows.
    Stats,
    /// The occupancy bar.
    Occupancy,
    /// "Current usage from device", by node.
    Usage,
    /// The event history.
    Events,
}

impl Section {
    pub const ALL: [Section; 10] = [
        Section::Request,
        Section::Bins,
        Section::ChunkState,
        Section::Regions,
        Section::Summary,
        Section::Totals,
        Section::Stats,
        Section::Occupancy,
        Section::Usage,
        Section::Events,
    ];

    /// How a report names it.
    pub fn describe(self) -> &'static str {
        match self {
            Section::Request => "the failed request",
            Section::Bins => "the bins",
            Section::ChunkState => "the chunk state",
            Section::Regions => "the regions and chunks",
            Section::Summary => "the summary by size",
            Section::Totals => "the totals",
            Section::Stats => "the stats",
            Section::Occupancy => "the occupancy bar",
            Section::Usage => "the usage by node",
            Section::Events => "the event history",
        }
    }
}

/// How a version of TensorFlow printed its allocator report.
/// Each part varies on its own; [`TfVariant::PRESETS`] names the combinations releases used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TfVariant {
    pub header: HeaderStyle,
    pub bins: BinStyle,
    pub chunks: ChunkStyle,
    pub stats: StatsStyle,
    pub totals: TotalsStyle,
    /// Addresses as MSVC prints pointers: 16 upper-case hex digits, no `0x`.
    pub windows: bool,
    pub prefix: PrefixStyle,
}

/// The OOM warning.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeaderStyle {
    /// TF 2.13+ and XLA: `Allocator (X) ran out of memory trying to allocate H (rounded to N)requested by op OP`,
    /// the fragmentation hint, `Current allocation summary follows.` twice, and
    /// `BFCAllocator dump for X`.
    Repeated,
    /// TF 2.6–2.12: as `Repeated`, with `Current allocation summary follows.` once.
    #[default]
    Modern,
    /// TF 2.4–2.5: `Allocator (X) ran out of memory trying to allocate H (rounded to N)`, then
    /// `Current allocation summary follows.` on its own line, and `BFCAllocator dump for X`.
    Rounded,
    /// TF 1.13–2.3: `Allocator (X) ran out of memory trying to allocate H (rounded to N).  Current allocation summary follows.`
    Mid,
    /// TF ≤ 1.12: `Ran out of memory trying to allocate H.  See logs for memory state.`, after the dump.
    Old,
}

/// The bin lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BinStyle {
    /// `Chunks in use: N. X allocated for chunks. Y in use in bin. Z client-requested in use in bin.`
    #[default]
    Modern,
    /// Before TF 1.3: `Chunks in use: N X allocated for chunks. W client-requested for chunks. Y in use in bin. Z client-requested in use in bin.`
    Ancient,
}

/// The chunk lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChunkStyle {
    /// TF 2.4+: `InUse at 7f3bdf000b00 of size 256 next 5`, each region headed `Next region of size N`.
    #[default]
    Modern,
    /// TF 1.13–2.3: `InUse at 0x7f3bdf000b00 next 5 of size 256`.
    Mid,
    /// TF ≤ 1.12: `Chunk at 0x7f3bdf000b00 of size 256` and `Free  at ...`, no region lines.
    Old,
}

/// The `Stats:` rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsStyle {
    /// TF 2.16+ and XLA: eight rows, labels 18 wide, sizes as `256.00MiB`.
    EightHuman,
    /// TF 2.3–2.15: eight rows, labels 18 wide, sizes in bytes.
    #[default]
    Eight,
    /// TF ≤ 2.2: five rows (Limit to MaxAllocSize), labels 14 wide.
    Five,
}

/// The totals line after "Sum Total of in-use chunks".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TotalsStyle {
    /// TF 2.16+ and XLA: `Total size in pool: 256.00MiB memory_limit_: 256.00MiB available size: 0B curr_region_allocation_bytes_: 256.00MiB`.
    Size,
    /// TSL from 2022-11: `Total bytes in pool: P memory_limit_: L available bytes: A curr_region_allocation_bytes_: C`.
    #[default]
    Pool,
    /// Before: `total_region_allocated_bytes_: P memory_limit_: L available bytes: A curr_region_allocation_bytes_: C`.
    Region,
    /// TF ≤ 1.12: no such line.
    None,
}

/// What precedes each logged line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefixStyle {
    /// Nothing (as TF's Python exception text, or a cleaned-up paste).
    #[default]
    None,
    /// glog without a time: `I tensorflow/core/common_runtime/bfc_allocator.cc:643] `.
    Glog,
    /// absl with a time: `2025-01-05 09:48:28.754302: I external/local_xla/xla/tsl/framework/bfc_allocator.cc:1058] `.
    Absl,
    /// A GitHub quote of a glog line: `> I tensorflow/core/common_runtime/bfc_allocator.cc:643] `.
    Quoted,
    /// The C++ logger's own line (TF 2.16+, XLA): level, date, time, thread, file:
    /// `I0000 00:00:1795433278.865093   23376 bfc_allocator.cc:1049] `.
    Native,
}

impl TfVariant {
    /// TF 2.16+ and today's XLA/TSL, as TF 2.21 prints it.
    pub const TF_2_21: TfVariant = TfVariant {
        header: HeaderStyle::Repeated,
        bins: BinStyle::Modern,
        chunks: ChunkStyle::Modern,
        stats: StatsStyle::EightHuman,
        totals: TotalsStyle::Size,
        windows: false,
        prefix: PrefixStyle::None,
    };
    /// TF 2.13–2.15.
    pub const TF_2_13: TfVariant =
        TfVariant { stats: StatsStyle::Eight, totals: TotalsStyle::Pool, ..TfVariant::TF_2_21 };
    /// TF 2.12 (the default of reports oomscope writes itself).
    pub const TF_2_12: TfVariant = TfVariant {
        header: HeaderStyle::Modern,
        bins: BinStyle::Modern,
        chunks: ChunkStyle::Modern,
        stats: StatsStyle::Eight,
        totals: TotalsStyle::Pool,
        windows: false,
        prefix: PrefixStyle::None,
    };
    /// TF 2.6–2.11.
    pub const TF_2_6: TfVariant = TfVariant { totals: TotalsStyle::Region, ..TfVariant::TF_2_12 };
    /// TF 2.4–2.5.
    pub const TF_2_4: TfVariant = TfVariant { header: HeaderStyle::Rounded, ..TfVariant::TF_2_6 };
    /// TF 2.3.
    pub const TF_2_3: TfVariant = TfVariant {
        header: HeaderStyle::Mid,
        chunks: ChunkStyle::Mid,
        totals: TotalsStyle::Region,
        ..TfVariant::TF_2_12
    };
    /// TF 1.13–2.2.
    pub const TF_1_13: TfVariant = TfVariant { stats: StatsStyle::Five, ..TfVariant::TF_2_3 };
    /// TF 1.3–1.12.
    pub const TF_1_3: TfVariant = TfVariant {
        header: HeaderStyle::Old,
        chunks: ChunkStyle::Old,
        stats: StatsStyle::Five,
        totals: TotalsStyle::None,
        ..TfVariant::TF_2_12
    };
    /// TF 1.0–1.2.
    pub const TF_1_0: TfVariant = TfVariant { bins: BinStyle::Ancient, ..TfVariant::TF_1_3 };

    /// The releases' combinations, newest first, with their names.
    pub const PRESETS: [(&'static str, TfVariant); 9] = [
        ("tf-2.21", TfVariant::TF_2_21),
        ("tf-2.13", TfVariant::TF_2_13),
        ("tf-2.12", TfVariant::TF_2_12),
        ("tf-2.6", TfVariant::TF_2_6),
        ("tf-2.4", TfVariant::TF_2_4),
        ("tf-2.3", TfVariant::TF_2_3),
        ("tf-1.13", TfVariant::TF_1_13),
        ("tf-1.3", TfVariant::TF_1_3),
        ("tf-1.0", TfVariant::TF_1_0),
    ];

    /// The preset this variant matches, ignoring addresses and prefixes.
    pub fn release(&self) -> &'static str {
        let plain = TfVariant { windows: false, prefix: PrefixStyle::None, ..*self };
        TfVariant::PRESETS.iter().find(|(_, v)| *v == plain).map_or("a mix of TF versions", |(n, _)| n)
    }
}

/// What pasting did to an imported text, undone before it was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum PasteDamage {
    /// Quoted (`> ` on its lines).
    Quoted,
    /// In markdown: emphasis, code marks or a code block.
    Markdown,
    /// Wrapped: at word boundaries at `width` columns (a forum's, an editor's), or mid-word at
    /// a terminal's column.
    Wrapped { width: u32, mid_word: bool },
    /// With a launcher's or logger's prefix on its lines (`[rank0]: `, a timestamp).
    Prefixed,
    /// Lower-cased whole.
    LowerCased,
    /// A framework's words as a person retyped them (`CUDA out of the memory`): read as the
    /// framework's.
    Retyped,
    /// Its last line ends mid-way, inside what was read: what followed is not in it.
    CutShort,
}
