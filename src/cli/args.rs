//! Every command's arguments, in one place, so `--help` and the docs stay in step.

use clap::{Args, Parser, Subcommand, ValueEnum};
use oomscope_report::Format;
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    name = "oomscope",
    // The commit and its date when built from a git checkout (build.rs).
    version = env!("OOMSCOPE_VERSION"),
    about = "Why did the GPU run out of memory, and what to change.",
    long_about = "oomscope re-implements TensorFlow's BFC allocator, records every tensor \
                  allocation with its op name, and on OOM prints TF's report ranked by node, \
                  writes a JSON dump, and explains the cause.\n\n\
                  Exit codes: 0 success, 1 an allocation failed (report printed), 2 bad input or usage; \
                  `run` exits with its program's code, 127 when the command is not found and 126 \
                  when it cannot be run.",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// When to colour the terminal UI and the verdict in the text answer
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}

/// When to colour what is printed and drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour on a terminal, unless NO_COLOR is set to a non-empty value
    #[default]
    Auto,
    /// Colour even in a pipe or a file
    Always,
    /// No colour
    Never,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Replay a TensorFlow user's story on a simulated GPU: the OOM, TF's report, the verdict and the fix.
    #[command(after_help = "Workloads (their model files are in fixtures/workloads/):\n  \
        unet         a U-Net on 1280x720 frames that trains only at batch 1 (GTX 1080, 8 GiB)\n  \
        mnist-eval   an MNIST CNN evaluated on all 10 000 test images at once (a 1 GiB card)\n  \
        preallocate  TensorFlow takes the whole 11 GiB card while the desktop holds 1.9 GiB\n  \
        FILE.json    any model description (docs/workload-format.md)\n\n\
        Examples:\n  oomscope demo\n  oomscope demo unet --batch 1\n  oomscope demo mnist-eval --format summary\n  \
        oomscope demo preallocate --allow-growth")]
    Demo(DemoArgs),
    /// The largest batch that trains on a device: of your own PyTorch command (run briefly, then replayed at any batch and checked by a run), or of a workload; for a trace, the smallest limit.
    #[command(
        after_help = "Examples:\n  oomscope fit --device h100 --batch 64 -- python train.py --batch-size {batch}\n  \
        oomscope fit --device a100-40 -- python train.py\n  oomscope fit unet --device 8GiB\n  \
        oomscope fit mnist-eval --device 1GiB\n  oomscope fit fixtures/traces/steps-growth.jsonl --device 1GiB"
    )]
    Fit(FitArgs),
    /// Feed an allocation trace through the allocator on a simulated GPU and print the report.
    #[command(after_help = "Trace format (JSON Lines, docs/trace-format.md):\n  \
        {\"ev\":\"alloc\",\"id\":\"t1\",\"bytes\":4096,\"op\":\"conv1/Conv2D\"}   optional: shape, dtype, step, t (µs)\n  \
        {\"ev\":\"free\",\"id\":\"t1\"}\n  \
        {\"ev\":\"step\",\"step\":3}\n  \
        {\"ev\":\"region\",\"address\":140230343098368,\"bytes\":2097152}   where the device placed a region\n\n\
        Examples:\n  oomscope replay fixtures/traces/steps-growth.jsonl --limit 1GiB -o growth.dump.json\n  \
        oomscope replay unet --batch 2 --limit 8GiB\n  \
        oomscope replay trace.jsonl --limit 1GiB --allocator caching --set expandable_segments:True\n  \
        oomscope replay snapshot.pickle --set expandable_segments:True")]
    Replay(ReplayArgs),
    /// Read what you have: a pasted OOM message, a TensorFlow log, or a PyTorch snapshot; the verdict and a dump.
    #[command(after_help = "Formats (detected when --from is not given):\n  \
        message         an out-of-memory message: PyTorch's (every version, ROCm, MPS, cudaMallocAsync), XLA/JAX's and a \
        TPU's, TensorFlow's error alone, cuBLAS/cuDNN/CUDA errors that are OOMs in disguise\n  \
        tf-log          a TensorFlow log with the allocator's OOM report, any version since 1.0, any log prefix\n  \
        torch-snapshot  a pickle from torch.cuda.memory._dump_snapshot\n\n\
        A text that is another error (an illegal memory access, a device-side assert, host memory) is refused with \
        what it is.\n\n\
        Examples:\n  oomscope import -                      # paste the message, then Ctrl-D\n  \
        oomscope import error.txt --format json\n  oomscope import train.log -o oom.dump.json\n  \
        oomscope import snapshot.pickle --format tf")]
    Import(ImportArgs),
    /// Write a dump for the viewers people use: pytorch.org/memory_viz or ui.perfetto.dev.
    #[command(
        after_help = "Examples:\n  oomscope export unet.dump.json --format torch-snapshot   # open at https://pytorch.org/memory_viz\n  \
        oomscope export unet.dump.json --format perfetto         # open at https://ui.perfetto.dev"
    )]
    Export(ExportArgs),
    /// What grew and what shrank between two dumps, by node and by scope.
    #[command(after_help = "Example:\n  oomscope diff step100.dump.json step200.dump.json")]
    Diff(DiffArgs),
    /// Re-render a dump written by `replay -o` (or any oomscope dump).
    #[command(after_help = "Example:\n  oomscope report unet.dump.json --format summary")]
    Report(ReportArgs),
    /// Run a training program under oomscope: on OOM, the report, the verdict and a dump.
    #[command(after_help = "PyTorch: the program's Python processes that import torch get oomscope as PyTorch's \
        CUDA allocator (no change to the script): PyTorch's caching allocator, re-implemented, with the \
        PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF settings the program uses, so it runs out of memory \
        where PyTorch would; allocations are named by module and op. TensorFlow, Keras, \
        JAX: their own allocator's OOM report is read from the program's output (also when the program \
        silences TF's logs), and their memory is sampled for the live view. The program's output passes \
        through and its exit code is oomscope's. Needs liboomscope.so beside the binary (cargo builds it) \
        or OOMSCOPE_LIB.\n\n\
        Examples:\n  oomscope run -- python train.py --batch-size 256\n  \
        oomscope run -- python train_keras.py            # TensorFlow/Keras or JAX: no GPU needed here\n  \
        oomscope run --tui -- python train.py            # watch it live\n  \
        oomscope run --limit 40GiB -- torchrun --nproc-per-node 4 train.py\n  \
        oomscope run --dump-at-step 10 --dump-at-exit -- python train.py   # then: oomscope diff the two\n  \
        oomscope run --device sim:8GiB -- python drive_the_c_abi.py   # no GPU: the simulated device")]
    Run(RunArgs),
    /// The terminal UI: inspect a dump, or follow live processes.
    #[command(after_help = "Keys: Tab or 1-6 switch views (overview, nodes, bins, map, allocations, report), \
        arrows move, / filters, s sorts, t folds nodes by scope, c colours the map by op or by state, Enter details, \
        space pauses, ? help, q quits.\n\n\
        Examples:\n  oomscope tui unet.dump.json\n  oomscope tui train.log                # a TensorFlow OOM log, imported on the fly\n  \
        oomscope tui --attach                 # every process in the live directory\n  \
        oomscope tui --attach 4242            # process 4242\n  oomscope demo --tui                   # a simulated run, live")]
    Tui(TuiArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "Install:\n  \
        bash  oomscope completions bash > ~/.local/share/bash-completion/completions/oomscope\n  \
        zsh   oomscope completions zsh > ~/.zfunc/_oomscope   # with fpath+=~/.zfunc before compinit\n  \
        fish  oomscope completions fish > ~/.config/fish/completions/oomscope.fish")]
    Completions(CompletionsArgs),
    /// Print the man page (roff) of oomscope, or of one of its commands.
    #[command(after_help = "Examples:\n  oomscope man | man -l -\n  oomscope man run > oomscope-run.1")]
    Man(ManArgs),
    /// Check the settings in the environment (OOMSCOPE_*, PYTORCH_CUDA_ALLOC_CONF) as
    /// liboomscope.so reads them; the Python package's oomscope.install() asks it.
    #[command(hide = true)]
    CheckSettings,
    /// Read any file that is or becomes a dump (a dump, a TensorFlow log, a PyTorch snapshot,
    /// a pasted message), diagnosed, as one JSON object: `{"dump": ..., "text": ...}` (the
    /// summary). The Python package's oomscope.load() and report() ask it, once a file.
    #[command(hide = true)]
    Load { path: std::path::PathBuf },
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct ManArgs {
    /// A command's own page (oomscope-run(1), ...) [default: oomscope(1), which lists them]
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
}

