//! The program's stderr, passed on as it comes, and read line by line for what TensorFlow
//! and XLA print at an OOM.
//!
//! The program runs with every TF log level on (`TF_CPP_MIN_LOG_LEVEL=0`), because TF
//! prints its allocator's dump at INFO level and oomscope needs it whatever the user
//! silenced. The user's own level is applied here: a TF log line below it, and the lines
//! that continue its statement, are held back; everything else passes as it came, bytes
//! as they arrive (a progress bar that redraws with `\r` keeps redrawing). A line is held
//! only while it may still turn out to be a hidden TF line, and only lines that are known
//! to continue a TF statement are hidden with it: output oomscope does not recognise is
//! never lost.

use oomscope_ingest::import::tf_log;

#[derive(Debug, Default)]
pub struct Relay {
    /// The user's `TF_CPP_MIN_LOG_LEVEL`: TF lines below it are not shown (0: all shown).
    pub min_level: u8,
    /// The line being assembled (for the reader of lines).
    line: Vec<u8>,
    /// How much of `line` was already passed on.
    written: usize,
    /// The last TF log statement is hidden: so are the lines that continue it.
    hiding: bool,
}

/// absl's notice before the first TF log line; shown when the user's level would have
/// shown the warnings it precedes.
const ABSL_NOTICE: &str = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR";

impl Relay {
    pub fn new(min_level: u8) -> Relay {
        Relay { min_level, ..Relay::default() }
    }

    /// Bytes from the program: what to pass on goes to `out`, each finished line to `lines`.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<u8>, lines: &mut Vec<String>) {
        for chunk in bytes.split_inclusive(|&b| b == b'\n') {
            self.line.extend_from_slice(chunk);
            if chunk.ends_with(b"\n") {
                self.end_line(out, lines);
            }
        }
        // An unfinished line: pass on what cannot be a TF line being written.
        if !self.line.is_empty() && !self.may_be_hidden() {
            out.extend_from_slice(&self.line[self.written..]);
            self.written = self.line.len();
        }
    }

    /// The program's stderr closed: the last, unfinished line.
    pub fn finish(&mut self, out: &mut Vec<u8>, lines: &mut Vec<String>) {
        if !self.line.is_empty() {
            self.end_line(out, lines);
        }
    }

    fn end_line(&mut self, out: &mut Vec<u8>, lines: &mut Vec<String>) {
        let text = String::from_utf8_lossy(&self.line);
        let text = text.trim_end_matches(['\n', '\r']).to_string();
        let show = self.written > 0 || self.shows(&text);
        if show {
            out.extend_from_slice(&self.line[self.written..]);
        }
        lines.push(text);
        self.line.clear();
        self.written = 0;
    }

    /// Whether a finished line is shown; keeps track of hidden statements.
    fn shows(&mut self, text: &str) -> bool {
        if self.min_level == 0 {
            return true;
        }
        let level = if text.starts_with(ABSL_NOTICE) { Some(1) } else { tf_log::severity(text) };
        match level {
            Some(level) => {
                self.hiding = level < self.min_level;
                !self.hiding
            }
            None if self.hiding && tf_log::is_continuation(text) => false,
            None => {
                self.hiding = false;
                true
            }
        }
    }

    /// The unfinished line may still become a TF line to hide: hold it.
    fn may_be_hidden(&self) -> bool {
        if self.min_level == 0 || self.written > 0 {
            return false;
        }
        let l = &self.line;
        let native = l.len() < 6 || (b"IWEF".contains(&l[0]) && l[1..5].iter().all(u8::is_ascii_digit) && l[5] == b' ');
        let dated = l.iter().take(4).all(u8::is_ascii_digit) && (l.len() < 5 || l[4] == b'-');
        let notice = ABSL_NOTICE.as_bytes().starts_with(&l[..l.len().min(ABSL_NOTICE.len())]);
        let hidden_continuation = self.hiding && !l.contains(&b'\r');
        native || dated || notice || hidden_continuation
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(min_level: u8, chunks: &[&str]) -> (String, Vec<String>) {
        let mut r = Relay::new(min_level);
        let (mut out, mut lines) = (Vec::new(), Vec::new());
        for c in chunks {
            r.feed(c.as_bytes(), &mut out, &mut lines);
        }
        r.finish(&mut out, &mut lines);
        (String::from_utf8(out).unwrap(), lines)
    }

    const DUMP: &str = "W0000 00:00:1795433278.866191   23370 bfc_allocator.cc:502] Allocator (x) ran out of memory trying to allocate 512.00MiB (rounded to 536870912)requested by op Relu\n\
If the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' will improve the situation. \n\
Current allocation summary follows.\n\
I0000 00:00:1795433278.866267   23370 bfc_allocator.cc:1049] BFCAllocator dump for x\n\
I0000 00:00:1795433278.867081   23370 bfc_allocator.cc:1128] Stats: \n\
Limit:                       256.00MiB\n\
\n\
W0000 00:00:1795433278.867105   23370 bfc_allocator.cc:513] *******\n";

    #[test]
    fn everything_passes_when_nothing_is_silenced() {
        let input = format!("epoch 1\n{DUMP}Traceback (most recent call last):\n");
        let (out, lines) = run(0, &[&input]);
        assert_eq!(out, input);
        assert_eq!(lines.len(), input.lines().count());
    }

    #[test]
    fn silenced_tf_lines_and_their_continuations_are_held_back_and_still_read() {
        let input = format!("epoch 1\n{DUMP}Traceback (most recent call last):\n  File \"train.py\"\n");
        let (out, lines) = run(2, &[&input]);
        assert_eq!(out, "epoch 1\nTraceback (most recent call last):\n  File \"train.py\"\n");
        assert!(lines.iter().any(|l| l.contains("BFCAllocator dump for x")), "read all the same");
        let (out, _) = run(1, &[&input]);
        assert!(out.contains("ran out of memory") && out.contains("Current allocation summary follows."), "{out}");
        assert!(out.contains("*******") && !out.contains("BFCAllocator dump"), "warnings shown, INFO held: {out}");
    }

    #[test]
    fn output_split_anywhere_comes_out_the_same_and_progress_bars_are_not_held() {
        let input = format!("{DUMP}done\n");
        for at in 1..input.len() {
            let (out, _) = run(2, &[&input[..at], &input[at..]]);
            assert_eq!(out, "done\n", "split at {at}");
        }
        let mut r = Relay::new(2);
        let (mut out, mut lines) = (Vec::new(), Vec::new());
        r.feed(b" 40%|####      | 4/10\r", &mut out, &mut lines);
        assert_eq!(out, b" 40%|####      | 4/10\r", "passed on before its line ends");
    }
}
