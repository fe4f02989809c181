//! `oomscope tui DUMP` and `oomscope tui --attach [PATH|PID]`: the terminal UI on a dump, or
//! on live processes (one device per socket, found as they appear).

use super::args::TuiArgs;
use super::{CliError, EXIT_INTERRUPTED};
use oomscope_format::{self as dump, Dump};
use oomscope_ingest::import;
use oomscope_ingest::input_kind::{self, Kind};
use oomscope_inputs::input::{self, Reader};
use oomscope_live::{self as live, Feed};
use oomscope_report as render;
use oomscope_tui::model::{Status, Update};
use oomscope_tui::source::{self, Live};
use oomscope_tui::{App, term};
use std::collections::HashSet;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::time::Duration;

pub fn run(a: TuiArgs) -> Result<u8, CliError> {
    match (a.dump, a.attach) {
        (Some(path), _) if path.is_dir() => job(&path),
        (Some(path), _) => {
            // Read first: bad input is reported the same with or without a terminal.
            let (mut d, what) = load(&path)?;
            oomscope_pipeline::diagnose(&mut d);
            term::check_terminal().map_err(CliError::from)?;
            let device = source::from_dump(&d, &format!("{what} {}", path.display()), render::view_report(&d));
            let (_tx, rx) = mpsc::channel();
            let app = oomscope_tui::run(App::new(vec![device]), rx).map_err(ui_error)?;
            Ok(exit_code(&app))
        }
        (None, Some(target)) => attach(&target),
        (None, None) => Err(CliError(
            "give a dump to inspect or --attach to follow live processes:\n  \
             oomscope tui unet.dump.json\n  oomscope tui --attach\n  \
             (no dump yet? `oomscope demo -o unet.dump.json` writes one, `oomscope demo --tui` plays one live)"
                .into(),
        )),
    }
}

/// `oomscope tui DIR`: a job's ranks, the Job view first, each rank's dump behind it.
fn job(dir: &Path) -> Result<u8, CliError> {
    let job = oomscope_pipeline::job::load(dir)?;
    super::output::warn_all(&job.skipped_lines());
    let report = oomscope_pipeline::job::report(&job);
    term::check_terminal().map_err(CliError::from)?;
    let devices = job
        .ranks
        .into_iter()
        .map(|(path, mut d)| {
            oomscope_pipeline::diagnose(&mut d);
            let mut device = source::from_dump(&d, &format!("dump {}", path.display()), render::view_report(&d));
            if let Some(p) = d.process.as_ref().filter(|p| p.in_job()) {
                device.name = format!("{} · {}", render::describe_process(p, d.gpu()), device.name);
            }
            device
        })
        .collect();
    let (_tx, rx) = mpsc::channel();
    let app = oomscope_tui::run(App::for_job(report, devices), rx).map_err(ui_error)?;
    Ok(exit_code(&app))
}

/// An oomscope dump (JSON), or what `oomscope import` reads (a TF log, a PyTorch snapshot),
/// so that a pasted log opens in one command.
fn load(path: &Path) -> Result<(Dump, &'static str), CliError> {
    let bytes = std::fs::read(path).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    let kind = input_kind::recognise(&bytes[..bytes.len().min(input_kind::HEAD)]);
    if let Some(refusal) = input::refusal(path, kind, Reader::Tui) {
        return Err(CliError(refusal));
    }
    // JSON of no known kind is parsed as a dump, whose error says where it goes wrong.
    if matches!(kind, Kind::Dump | Kind::Json) {
        let text = String::from_utf8_lossy(&bytes);
        return Ok((dump::read_str(path, &text)?, "dump"));
    }
    let d = import::import(path, &bytes, None, None)?;
    let what = match d.imported.as_ref().map(|i| i.from) {
        Some(oomscope_format::ImportedFrom::TfLog) => "TF log",
        Some(oomscope_format::ImportedFrom::Message) => "message",
        _ => "snapshot",
    };
    Ok((d, what))
}

fn ui_error(e: std::io::Error) -> CliError {
    CliError(format!("the terminal UI failed: {e}"))
}

/// What `--attach` follows.
enum Target {
    /// Every socket in a directory, including ones that appear later.
    Dir(PathBuf),
    /// These sockets.
    Sockets(Vec<PathBuf>),
}