/// Report formats on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// TensorFlow's OOM text and "Current usage from device"
    Tf,
    /// The short human report
    Summary,
    /// The dump as JSON
    Json,
    /// One self-contained HTML page to share (nothing fetched; write it with -o FILE)
    Html,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Tf => Format::Tf,
            FormatArg::Summary => Format::Summary,
            FormatArg::Json => Format::Json,
            FormatArg::Html => Format::Html,
        }
    }
}

/// A device's size, a limit, or memory held by others: at most a device's worth.
fn size(s: &str) -> Result<u64, String> {
    oomscope_base::size::parse_size(s)
        .map_err(|e| e.to_string())
        .and_then(|b| oomscope_base::size::device_bytes(b).map_err(|e| e.0))
}

fn device(s: &str) -> Result<oomscope_core::device::DeviceSpec, String> {
    oomscope_core::device::parse_device(s).map_err(|e| e.0)
}

fn seconds(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=3600.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?} is not a number of seconds between 0 and 3600")),
    }
}

/// A TensorFlow version whose text `--format tf` prints.
fn tf_style(s: &str) -> Result<oomscope_format::TfVariant, String> {
    let wanted = if s.starts_with("tf-") { s.to_string() } else { format!("tf-{s}") };
    oomscope_format::TfVariant::PRESETS.iter().find(|(name, _)| *name == wanted).map(|(_, v)| *v).ok_or_else(|| {
        let names: Vec<&str> = oomscope_format::TfVariant::PRESETS.iter().map(|(n, _)| *n).collect();
        format!("{s:?} is not a TensorFlow text oomscope prints; one of {}", names.join(", "))
    })
}

