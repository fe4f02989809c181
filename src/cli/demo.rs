//! `oomscope demo [WORKLOAD]`: a user's story replayed on a simulated GPU, with the verdict
//! and a fix checked by replay. Exits 0: the OOM is the demonstration.
//!
//! With `--tui` or `--publish` the run is played in real time (`oomscope_live::play`) and shown
//! in the terminal UI or published on the live feed; the report is printed when it ends. Ctrl-C
//! in the UI ends the command without the report, with exit code 130.

use super::args::DemoArgs;
use super::{CliError, EXIT_INTERRUPTED, output};
use oomscope_base::size::human;
use oomscope_core::device::parse_device;
use oomscope_format::live::{Message, OomEvent};
use oomscope_format::{self as dump, Dump, Source};
use oomscope_ingest::trace::Trace;
use oomscope_inputs::input::{self, Reader};
use oomscope_live::play;
use oomscope_live::{self as live, Publisher};
use oomscope_replay::replay::{Outcome, Settings, replay};
use oomscope_report as render;
use oomscope_sim::workload::{Workload, builtin, fit};
use oomscope_tui::model::{Status, Update};
use oomscope_tui::source::Live;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

pub fn run(a: DemoArgs) -> Result<u8, CliError> {
    if a.tui {
        // Before any work: a UI without a terminal is a usage error.
        oomscope_tui::term::check_terminal().map_err(CliError::from)?;
    }
    let story = builtin::find(&a.workload);
    let path = std::path::Path::new(&a.workload);
    let kind = if story.is_some() { None } else { input::check(path, Reader::Demo).map_err(CliError::from)? };
    let w = Workload::load(&a.workload).map_err(|e| {
        let hint = if story.is_none() && !std::path::Path::new(&a.workload).exists() {
            "\n  (built-in workloads: unet, mnist-eval, preallocate; or give a model file, docs/workload-format.md)"
        } else {
            "\n  (the model format is in docs/workload-format.md)"
        };
        CliError(input::explain(format!("{e}{hint}"), path, kind))
    })?;
    let dev = match &a.device {
        Some(d) => d.clone(),
        None => parse_device(story.map_or("8GiB", |b| b.device)).map_err(CliError::from)?,
    };
    let others = a.others.unwrap_or(story.map_or(0, |b| b.others));
    if others >= dev.total {
        return Err(CliError(format!("--others {} leaves nothing of the {} device", human(others), human(dev.total))));
    }
    let limit = a.limit.or(story.filter(|b| b.limit_is_whole_card).map(|_| dev.total));
    let mut settings = fit::settings(dev.total, others, &dev.model, limit);
    settings.options.allow_growth = a.allow_growth;
    settings.options.garbage_collection = a.gc;
    let batch = a.batch.unwrap_or(w.model.batch);
    let steps = a.steps.unwrap_or(w.model.steps);

    let t = w
        .trace(batch, steps)
        .map_err(|e| CliError(format!("{e}\n  (the model format is in docs/workload-format.md)")))?;
    if let Some(path) = &a.save_trace {
        let jsonl = oomscope_ingest::trace::to_jsonl(&t);
        oomscope_format::atomic::write_file(path, |out| out.write_all(jsonl.as_bytes()))
            .map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    }
    let m = &w.model;
    eprintln!(
        "oomscope demo {}{}\n  {} at batch {batch} ({}, {}) on {} with {} (limit {}{}{}); {} events",
        m.name,
        story.map_or(String::new(), |b| format!(": {}", b.story)),
        if m.mode == oomscope_sim::workload::model::Mode::Train { "training" } else { "evaluating" },
        m.optimizer.name(),
        m.dtype.name(),
        if dev.model == "simulated GPU" { "a simulated GPU".to_string() } else { format!("a simulated {}", dev.model) },
        human(dev.total),
        human(settings.options.limit),
        if others > 0 { format!(", {} held by other processes", human(others)) } else { String::new() },
        if a.allow_growth { ", allow_growth" } else { "" },
        t.events.len()
    );

    let source_path = w.path.display().to_string();
    let finish = |outcome: Outcome| -> Result<Ran, CliError> {
        let mut d = outcome.dump;
        d.source = Source {
            kind: oomscope_format::SourceKind::Demo,
            path: Some(source_path.clone()),
            command: Some(std::env::args().collect::<Vec<_>>().join(" ")),
            created_unix: None,
        };
        d.workload = Some(w.info(batch));
        // The workload is at hand: the fix is tried by replay at other batch sizes.
        oomscope_inputs::diagnose_workload(&mut d, &w, &settings, batch).map_err(|e| CliError(e.to_string()))?;
        let pm = oomscope_pipeline::at_oom(&mut d, |d| match &a.output {
            Some(path) => dump::write_atomic(path, d),
            None => Ok(()),
        });
        pm.written?;
        Ok(Ran {
            dump: d,
            report: pm.report,
            events_replayed: outcome.events_replayed,
            failed: outcome.first_failure_line.is_some(),
        })
    };
    let result = if a.tui || a.publish {
        match played(&a, &t, &settings, &source_path, &finish)? {
            Played::Ran(r) => *r,
            Played::Stopped => {
                eprintln!("oomscope: stopped before the end of the run");
                return Ok(0);
            }
            Played::Interrupted { dump_written } => {
                if dump_written && let Some(path) = &a.output {
                    eprintln!("oomscope: interrupted; dump written to {}", path.display());
                } else {
                    eprintln!("oomscope: interrupted");
                }
                return Ok(EXIT_INTERRUPTED);
            }
        }
    } else {
        finish(replay(&t, &settings, Some(&source_path), |_| {}))?
    };
    let text = match a.format {
        Some(f) => render::render(&result.dump, f.into()),
        // A person reads the answer first; TF's text follows for those who know it.
        None if std::io::stdout().is_terminal() => answer_first(&result.dump, &result.report),
        None => result.report.clone(),
    };
    output::print(&text)?;
    if result.failed {
        eprintln!("oomscope: out of memory after {} of {} events", result.events_replayed, t.events.len());
    } else {
        eprintln!("oomscope: every allocation succeeded");
    }
    if let Some(path) = &a.output {
        eprintln!("oomscope: dump written to {}", path.display());
    }
    if let Some(path) = &a.save_trace {
        eprintln!(
            "oomscope: trace written to {} (replay it: oomscope replay {} --limit {})",
            path.display(),
            path.display(),
            settings.options.limit
        );
    }
    Ok(0)
}

