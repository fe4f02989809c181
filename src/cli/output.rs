//! Printing for commands: stdout that tolerates a closed pipe, and progress on stderr
//! that appears only on a terminal and only for work that takes a while.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, Instant};

/// Writes to stdout. A reader that went away (`| head`) is not an error.
pub fn print(text: &str) -> io::Result<()> {
    let text = safe(text);
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// `text` with control characters other than newline and tab written as `\x1b`, `\u{9b}`:
/// op names and messages come from logs pasted from anywhere, and a terminal would act on
/// an escape sequence in them (retitle the window, clear the screen, worse).
pub fn safe(text: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| c.is_control() && c != '\n' && c != '\t';
    if !text.contains(bad) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !bad(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    std::borrow::Cow::Owned(out)
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
    #[test]
    fn control_characters_are_shown_not_sent() {
        assert_eq!(super::safe("a\tb\nc"), "a\tb\nc");
        assert_eq!(super::safe("x\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{9b}y"), "x\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\u{9b}y");
    }
}