fn step(s: &str) -> Result<i64, String> {
    match s.trim().parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err(format!("{s:?} is not a step; expected whole numbers from 0, such as 20 or 10,20")),
    }
}

fn fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if (0.0..=1.0).contains(&f) => Ok(f),
        _ => Err(format!("{s:?} is not a fraction between 0 and 1")),
    }
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The trace (JSON Lines), a workload (built-in name or model file), or a PyTorch memory
    /// snapshot (pickle) to replay through PyTorch's caching allocator
    pub trace: PathBuf,
    /// Allocator memory limit (1073741824, 512MiB, 9.1GiB); required for a trace or a
    /// workload (PyTorch's caching allocator: the bytes a memory fraction allows)
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub limit: Option<u64>,
    /// A snapshot's device [default: the first with a trace]
    #[arg(long, value_name = "N")]
    pub gpu: Option<i64>,
    /// Replay again under these PYTORCH_CUDA_ALLOC_CONF settings (expandable_segments:True,
    /// max_split_size_mb:128, ...), on top of a snapshot's own or --conf, and compare
    #[arg(long = "set", value_name = "SETTINGS")]
    pub set: Vec<String>,
    /// A trace or workload: the allocator to replay it through [default: bfc; caching with
    /// --set or --conf]
    #[arg(long, value_enum, value_name = "ALLOCATOR")]
    pub allocator: Option<RunAllocator>,
    /// A trace or workload through PyTorch's caching allocator: its settings, as a
    /// PYTORCH_CUDA_ALLOC_CONF string [default: PyTorch's defaults]
    #[arg(long, value_name = "SETTINGS")]
    pub conf: Option<String>,
    /// A workload (built-in name or model file): the batch [default: the model's]
    #[arg(long, value_name = "N")]
    pub batch: Option<u64>,
    /// Grow the pool on demand (2 MiB regions, doubling) instead of one region of the limit
    #[arg(long)]
    pub allow_growth: bool,
    /// On OOM, return empty regions to the device and retry with one larger region
    #[arg(long)]
    pub gc: bool,
    /// Go on after a failed allocation; report every failure and the state at the end
    #[arg(long)]
    pub keep_going: bool,
    /// Report format
    #[arg(long, value_enum, default_value_t = FormatArg::Tf)]
    pub format: FormatArg,
    /// Write the JSON dump here (atomically)
    #[arg(short = 'o', long = "output", value_name = "DUMP")]
    pub output: Option<PathBuf>,
    /// Capacity of the simulated device [default: the limit; a snapshot: as large as
    /// needed, or at a recorded OOM what PyTorch held plus what was free]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub device: Option<u64>,
    /// Device memory already held by other processes
    #[arg(long, value_name = "SIZE", value_parser = size, default_value = "0")]
    pub others: u64,
    /// Split a chunk when it would waste this fraction of the limit [default: 128 MiB]
    #[arg(long, value_name = "FRACTION", value_parser = fraction)]
    pub fragmentation_fraction: Option<f64>,
    /// Events kept in the dump's history
    #[arg(long, value_name = "N", default_value_t = 10_000)]
    pub history: usize,
    /// The allocator's name in reports [default: GPU_0_bfc]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Print TF's text as this TensorFlow version did: tf-2.21 (2.16 and later), tf-2.13,
    /// tf-2.12, tf-2.6, tf-2.4, tf-2.3, tf-1.13, tf-1.3, tf-1.0 [default: tf-2.12]
    #[arg(long, value_name = "VERSION", value_parser = tf_style)]
    pub tf_style: Option<oomscope_format::TfVariant>,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The dump (JSON), or a directory of a job's dumps (its ranks side by side, the first
    /// to fail, the job's verdict)
    pub dump: PathBuf,
    /// Report format
    #[arg(long, value_enum, default_value_t = FormatArg::Tf)]
    pub format: FormatArg,
    /// Print TF's text as this TensorFlow version did (tf-2.21, tf-2.13, ..., tf-1.0)
    /// [default: an imported log's own, else tf-2.12]
    #[arg(long, value_name = "VERSION", value_parser = tf_style)]
    pub tf_style: Option<oomscope_format::TfVariant>,
    /// Write the report here (atomically) instead of printing it: with --format html, a page
    /// to open in a browser or attach to an issue
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// unet, mnist-eval, preallocate, or a model file
    #[arg(default_value = "unet")]
    pub workload: String,
    /// The GPU: a card (gtx-1080, gtx-1080-ti, rtx-3090, t4, v100-16, a100-80, h200, ...) or a size [default: the story's]
    #[arg(long, value_name = "CARD|SIZE", value_parser = device)]
    pub device: Option<oomscope_core::device::DeviceSpec>,
    /// Device memory already held by other processes (a desktop, another run) [default: the story's]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub others: Option<u64>,
    /// The allocator's limit [default: what the device has free]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub limit: Option<u64>,
    /// Batch size [default: the model's]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: Option<u64>,
    /// Training steps to simulate [default: the model's]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub steps: Option<u32>,
    /// Grow the pool on demand instead of one region of the limit
    #[arg(long)]
    pub allow_growth: bool,
    /// On OOM, return empty regions to the device and retry
    #[arg(long)]
    pub gc: bool,
    /// Report format [default: on a terminal, the verdict and the fix, then TensorFlow's
    /// text; elsewhere TensorFlow's text alone, as `tf`]
    #[arg(long, value_enum)]
    pub format: Option<FormatArg>,
    /// Write the JSON dump here (atomically)
    #[arg(short = 'o', long = "output", value_name = "DUMP")]
    pub output: Option<PathBuf>,
    /// Write the simulated trace here (JSON Lines; `oomscope replay` reads it)
    #[arg(long, value_name = "TRACE")]
    pub save_trace: Option<PathBuf>,
    /// Watch the run in the terminal UI, played in real time up to the OOM
    #[arg(long)]
    pub tui: bool,
    /// Publish the run on the live feed, played in real time (watch it with `oomscope tui --attach`)
    #[arg(long)]
    pub publish: bool,
    /// How long the real-time play lasts (with --tui or --publish)
    #[arg(long, value_name = "SECONDS", default_value = "8", value_parser = seconds)]
    pub seconds: f64,
}

