//! The terminal: set it up, run the loop (keys, updates, redraws), and always put it back,
//! whether the user quits, presses Ctrl-C, or something panics.

use crate::app::App;
use crate::draw::draw;
use crate::model::Update;
use ratatui::crossterm::event::{self, Event};
use std::io::{self, IsTerminal};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

/// Why the UI cannot start.
pub fn check_terminal() -> Result<(), String> {
    if !io::stdout().is_terminal() || !io::stdin().is_terminal() {
        return Err("the terminal UI needs a terminal (stdin and stdout are not one here); \
                    for text use `oomscope report DUMP`"
            .to_string());
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
    // try_init installs a panic hook that restores the terminal before the panic prints.
    let mut terminal = ratatui::try_init()?;
    let _restore = Restore;
    // For the end-to-end test that a panic leaves the terminal usable.
    if std::env::var_os("OOMSCOPE_TUI_TEST_PANIC").is_some() {
        panic!("OOMSCOPE_TUI_TEST_PANIC is set: panicking on purpose");
    }
    let mut dirty = true;
    let mut connected = true;
    let mut last_draw = Instant::now();
    loop {
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
            terminal.draw(|f| draw(f, &app))?;
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
                    terminal.draw(|f| draw(f, &app))?;
                    last_draw = Instant::now();
                    dirty = false;
                }
                Event::Resize(_, _) => dirty = true,
                _ => {}
            }
        }
    }
    Ok(app)
}