/// A finished run: the dump with its verdict.
struct Ran {
    dump: Dump,
    /// TF's text and the verdict.
    report: String,
    events_replayed: usize,
    failed: bool,
}

type Finish<'a> = dyn Fn(Outcome) -> Result<Ran, CliError> + Sync + 'a;

/// How a run played in real time ended.
enum Played {
    Ran(Box<Ran>),
    /// The user quit the UI (q) before the end.
    Stopped,
    /// The user pressed Ctrl-C in the UI, before or after the end (`dump_written`: the run
    /// had ended, so a dump asked for with -o was written).
    Interrupted {
        dump_written: bool,
    },
}

/// The run played in real time into the UI and/or the live feed.
fn played(
    a: &DemoArgs,
    t: &Trace,
    settings: &Settings,
    source_path: &str,
    finish: &Finish<'_>,
) -> Result<Played, CliError> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let publisher = if a.publish {
        let path = live::socket_path(&live::default_dir(), std::process::id(), None);
        let p = Publisher::bind(&path, play::hello(settings, &command))?;
        eprintln!("oomscope: publishing on {}\n  watch it: oomscope tui --attach {}", path.display(), path.display());
        Some(p)
    } else {
        None
    };
    let length = Duration::from_secs_f64(a.seconds);
    let stop = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel::<Update>();
    let ui = a.tui;
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let mut live = Live::new(&format!("demo {}", a.workload), Status::Replaying);
            let mut send = |msg: Message| {
                if let Some(p) = &publisher {
                    p.send(&msg);
                }
                if ui && live.apply(msg) {
                    let _ = tx.send(Update::Device { id: 0, device: Box::new(live.device().clone()) });
                }
            };
            let outcome = play::play(t, settings, Some(source_path), length, &stop, &command, &mut send);
            let Some(outcome) = outcome else { return Ok::<_, CliError>(None) };
            let ran = finish(outcome)?;
            if ran.dump.oom.is_some() {
                send(Message::Oom(Box::new(OomEvent { dump: ran.dump.clone(), report: ran.report.clone() })));
            }
            // (`send` borrows `live` mutably; its last use is above.)
            live.set_status(Status::Finished);
            let _ = tx.send(Update::Device { id: 0, device: Box::new(live.device().clone()) });
            Ok(Some(ran))
        });
        let mut interrupted = false;
        if ui {
            let mut app = oomscope_tui::App::new(Vec::new());
            app.waiting = Some("starting the simulated run".into());
            let shown = oomscope_tui::run(app, rx);
            // The user quit: stop the play if it still runs.
            stop.store(true, Ordering::Relaxed);
            interrupted = shown.map_err(|e| CliError(format!("the terminal UI failed: {e}")))?.interrupted;
        } else {
            drop(rx);
        }
        let ran = worker.join().map_err(|_| CliError("the simulated run failed unexpectedly".into()))??;
        Ok(match ran {
            _ if interrupted => Played::Interrupted { dump_written: ran.is_some() },
            Some(r) => Played::Ran(Box::new(r)),
            None => Played::Stopped,
        })
    })
}

/// The verdict and the fix, then TensorFlow's text (which ends with them again, where a
/// reader of TF's report looks).
fn answer_first(d: &oomscope_format::Dump, tf: &str) -> String {
    match &d.verdict {
        Some(v) => format!(
            "{}
(TensorFlow's report follows; `--format tf` prints it alone, `--format summary` the short one)

{tf}",
            render::verdict::render(v)
        ),
        None => tf.to_string(),
    }
}