/// The allocator `run` puts under a PyTorch program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RunAllocator {
    /// PyTorch's caching allocator: the one the program runs without oomscope
    Caching,
    /// TensorFlow's BFC allocator
    Bfc,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Watch the run in the terminal UI (the program's output then goes to a log file)
    #[arg(long)]
    pub tui: bool,
    /// The allocator under a PyTorch program
    #[arg(long, value_enum, default_value = "caching")]
    pub allocator: RunAllocator,
    /// The allocator's limit per GPU [default: the GPU's free memory at start]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub limit: Option<u64>,
    /// The limit as a fraction of each GPU's memory
    #[arg(long, value_name = "FRACTION", value_parser = fraction, conflicts_with = "limit")]
    pub limit_fraction: Option<f64>,
    /// Where dumps are written (at OOM, and the ones asked for below)
    #[arg(long, value_name = "DIR", default_value = "oomscope-dumps")]
    pub dump_dir: PathBuf,
    /// Also write a dump when the program marks step N (PyTorch: after N optimizer steps);
    /// several as 10,20 (compare two with `oomscope diff`)
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', value_parser = step)]
    pub dump_at_step: Vec<i64>,
    /// Also write a dump when each process exits
    #[arg(long)]
    pub dump_at_exit: bool,
    /// Beside each dump the run writes, a page to share (the same name ending .html; for a
    /// job's ranks, oomscope-job-JOB.html too): one file, opened in any browser
    #[arg(long)]
    pub html: bool,
    /// Name allocations by module only, not by the torch function called (the least
    /// overhead; use with torch.compile)
    #[arg(long, conflicts_with = "aten_ops")]
    pub no_ops: bool,
    /// Name allocations by aten op (aten::addmm) instead of the torch function called;
    /// PyTorch then takes out-of-place paths in some ops, so the run allocates more than
    /// it would alone
    #[arg(long)]
    pub aten_ops: bool,
    /// The GPU: `cuda`, or `sim:SIZE` / `sim:CARD` for the simulated device
    #[arg(long, value_name = "cuda|sim:SIZE", default_value = "cuda")]
    pub device: String,
    /// Publish the live feed (for `oomscope tui --attach` elsewhere) without opening the UI
    #[arg(long, conflicts_with = "tui")]
    pub live: bool,
    /// The program and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<String>,
}