fn target(arg: &str) -> Result<Target, CliError> {
    let dir = live::default_dir();
    if arg.is_empty() {
        return Ok(Target::Dir(dir));
    }
    if !arg.is_empty() && arg.bytes().all(|b| b.is_ascii_digit()) && !Path::new(arg).exists() {
        let found: Vec<PathBuf> = live::sockets_in(&dir)
            .unwrap_or_default()
            .into_iter()
            .filter(|p| {
                let name = p.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
                name == arg || name.starts_with(&format!("{arg}-"))
            })
            .collect();
        if found.is_empty() {
            return Err(CliError(format!(
                "process {arg} does not publish in {} (start it with the live feed on: `oomscope run --live -- CMD`, \
                 or `oomscope demo --publish` for a simulated run; or give the socket's path)",
                dir.display()
            )));
        }
        return Ok(Target::Sockets(found));
    }
    let path = PathBuf::from(arg);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => Ok(Target::Dir(path)),
        // Said here, before the socket checks, which would otherwise complain about the
        // file's directory first; a file is most likely a dump, which opens without --attach.
        Ok(m) if !m.file_type().is_socket() => Err(CliError(format!(
            "{}: not a socket (give a socket, a directory of sockets, or a pid){}",
            path.display(),
            if m.is_file() {
                format!("; to open a dump or a log: oomscope tui {}", path.display())
            } else {
                String::new()
            }
        ))),
        Ok(_) => Ok(Target::Sockets(vec![path])),
        Err(e) => Err(CliError(format!("{}: {e} (give a socket, a directory of sockets, or a pid)", path.display()))),
    }
}

fn attach(arg: &str) -> Result<u8, CliError> {
    let target = target(arg)?;
    // Explicit sockets must answer now: an error here is clearer than an empty screen.
    let mut feeds = Vec::new();
    if let Target::Sockets(paths) = &target {
        for p in paths {
            feeds.push(Feed::connect(p)?);
        }
    }
    term::check_terminal().map_err(CliError::from)?;
    let (tx, rx) = mpsc::channel::<Update>();
    let stop = Arc::new(AtomicBool::new(false));
    let ids = Arc::new(AtomicUsize::new(0));
    let mut app = App::new(Vec::new());
    match target {
        Target::Dir(dir) => {
            app.waiting = Some(format!(
                "waiting for a process to publish in {}\n\nstart one with `oomscope demo --publish` \
                 (a simulated run) or `oomscope run --live -- python train.py`",
                dir.display()
            ));
            watch_in_background(dir, tx.clone(), Arc::clone(&stop));
        }
        Target::Sockets(_) => {
            // The user named these: stay on them when they end.
            app.pinned = true;
            for feed in feeds {
                let id = ids.fetch_add(1, Ordering::Relaxed);
                follow(feed, id, tx.clone());
            }
        }
    }
    drop(tx);
    let shown = oomscope_tui::run(app, rx);
    stop.store(true, Ordering::Relaxed);
    Ok(exit_code(&shown.map_err(ui_error)?))
}

/// 0 when the user quit, 130 when Ctrl-C ended the UI (as a shell reports an interrupt).
fn exit_code(app: &App) -> u8 {
    if app.interrupted { EXIT_INTERRUPTED } else { 0 }
}

/// Follows every socket that appears in `dir`, on a thread, until `stop`.
pub fn watch_in_background(dir: PathBuf, tx: Sender<Update>, stop: Arc<AtomicBool>) {
    let ids = AtomicUsize::new(0);
    let _ =
        std::thread::Builder::new().name("oomscope-attach-watch".into()).spawn(move || watch(&dir, &tx, &stop, &ids));
}

/// Follows every socket that appears in `dir` until `stop`.
fn watch(dir: &Path, tx: &Sender<Update>, stop: &AtomicBool, ids: &AtomicUsize) {
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut stale = 0;
    while !stop.load(Ordering::Relaxed) {
        for path in live::sockets_in(dir).unwrap_or_default() {
            if seen.contains(&path) {
                continue;
            }
            seen.insert(path.clone());
            match Feed::connect(&path) {
                Ok(feed) => follow(feed, ids.fetch_add(1, Ordering::Relaxed), tx.clone()),
                Err(_) => {
                    // A socket left by a process that died without cleaning up.
                    stale += 1;
                    let _ = tx.send(Update::Message(format!(
                        "skipped {stale} stale socket(s) in {} (their processes have exited)",
                        dir.display()
                    )));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Reads one feed into device `id` on a thread of its own.
fn follow(mut feed: Feed, id: usize, tx: Sender<Update>) {
    let _ = std::thread::Builder::new().name("oomscope-attach".into()).spawn(move || {
        let mut live = Live::new("", Status::Live);
        let end = loop {
            match feed.next_message() {
                Ok(Some(msg)) => {
                    if live.apply(msg)
                        && tx.send(Update::Device { id, device: Box::new(live.device().clone()) }).is_err()
                    {
                        return; // the UI is gone
                    }
                }
                Ok(None) => break "the process closed the feed (it exited)".to_string(),
                Err(e) => break e.to_string(),
            }
        };
        if !matches!(live.device().status, Status::Disconnected(_)) {
            live.disconnect(end);
        }
        let _ = tx.send(Update::Device { id, device: Box::new(live.device().clone()) });
    });
}
