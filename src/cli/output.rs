//! Printing for commands: stdout that tolerates a closed pipe, and progress on stderr
//! that appears only on a terminal and only for work that takes a while.

use super::args::ColorChoice;
use std::io::{self, IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Whether what is printed and drawn is coloured: `--color`, decided once at start.
static COLOR: AtomicBool = AtomicBool::new(false);

/// Decides colour from `--color`, NO_COLOR and whether stdout is a terminal, for the text
/// answer and the terminal UI alike. Returns the decision.
pub fn set_color(choice: ColorChoice) -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let on = color_wanted(choice, no_color, io::stdout().is_terminal());
    COLOR.store(on, Ordering::Relaxed);
    on
}

/// `auto` colours only a terminal, and not when NO_COLOR is set to something (no-color.org);
/// `always` and `never` are what the user asked for, NO_COLOR or not.
fn color_wanted(choice: ColorChoice, no_color: bool, terminal: bool) -> bool {
    match choice {
        ColorChoice::Always => true,
        ColorChoice::Never => false,
        ColorChoice::Auto => terminal && !no_color,
    }
}

pub fn color() -> bool {
    COLOR.load(Ordering::Relaxed)
}

/// Writes to stdout. A reader that went away (`| head`) is not an error. With colour on, the
/// lines a reader looks for first (`Verdict:`, `Fix:`) have their label coloured; nothing
/// else changes, and without colour the text is written as it is.
pub fn print(text: &str) -> io::Result<()> {
    let text = safe(text);
    let text = if color() { std::borrow::Cow::Owned(paint(&text)) } else { text };
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `text` safe for a terminal: control characters and direction overrides written out
/// (`\x1b`, `\u{202e}`).
pub fn safe(text: &str) -> std::borrow::Cow<'_, str> {
    oomscope_base::text::safe(text)
}

/// Each line on stderr as `oomscope: LINE`, made safe for a terminal.
pub fn warn_all(lines: &[String]) {
    for l in lines {
        eprintln!("oomscope: {}", safe(l));
    }
}

/// Bold red for the verdict's label and its kind, bold green for the fix's label: only lines
/// that start with them (the verdict as `demo`, `report`, `import` and `replay` print it), so
/// JSON, roff and the rest of a report are left alone.
fn paint(text: &str) -> String {
    const RED: &str = "\x1b[1;31m";
    const GREEN: &str = "\x1b[1;32m";
    const BOLD: &str = "\x1b[1m";
    const RESET: &str = "\x1b[0m";
    let mut out = String::with_capacity(text.len() + 64);
    for line in text.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("Verdict: ") {
            let (kind, end) = rest.split_at(rest.trim_end_matches(['\n', '\r']).len());
            out.push_str(&format!("{RED}Verdict:{RESET} {BOLD}{kind}{RESET}{end}"));
        } else if let Some(rest) = line.strip_prefix("Fix: ") {
            out.push_str(&format!("{GREEN}Fix:{RESET} {rest}"));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// A one-line progress indicator on stderr.
pub struct Progress {
    label: &'static str,
    total: u64,
    start: Instant,
    last: Instant,
    enabled: bool,
    shown: bool,
}

/// Quiet for work shorter than this.
const SHOW_AFTER: Duration = Duration::from_millis(500);
const REDRAW_EVERY: Duration = Duration::from_millis(100);

impl Progress {
    pub fn new(label: &'static str, total: u64) -> Progress {
        let now = Instant::now();
        Progress { label, total, start: now, last: now, enabled: io::stderr().is_terminal(), shown: false }
    }

    pub fn update(&mut self, done: u64) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        if now - self.start < SHOW_AFTER || now - self.last < REDRAW_EVERY {
            return;
        }
        self.last = now;
        self.shown = true;
        let pct = if self.total == 0 { 100.0 } else { done as f64 * 100.0 / self.total as f64 };
        eprint!("\r{}: {pct:5.1}%", self.label);
    }

    pub fn finish(&mut self) {
        if self.shown {
            eprint!("\r\x1b[2K");
            self.shown = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ColorChoice;

    #[test]
    fn colour_follows_the_choice_no_color_and_the_terminal() {
        use super::color_wanted as wanted;
        assert!(wanted(ColorChoice::Auto, false, true), "a terminal without NO_COLOR");
        assert!(!wanted(ColorChoice::Auto, true, true), "NO_COLOR on a terminal");
        assert!(!wanted(ColorChoice::Auto, false, false), "a pipe");
        assert!(wanted(ColorChoice::Always, true, false), "always, even piped and with NO_COLOR");
        assert!(!wanted(ColorChoice::Never, false, true));
    }

    #[test]
    fn only_the_verdict_and_fix_labels_are_painted() {
        let text = "TF text\nVerdict: true peak\n  evidence Verdict: x\nFix: train at batch 1\n     more\n";
        let painted = super::paint(text);
        assert_eq!(
            painted,
            "TF text\n\x1b[1;31mVerdict:\x1b[0m \x1b[1mtrue peak\x1b[0m\n  evidence Verdict: x\n\x1b[1;32mFix:\x1b[0m train at batch 1\n     more\n"
        );
        let json = "{\"verdict\":{\"fix\":\"Fix: x\"}}\n";
        assert_eq!(super::paint(json), json);
    }
}
