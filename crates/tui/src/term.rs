//! The terminal: set it up, run the loop (keys, updates, redraws), and always put it back,
//! whether the user quits, presses Ctrl-C, something panics, or a signal ends it (SIGTERM,
//! SIGHUP when the terminal closes, SIGQUIT).

use crate::app::App;
use crate::draw::draw;
use crate::model::Update;
use ratatui::crossterm::event::{self, Event};
use std::io::{self, IsTerminal};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Signals that end the UI. Each one's handler puts the terminal back at once, with calls
/// safe in a signal handler (the terminal may be gone already: SIGHUP), then lets the
/// signal take its course: the default action, or the handler that was there before ours
/// (`oomscope run` passes SIGTERM/SIGHUP on to its program), after which the loop ends.
const ENDING: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];
/// The signal that ended the UI (0: none yet).
static ENDED_BY: AtomicI32 = AtomicI32::new(0);
/// The handlers that were there before ours, by position in [`ENDING`] (a `sighandler_t`).
static PREVIOUS: [AtomicUsize; 3] = [AtomicUsize::new(0), AtomicUsize::new(0), AtomicUsize::new(0)];
/// The terminal's settings before the UI changed them.
static ORIGINAL: OnceLock<libc::termios> = OnceLock::new();

extern "C" fn note_signal(sig: libc::c_int) {
    ENDED_BY.store(sig, Ordering::Relaxed);
    restore_from_handler();
    let Some(i) = ENDING.iter().position(|&s| s == sig) else { return };
    let previous = PREVIOUS[i].load(Ordering::Relaxed);
    if previous == libc::SIG_DFL || previous == libc::SIG_IGN {
        // SAFETY: signal(2) and raise(3) are async-signal-safe; with the default action
        // back, the process ends as the signal says (exit status and all).
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    } else {
        // SAFETY: `previous` is the handler sigaction reported for this signal, a plain
        // `fn(c_int)` (installed without SA_SIGINFO, as ours is).
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(previous) };
        f(sig);
    }
}

/// Leaves the alternate screen, shows the cursor and puts back the terminal's settings:
/// only write(2) and tcsetattr(3), which a signal handler may call.
fn restore_from_handler() {
    const LEAVE: &[u8] = b"\x1b[?1049l\x1b[?25h";
    // SAFETY: writes a static buffer to stdout; tcsetattr with settings tcgetattr gave.
    unsafe {
        libc::write(libc::STDOUT_FILENO, LEAVE.as_ptr().cast(), LEAVE.len());
        if let Some(t) = ORIGINAL.get() {
            libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, t);
        }
    }
}

/// Installs [`note_signal`] for the ending signals (not for one the process ignores, as
/// under `nohup`), remembering the previous handlers.
fn catch_ending_signals() {
    // SAFETY: a zeroed termios is valid to be written by tcgetattr.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: `t` is valid for writes.
    if unsafe { libc::tcgetattr(libc::STDIN_FILENO, &mut t) } == 0 {
        let _ = ORIGINAL.set(t);
    }
    for (i, &sig) in ENDING.iter().enumerate() {
        // SAFETY: zeroed sigaction structs are valid; sigaction reads `new` and writes `old`;
        // the handler only makes async-signal-safe calls.
        unsafe {
            let mut new: libc::sigaction = std::mem::zeroed();
            new.sa_sigaction = note_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            new.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut new.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &new, &mut old) == 0 {
                PREVIOUS[i].store(old.sa_sigaction, Ordering::Relaxed);
                if old.sa_sigaction == libc::SIG_IGN {
                    libc::sigaction(sig, &old, std::ptr::null_mut());
                }
            }
        }
    }
}

/// Puts the previous handlers back.
fn release_ending_signals() {
    ENDED_BY.store(0, Ordering::Relaxed);
    for (i, &sig) in ENDING.iter().enumerate() {
        // SAFETY: restores a disposition sigaction reported earlier.
        unsafe {
            libc::signal(sig, PREVIOUS[i].load(Ordering::Relaxed));
        }
    }
}

/// Whether the UI on the terminal draws in colour (the caller's `--color` and NO_COLOR).
static COLOR: AtomicBool = AtomicBool::new(true);

/// Sets whether [`run`] draws in colour; without, it draws with characters and modifiers
/// only (bold, reverse, dim).
pub fn set_color(on: bool) {
    COLOR.store(on, Ordering::Relaxed);
}

/// Why the UI cannot start.
pub fn check_terminal() -> Result<(), oomscope_base::Problem> {
    if !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return Err("the terminal UI needs a terminal (stdin and stdout are not one here); \
                    for text use `oomscope report DUMP`"
            .into());
    }
    Ok(())
}

/// Restores the terminal when dropped, so an early return or an error cannot leave it raw.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// Runs the UI until the user quits. `updates` feeds it (a closed channel is fine: the last
/// state stays on screen). Returns the final state.
pub fn run(mut app: App, updates: Receiver<Update>) -> io::Result<App> {
    check_terminal().map_err(io::Error::other)?;
    if !COLOR.load(Ordering::Relaxed) {
        app.monochrome = true;
    }
    // try_init installs a panic hook that restores the terminal before the panic prints.
    ENDED_BY.store(0, Ordering::Relaxed);
    catch_ending_signals();
    let shown = show(&mut app, updates);
    release_ending_signals();
    shown.map(|()| app)
}

fn show(app: &mut App, updates: Receiver<Update>) -> io::Result<()> {
    let mut terminal = ratatui::try_init()?;
    let _restore = Restore;
    // For the end-to-end test that a panic leaves the terminal usable.
    if std::env::var_os("OOMSCOPE_TUI_TEST_PANIC").is_some() {
        panic!("OOMSCOPE_TUI_TEST_PANIC is set: panicking on purpose");
    }
    let mut dirty = true;
    let mut connected = true;
    let mut last_draw = Instant::now();
    while ENDED_BY.load(Ordering::Relaxed) == 0 {
        // Drain what the sources sent; redraw at most every 50 ms while they stream.
        while connected {
            match updates.try_recv() {
                Ok(u) => {
                    app.apply(u);
                    dirty = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => connected = false,
            }
        }
        if dirty && (last_draw.elapsed() >= Duration::from_millis(50) || !connected) {
            terminal.draw(|f| draw(f, app))?;
            last_draw = Instant::now();
            dirty = false;
        }
        if event::poll(Duration::from_millis(if dirty { 10 } else { 50 }))? {
            match event::read()? {
                Event::Key(key) => {
                    app.handle_key(key);
                    if app.quit {
                        break;
                    }
                    // Keys answer at once.
                    terminal.draw(|f| draw(f, app))?;
                    last_draw = Instant::now();
                    dirty = false;
                }
                Event::Resize(_, _) => dirty = true,
                _ => {}
            }
        }
    }
    Ok(())
}
