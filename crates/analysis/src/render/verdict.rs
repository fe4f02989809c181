//! The verdict as people read it: the cause, the figures behind it, and the fix.

use oomscope_dump::Verdict;
use std::fmt::Write;

/// Width the verdict is wrapped to.
const WIDTH: usize = 100;

/// Wraps `text` at spaces to `WIDTH`, the first line after `first`, the rest after `rest`.
fn wrap(out: &mut String, first: &str, rest: &str, text: &str) {
    let mut line = String::from(first);
    let mut empty = true;
    for word in text.split(' ') {
        if !empty && line.len() + 1 + word.len() > WIDTH {
            out.push_str(&line);
            out.push('\n');
            line = String::from(rest);
            empty = true;
        }
        if !empty {
            line.push(' ');
        }
        line.push_str(word);
        empty = false;
    }
    out.push_str(&line);
    out.push('\n');
}

/// `Verdict: <class>` and the indented headline, evidence and fix.
pub fn render(v: &Verdict) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "Verdict: {}", v.kind.name());
    wrap(&mut o, "  ", "  ", &v.headline);
    for e in &v.evidence {
        wrap(&mut o, "  - ", "    ", e);
    }
    wrap(&mut o, "Fix: ", "     ", &v.fix);
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use oomscope_dump::VerdictKind;

    #[test]
    fn wraps_long_lines_under_the_width() {
        let v = Verdict {
            kind: VerdictKind::Peak,
            headline: "word ".repeat(40).trim().to_string(),
            evidence: vec!["short".into()],
            fix: "do it".into(),
            breakdown: vec![],
        };
        let text = render(&v);
        assert!(text.starts_with("Verdict: true peak\n  word word"), "{text}");
        assert!(text.lines().all(|l| l.len() <= WIDTH), "{text}");
        assert!(text.contains("\n  - short\nFix: do it\n"));
    }
}
