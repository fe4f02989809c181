//! Text from logs, snapshots and programs, made safe to show: op names and messages come
//! from anywhere, and a terminal acts on what some characters say. Control characters
//! (escape sequences retitle the window, clear the screen, worse) and the bidirectional
//! controls (U+202E turns what follows around: `gnp.exe` reads as `exe.png`) are never sent
//! raw.

use std::borrow::Cow;

/// A character a terminal would act on or reorder text around, rather than show: control
/// characters other than newline and tab, and the bidirectional embeddings, overrides,
/// isolates and marks.
pub fn unsafe_char(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t')
        || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}')
}

/// `text` with its unsafe characters written as `\x1b` (ASCII) or `\u{202e}`: seen, not
/// acted on.
pub fn safe(text: &str) -> Cow<'_, str> {
    if !text.contains(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            c if !unsafe_char(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

/// `text` as one line, for a field that has no business holding more (a host's name, a
/// job's, an op's): newlines and tabs written out as well, so that a name cannot forge a
/// line of the report it is shown in.
pub fn safe_line(text: &str) -> Cow<'_, str> {
    if !text.contains(|c: char| unsafe_char(c) || c == '\n' || c == '\t') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c => out.push_str(&safe(c.encode_utf8(&mut [0; 4]))),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_stays_on_one_line() {
        assert_eq!(safe_line("gpu-07"), "gpu-07");
        assert_eq!(safe_line("h\nrank 9 ran out of memory first\t\x1b"), "h\\nrank 9 ran out of memory first\\t\\x1b");
    }

    #[test]
    fn controls_and_direction_marks_are_written_out() {
        assert_eq!(safe("a\tb\nc"), "a\tb\nc");
        assert_eq!(safe("x\u{1b}]0;pwned\u{7}\u{1b}[2J\r\u{9b}y"), "x\\x1b]0;pwned\\x07\\x1b[2J\\x0d\\u{9b}y");
        assert_eq!(safe("layer\u{202e}gnp.exe"), "layer\\u{202e}gnp.exe");
        assert_eq!(safe("\u{2066}x\u{2069}\u{200f}"), "\\u{2066}x\\u{2069}\\u{200f}");
        // Text in right-to-left scripts stays as written: only the controls are shown.
        assert_eq!(safe("שכבה/conv"), "שכבה/conv");
    }
}