#[derive(Args, Debug)]
pub struct TuiArgs {
    /// A dump to inspect (written by `demo -o`, `replay -o`, `import -o`, or at a run's OOM),
    /// or a TensorFlow OOM log or PyTorch memory snapshot (imported on the fly)
    pub dump: Option<PathBuf>,
    /// Follow live processes: a socket, a directory of sockets, or a pid [default: the live directory]
    #[arg(long, value_name = "PATH|PID", num_args = 0..=1, default_missing_value = "", conflicts_with = "dump")]
    pub attach: Option<String>,
}

/// Output formats of `fit`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FitFormat {
    /// A table and the answer, for people
    Text,
    /// Every replay and the answer, as JSON
    Json,
}

#[derive(Args, Debug)]
pub struct FitArgs {
    /// A workload (unet, mnist-eval, preallocate, or a model .json) or a trace (.jsonl);
    /// or, after `--`, your training command with `{batch}` where the batch goes
    #[arg(required_unless_present = "command")]
    pub input: Option<String>,
    /// The GPU: a card or a size [default for a command: the GPU here]
    #[arg(long, value_name = "CARD|SIZE", value_parser = device)]
    pub device: Option<oomscope_core::device::DeviceSpec>,
    /// Device memory held outside the allocator: other processes, the CUDA context [default:
    /// for a command on a named card, the CUDA context's 527 MiB; else 0]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub others: Option<u64>,
    /// The allocator's limit [default: what the device has free]
    #[arg(long, value_name = "SIZE", value_parser = size)]
    pub limit: Option<u64>,
    /// Grow the pool on demand instead of one region of the limit
    #[arg(long)]
    pub allow_growth: bool,
    /// On OOM, return empty regions to the device and retry
    #[arg(long)]
    pub gc: bool,
    /// Largest batch to try [default: the dataset size for evaluation, 65536 for training, 1048576 for a command]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_batch: Option<u64>,
    /// Output format
    #[arg(long, value_enum, default_value_t = FitFormat::Text)]
    pub format: FitFormat,
    /// A command: optimizer steps each run makes before it is ended
    #[arg(long, value_name = "N", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub steps: u32,
    /// A command: the small batches it is first run at, to learn its step
    #[arg(long, value_name = "B,B,B", value_delimiter = ',', default_values_t = [2u64, 4, 6])]
    pub probes: Vec<u64>,
    /// A command: the batch you train at (its memory by kind, and the accumulation that keeps it)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: Option<u64>,
    /// A command: do not check the answer by running it
    #[arg(long)]
    pub no_check: bool,
    /// A command: seconds each run may take before it is ended
    #[arg(long, value_name = "SECONDS", default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Your training command, `{batch}` where the batch goes (`-- python train.py --batch-size {batch}`)
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Input formats of `import`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FromArg {
    /// A TensorFlow log with the allocator's OOM report
    TfLog,
    /// A PyTorch memory snapshot (pickle)
    TorchSnapshot,
    /// An out-of-memory message (PyTorch, XLA/JAX, TPU, cuBLAS/cuDNN, TensorFlow's error alone)
    Message,
}

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// The log, snapshot or message; `-` reads standard input (paste, then Ctrl-D)
    pub input: PathBuf,
    /// Input format [default: detected]
    #[arg(long = "from", value_enum)]
    pub from: Option<FromArg>,
    /// Write the dump here (atomically); with --format html, the page instead
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// A snapshot's device [default: the one that ran out of memory]
    #[arg(long = "gpu", visible_alias = "device", value_name = "N")]
    pub device: Option<i64>,
    /// Report format
    #[arg(long, value_enum, default_value_t = FormatArg::Summary)]
    pub format: FormatArg,
}

/// Export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// A PyTorch memory snapshot (pickle) for pytorch.org/memory_viz and torch.cuda._memory_viz
    TorchSnapshot,
    /// Chrome trace-event JSON for ui.perfetto.dev
    Perfetto,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The dump (JSON)
    pub dump: PathBuf,
    /// What to write
    #[arg(long, value_enum)]
    pub format: ExportFormat,
    /// Where [default: beside the dump, NAME.snapshot.pickle or NAME.perfetto.json]
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Output formats of `diff`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffFormat {
    Text,
    Json,
}

#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The earlier dump, or a directory of a job's dumps (two ranks compared)
    pub before: PathBuf,
    /// The later dump (not with a directory)
    pub after: Option<PathBuf>,
    /// With a directory: the two ranks, as A,B (what B holds more than A) [default: the
    /// rank nearest the others' median, then the first to fail]
    #[arg(long, value_name = "A,B")]
    pub ranks: Option<String>,
    /// Output format
    #[arg(long, value_enum, default_value_t = DiffFormat::Text)]
    pub format: DiffFormat,
    /// Lines per list
    #[arg(long, value_name = "N", default_value_t = 15)]
    pub top: usize,
}
