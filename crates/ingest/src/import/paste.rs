//! What pasting does to a text, undone before any rule reads it: a forum's or a terminal's
//! wrapping, quote markers, markdown emphasis and code marks, the prefixes launchers put on
//! every line, and a paste lower-cased whole. The readers then see the text as the framework
//! printed it, and the dump says what was undone ([`PasteDamage`]); the lines a reader names
//! are mapped back to the paste's own ([`Pasted::line`]).
//!
//! Each step is taken only on its own evidence, line by line, so a text that was not damaged
//! comes out as it went in: TensorFlow's C++ log prefixes (`I0000 00:00:...`, `2025-01-05
//! 09:48:28.754302: I ...]`) stay, as its reader tells threads apart by them; a list of lines
//! that start alike (allocator bins, chunks) is never joined.

use oomscope_format::PasteDamage;

/// A paste with its damage undone.
#[derive(Clone, Debug, Default)]
pub struct Pasted {
    pub text: String,
    /// For each line of `text`, the 0-based line of the paste it starts on.
    origin: Vec<usize>,
    /// What was undone, in the order of [`PasteDamage`].
    pub undone: Vec<PasteDamage>,
    /// The paste's last line ends where no line of a framework's ends (mid-word, mid-figure):
    /// it was cut short, and what followed is not in it.
    pub cut: bool,
    /// The 0-based line of `text` that is the paste's last with something on it.
    pub last: usize,
    /// The paste's lines.
    pub lines: usize,
}

impl Pasted {
    /// The paste's 1-based line for a 1-based line of the text (0, no line, stays 0).
    pub fn line(&self, line: usize) -> usize {
        match line {
            0 => 0,
            l => self.origin.get(l - 1).map_or(l, |&o| o + 1),
        }
    }

    /// The repaired text's line (1-based) that holds the paste's line `original` (1-based):
    /// [`Pasted::line`] maps it back to where that repaired line starts.
    pub fn line_in_repaired(&self, original: usize) -> usize {
        if original == 0 || self.origin.is_empty() {
            return original;
        }
        self.origin.iter().rposition(|&o| o < original).map_or(1, |i| i + 1)
    }
}

/// `text` with each line's quote marks and markdown undone, and nothing else: its lines are
/// the paste's own (where a look-alike's words broken mid-word across two lines are found).
pub fn unmarked(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for l in text.lines() {
        out.push_str(&unmark(l).0);
        out.push('\n');
    }
    out
}

/// `text` without what a web page's copy puts inside words (zero-width spaces and joiners, soft
/// hyphens, byte-order marks), with full-width punctuation as ASCII (`（GPU 0； ...）`, an IME's
/// retype) and a decimal comma in a size as a point (`2,00 GiB`): characters only, so every
/// line stays where it was.
pub fn normalised(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\u{200B}' | '\u{200C}' | '\u{200D}' | '\u{2060}' | '\u{FEFF}' | '\u{00AD}' => {}
            '（' => out.push('('),
            '）' => out.push(')'),
            '；' => out.push(';'),
            '：' => out.push(':'),
            '，' => out.push(','),
            '\u{3000}' => out.push(' '),
            _ => out.push(c),
        }
    }
    decimal_commas(&entities(&out))
}

/// HTML's entities as the characters they stand for (`&lt;=` as `<=`, `&quot;`): a paste copied
/// from a page's source, or a page stored with its markup's escapes. `&amp;` last, so that an
/// escaped entity (`&amp;lt;`) stays one.
fn entities(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    const NAMED: &[(&str, &str)] = &[
        ("&lt;", "<"),
        ("&gt;", ">"),
        ("&quot;", "\""),
        ("&#34;", "\""),
        ("&#39;", "'"),
        ("&#x27;", "'"),
        ("&apos;", "'"),
        ("&nbsp;", " "),
        ("&amp;", "&"),
    ];
    let mut out = text.to_string();
    for (e, c) in NAMED {
        if out.contains(e) {
            out = out.replace(e, c);
        }
    }
    out
}

/// `2,00 GiB` as `2.00 GiB`: a comma followed by exactly two digits and a size's unit (a
/// thousands separator is followed by three).
fn decimal_commas(text: &str) -> String {
    if !text.contains(',') {
        return text.to_string();
    }
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (i, _) in text.match_indices(',') {
        let digit = |j: usize| b.get(j).is_some_and(u8::is_ascii_digit);
        // (Two ASCII digits after the comma: `i + 3` is a character's boundary.)
        let unit = || text[i + 3..].trim_start_matches(' ');
        if i > 0
            && digit(i - 1)
            && digit(i + 1)
            && digit(i + 2)
            && !digit(i + 3)
            && ["GiB", "MiB", "KiB", "GB", "MB"].iter().any(|u| unit().starts_with(u))
        {
            out.push_str(&text[last..i]);
            out.push('.');
            last = i + 1;
        }
    }
    out.push_str(&text[last..]);
    out
}

/// Undoes what pasting did to `text`.
pub fn undo(text: &str) -> Pasted {
    let count = text.lines().count();
    let mut damage = Vec::new();
    let mut lines: Vec<(String, usize)> = Vec::new();
    let (mut quoted, mut marked) = (false, false);
    for (i, l) in text.lines().enumerate() {
        let (l, q, m) = unmark(l);
        quoted |= q;
        marked |= m;
        lines.push((l, i));
    }
    // A prefix on every line (a launcher's, a logger's) went on after any wrapping: off first,
    // so that the lines' widths are the wrapped text's own.
    let mut prefixed = false;
    // (One layer: the one every line has. `[rank1]: ` on a program's own lines, and not on
    // those a terminal wrapped, stays for later.)
    let every_line = lines.iter().filter(|(l, _)| !l.trim().is_empty()).all(|(l, _)| one_prefix(l).is_some());
    if every_line && lines.iter().any(|(l, _)| !l.trim().is_empty()) {
        for (l, _) in &mut lines {
            if let Some(r) = one_prefix(l) {
                // (Its one separating space; more are the line's own: a terminal's wrap keeps the
                // space it broke before.)
                let removed = &l[..l.len() - r.len()];
                let spaces = removed.len() - removed.trim_end_matches(' ').len();
                let r = &l[l.len() - r.len() - spaces.saturating_sub(1)..];
                // (And the marks behind it: a fence, a quote, bold.)
                let (r, q, m) = unmark(r);
                quoted |= q;
                marked |= m;
                *l = r;
            }
        }
        prefixed = true;
    }
    if quoted {
        damage.push(PasteDamage::Quoted);
    }
    if marked {
        damage.push(PasteDamage::Markdown);
    }
    // Each line's length as pasted: markdown's marks were there when the forum wrapped it.
    let pasted: Vec<usize> = if prefixed {
        lines.iter().map(|(l, _)| l.trim_end().chars().count()).collect()
    } else {
        text.lines().map(|l| l.trim_end().chars().count()).collect()
    };
    if let Some(w) = unwrap(&mut lines, &pasted) {
        damage.push(w);
        // A text wrapped twice (a terminal's 80 columns, then a forum's 60): what the first
        // join left may be the terminal's wrap, at a width of its own.
        // (Widths by each line's first line as pasted, as `unwrap` looks them up.)
        let mut widths = vec![0; pasted.len()];
        for (l, o) in &lines {
            if let Some(w) = widths.get_mut(*o) {
                *w = l.trim_end().chars().count();
            }
        }
        let before = lines.len();
        let mut again = lines.clone();
        if unwrap(&mut again, &widths).is_some_and(|w| matches!(w, PasteDamage::Wrapped { .. })) && again.len() < before
        {
            lines = again;
        }
    }
    for (l, _) in &mut lines {
        let t = without_prefixes(l);
        if t.len() != l.len() {
            prefixed = true;
            *l = t.to_string();
        }
    }
    if prefixed {
        damage.push(PasteDamage::Prefixed);
    }
    let mut text = String::with_capacity(text.len());
    let mut origin = Vec::with_capacity(lines.len());
    for (l, o) in &lines {
        text.push_str(l.trim_end());
        text.push('\n');
        origin.push(*o);
    }
    // A message a person retyped: a word the framework never prints, spaces lost.
    if let Some(r) = retyped(&text) {
        text = r;
        damage.push(PasteDamage::Retyped);
    }
    // Lower-cased whole, or a message's words lower-cased in a text that has capitals
    // elsewhere (`RuntimeError: cuda out of memory. tried to allocate ...`): read when the
    // words in their case make a message the text did not hold.
    let markers = |t: &str| super::message::phrases().filter(|p| t.contains(p)).count();
    let hand = || text.len() <= MIXED_CASE_LIMIT && !super::tf_log::has_report(&text);
    if lower_cased(&text) || hand() {
        let r = recased(&text);
        if r != text && (lower_cased(&text) || markers(&r) > markers(&text)) {
            text = r;
            damage.push(PasteDamage::LowerCased);
        }
    }
    let last = lines.iter().rposition(|(l, _)| !l.trim().is_empty()).unwrap_or(0);
    let cut = lines.get(last).is_some_and(|(l, _)| ends_open(l));
    Pasted { text, origin, undone: damage, cut, last, lines: count }
}

/// Framework messages as people retype them, and as the framework prints them.
const RETYPED: &[(&str, &str)] = &[
    ("CUDA out of the memory", "CUDA out of memory"),
    ("cuda out of the memory", "cuda out of memory"),
    ("out of memory, tried to allocate", "out of memory. tried to allocate"),
    ("out of memory, Tried to allocate", "out of memory. Tried to allocate"),
    ("totalcapacity", "total capacity"),
    ("by Pytorch", "by PyTorch"),
    // A figure's decimals a person wrote as a dash (`512.— MiB`).
    (".— MiB", ".00 MiB"),
    (".— GiB", ".00 GiB"),
    (".– MiB", ".00 MiB"),
    (".– GiB", ".00 GiB"),
];

/// `text` with a retyped PyTorch message as PyTorch prints it, when it was retyped: the
/// words above, and the spaces a person left out in its figures' clause (`50MiB(GPU 0;
/// 1.96GiB total capacity;1.33GiB already allocated`). None when nothing changes.
fn retyped(text: &str) -> Option<String> {
    let lower = text.to_ascii_lowercase();
    if !lower.contains("out of") || !lower.contains("memory") {
        return None;
    }
    let mut out = text.to_string();
    for (said, printed) in RETYPED {
        out = out.replace(said, printed);
    }
    if lower.contains("already allocated") {
        // Only in the message's own lines (a traceback's `x = f(a);y = g(b)` is code).
        let mut spaced = String::with_capacity(out.len() + 8);
        for line in out.split_inclusive('\n') {
            if !line.contains("already allocated") {
                spaced.push_str(line);
                continue;
            }
            let b = line.as_bytes();
            for (i, c) in line.char_indices() {
                spaced.push(c);
                let next = b.get(i + 1).copied();
                // `;1.33GiB` and `50MiB(GPU`: a space where PyTorch prints one.
                let after_unit = c == 'B' && i > 0 && matches!(b[i - 1], b'i' | b' ' | b'0'..=b'9');
                if (c == ';' && next.is_some_and(|n| n != b' ')) || (after_unit && next == Some(b'(')) {
                    spaced.push(' ');
                }
            }
        }
        out = spaced;
    }
    (out != text).then_some(out)
}

/// A line without a quote's `>` marks, a code fence, markdown's emphasis and code marks:
/// the line, and whether it was quoted or marked up.
fn unmark(line: &str) -> (String, bool, bool) {
    let (l, q, m) = unmark_trimmed(line.trim_end());
    // The blanks a line ends with stay until the wrapping is undone: a terminal that cut
    // before a space shows it there.
    let blanks = &line[line.trim_end().len()..];
    (if m || q { l } else { format!("{l}{blanks}") }, q, m)
}

fn unmark_trimmed(line: &str) -> (String, bool, bool) {
    let mut l = line.to_string();
    let mut quoted = false;
    let t = l.trim_start();
    if t.starts_with('>') {
        // Each `>` with the one space after it (`> > ` nested): the line's own leading blanks
        // stay, where a terminal that wrapped it kept the space it cut before.
        let mut rest = t;
        while let Some(r) = rest.strip_prefix('>') {
            rest = r.strip_prefix(' ').unwrap_or(r);
        }
        // `>>> ` is Python's prompt, which is pasted with the code it ran: kept as a quote's.
        l = rest.to_string();
        quoted = true;
    }
    let t = l.trim_start();
    // A pager's or terminal's position (`[35/1118]`), alone on its line, is no text's.
    let position = t.trim_end();
    if position.len() > 4
        && position.starts_with('[')
        && position.ends_with(']')
        && position[1..position.len() - 1].split('/').count() == 2
        && position[1..position.len() - 1].split('/').all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        return (String::new(), quoted, true);
    }
    if t.starts_with("```") || t.starts_with("~~~") {
        // A fence's info string is one word (`python`, `text`); text glued to the fence
        // (```RuntimeError: CUDA out of memory. ...) is the paste's first line.
        let rest = t.trim_start_matches(['`', '~']);
        if rest.trim().is_empty() || !rest.trim().contains(char::is_whitespace) {
            return (String::new(), quoted, true);
        }
        l = rest.to_string();
    }
    let before = l.len();
    // Bold (`**`) is no framework's; Python's `**kwargs` in a traceback's code loses nothing
    // that is read.
    // Bold around a whole line, which may end with TensorFlow's occupancy bar (100 of `*`
    // and `_`): a run of more asterisks is the bar's.
    let t = l.trim_start();
    if t.starts_with("**") && t.ends_with("**") && t.len() > 4 {
        let indent = l.len() - t.len();
        let bar = if t.trim_matches('*').is_empty() { t.len() == 104 } else { !t[2..].starts_with('*') };
        if bar {
            l = format!("{}{}", &l[..indent], &t[2..t.len() - 2]);
        }
    }
    // (Not in TensorFlow's occupancy bar, whose in-use cells may come in pairs: `x**x`; a
    // wrap may have cut the bar, so any run of ten cells or more is taken for one.)
    let bar = l
        .split_whitespace()
        .next_back()
        .is_some_and(|w| w.len() >= 10 && w.bytes().all(|b| matches!(b, b'*' | b'x' | b'_')));
    if l.contains("**") && !bar {
        l = without_pairs(&l, '*');
    }
    // (A CUDA kernel's failed check quotes its condition in backticks.)
    if l.contains('`') && !l.contains("Assertion `") {
        l = l.replace('`', "");
    }
    // Emphasis around a whole line (`__x__`, `_x_`, `*x*`), and the opening `_` of italics
    // glued to a log's timestamp (`_2019-05-01 ...`).
    let indent = l.len() - l.trim_start().len();
    let t = l[indent..].to_string();
    let inner = ["__", "_", "*"].iter().find_map(|m| {
        let i = t.strip_prefix(m)?.strip_suffix(m)?;
        (i.contains(' ') && !i.starts_with(' ') && !i.ends_with(' ')).then(|| i.to_string())
    });
    if let Some(i) = inner {
        l = format!("{}{i}", &l[..indent]);
    } else if t.starts_with('_') && t[1..].starts_with(|c: char| c.is_ascii_digit()) {
        l = format!("{}{}", &l[..indent], &t[1..]);
    }
    let marked = l.len() != before;
    (l, quoted, marked)
}

/// `line` without its runs of exactly two `c`.
fn without_pairs(line: &str, c: char) -> String {
    let mut out = String::with_capacity(line.len());
    let mut run = 0;
    for ch in line.chars().chain(std::iter::once('\0')) {
        if ch == c {
            run += 1;
            continue;
        }
        if run != 2 {
            out.extend(std::iter::repeat_n(c, run));
        }
        run = 0;
        if ch != '\0' {
            out.push(ch);
        }
    }
    out
}

/// Joins the lines a forum (at word boundaries) or a terminal (at a column, mid-word) broke:
/// what it did, if anything. A break is read where the line is as long as the text's widest
/// (a terminal's column), or where the next line's first word would not have fitted on it (a
/// forum's), and the next line is not one that starts a line: a log prefix, a traceback's
/// frame, an indented line, or a line that starts as this one does (a list).
fn unwrap(lines: &mut Vec<(String, usize)>, pasted: &[usize]) -> Option<PasteDamage> {
    let width = lines.iter().map(|(l, _)| l.chars().count()).max()?;
    let pasted_width = pasted.iter().copied().max().unwrap_or(0);
    if width < 40 {
        return None;
    }
    let len = |s: &str| s.chars().count();
    let breaks: Vec<(usize, bool, bool)> = (0..lines.len().saturating_sub(1))
        .filter_map(|i| {
            let (l, n) = (&lines[i].0, &lines[i + 1].0);
            let terminal = len(l) == width;
            // A terminal keeps the space it cut before: one, where an indented line has more.
            let spaced = terminal && n.starts_with(' ') && !n[1..].starts_with([' ', '\t']);
            if l.trim().is_empty() || n.trim().is_empty() || (starts_a_line(n) && !spaced) || same_start(l, n) {
                return None;
            }
            let first = n.split_whitespace().next().map_or(0, len);
            // (A short line before a long word is a forum's break too: the word did not fit. The
            // line as pasted counts too: bold's `**` took room when the forum wrapped it.)
            let as_pasted = pasted.get(lines[i].1).copied().unwrap_or(0);
            let fold = (len(l) + 1 + first > width || as_pasted + 1 + first > pasted_width)
                && (len(l) * 2 >= width || first * 2 > width);
            // A word longer than the line is cut where the line ends, whoever wrapped it.
            let cut_word = terminal && !l.trim().contains(' ');
            (terminal || fold).then_some((i, terminal, cut_word))
        })
        .collect();
    // One break alone, after a sentence's end, is two lines a text has: `... (Cannot allocate
    // memory)` then `If you encounter ...`.
    // So is a line before a sentence (`If the cause is memory fragmentation ...` after TF's
    // op name).
    let sentence = |n: &str| {
        let w = n.split_whitespace().next().unwrap_or("");
        let mut c = w.chars();
        c.next().is_some_and(char::is_uppercase)
            && c.next().is_some_and(char::is_lowercase)
            && w.chars().all(char::is_alphabetic)
            && !["GiB", "MiB", "KiB", "TiB", "PyTorch"].contains(&w)
    };
    if breaks.is_empty()
        || (breaks.len() == 1
            && (lines[breaks[0].0].0.trim_end().ends_with(['.', ')', ']', '!', '?', ':'])
                || sentence(&lines[breaks[0].0 + 1].0)))
    {
        return None;
    }
    // A terminal cuts at its column, mid-word maybe: its breaks are (almost) all as long as
    // the widest line, and are joined as they were. A forum's lost the space it broke at;
    // its longest line is as long as the widest too, by definition, so one break says nothing.
    // A line that ends a clause (`capacity;`) before a word is a forum's break: a terminal's
    // would have kept the space.
    let clause = |i: usize| {
        lines[i].0.ends_with([';', ',', ':', '.']) && lines[i + 1].0.starts_with(|c: char| c.is_alphanumeric())
    };
    // Two words the text (or the messages' words) has, which glued would make one it has not:
    // a forum's break (`GiB` / `total`), where a terminal's cuts words (`capac` / `ity`).
    let norm = |w: &str| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase();
    let mut words = std::collections::HashSet::new();
    for (l, _) in lines.iter() {
        words.extend(l.split_whitespace().map(norm));
    }
    let phrases = super::message::phrases().chain(WORDS.iter().copied());
    // The messages' own words, without the text's (a cut word's halves are the text's).
    let dictionary: std::collections::HashSet<String> =
        phrases.flat_map(str::split_whitespace).chain(COMMON.iter().copied()).map(norm).collect();
    words.extend(dictionary.iter().cloned());
    let known = |w: &str| {
        let w = norm(w);
        !w.is_empty() && (words.contains(&w) || w.parse::<f64>().is_ok())
    };
    let two_words = |i: usize| {
        let (l, n) = (&lines[i].0, &lines[i + 1].0);
        let (Some(a), Some(b)) = (l.split(' ').next_back(), n.split(' ').next()) else { return false };
        !a.is_empty() && !b.is_empty() && known(a) && known(b) && !known(&format!("{a}{b}"))
    };
    // A word cut in two where each half is no word and the whole is one (`fre` / `e;`): a
    // terminal's break, even where it is the text's only one.
    let one_word = |i: usize| {
        let (l, n) = (&lines[i].0, &lines[i + 1].0);
        let (Some(a), Some(b)) = (l.split(' ').next_back(), n.split(' ').next()) else { return false };
        let word = |w: &str| dictionary.contains(&norm(w));
        let halves_words = word(a) && word(b);
        !a.is_empty() && !b.is_empty() && !halves_words && word(&format!("{a}{b}"))
    };
    let mid_word = breaks.len() >= 2
        && breaks.iter().filter(|b| b.1).count() * 5 >= breaks.len() * 4
        && !breaks.iter().any(|b| clause(b.0))
        && breaks.iter().filter(|b| two_words(b.0)).count() * 3 <= breaks.len();
    // Each break: where, and whether it is joined as a terminal's (without a space).
    let breaks: Vec<(usize, bool)> =
        breaks.iter().map(|b| (b.0, b.2 || (mid_word && b.1) || (b.1 && one_word(b.0)))).collect();
    let mut out: Vec<(String, usize)> = Vec::with_capacity(lines.len());
    let mut joins = breaks.iter().peekable();
    let mut join: Option<bool> = None;
    for (i, (l, o)) in lines.drain(..).enumerate() {
        match join {
            Some(terminal) => {
                let last = out.last_mut().expect("a join follows a line");
                if terminal {
                    last.0.push_str(&l);
                } else {
                    last.0.truncate(last.0.trim_end().len());
                    last.0.push(' ');
                    last.0.push_str(l.trim_start());
                }
            }
            None => out.push((l, o)),
        }
        join = joins.next_if(|b| b.0 == i).map(|b| b.1);
    }
    *lines = out;
    Some(PasteDamage::Wrapped { width: width as u32, mid_word })
}

/// A line that begins a line of its own: a log prefix, a traceback's frame or error, an
/// indented line.
fn starts_a_line(l: &str) -> bool {
    if l.starts_with([' ', '\t']) {
        return true;
    }
    let t = l;
    if matches!(t.trim(), "Killed" | "已杀死") {
        return true;
    }
    // A shell's report of a crash is a line of its own.
    if ["Segmentation fault", "Bus error", "Aborted", "Floating point exception"].iter().any(|p| t.starts_with(p)) {
        return true;
    }
    let glog = t.len() > 5
        && t.starts_with(['I', 'W', 'E', 'F'])
        && (t.as_bytes()[1..5].iter().all(u8::is_ascii_digit) && t.as_bytes().get(5) == Some(&b' ')
            // TF 1.x's `I tensorflow/core/common_runtime/bfc_allocator.cc:643] `.
            || t.as_bytes()[1] == b' ' && t.split_once("] ").is_some_and(|(p, _)| p.contains(".cc:") || p.contains(".h:")));
    // A compiler's or a library's `path/file.cpp:74: error: ...` (OpenCV's errors, one a line;
    // not a path's tail a wrap put first, `ource.hpp:182: Maximum pool size exceeded`).
    let source_line = t.split_whitespace().next().is_some_and(|w| {
        w.contains('/')
            && [".cpp:", ".cc:", ".cu:", ".c:", ".h:", ".hpp:", ".cuh:"]
                .iter()
                .any(|e| w.find(e).is_some_and(|i| w[i + e.len()..].starts_with(|c: char| c.is_ascii_digit())))
    }) && [": error", ": warning", ": fatal"].iter().any(|k| t.contains(k));
    glog || source_line
        || date_time(t).is_some()
        || without_prefixes(t).len() != t.len()
        || vllm_logger(t).is_some()
        || [
            "Traceback",
            "File \"",
            "During handling",
            "The above exception",
            "[rank",
            "[default",
            "(Vllm",
            "(Engine",
            "(pid=",
            "(Ray",
        ]
        .iter()
        .any(|p| t.starts_with(p))
        || t.split_once(": ").is_some_and(|(head, _)| {
            // (An exception's name starts with a capital, after its module's path: not the
            // tail of a word a wrap cut, glued to one, `memoryError: Program not built!`.)
            let named = head.rsplit('.').next().is_some_and(|n| n.starts_with(|c: char| c.is_ascii_uppercase()));
            !head.contains(' ')
                && (named && (head.ends_with("Error") || head.ends_with("Exception") || head.ends_with("Exhausted"))
                    // A C program's log line that starts with its function's name
                    // (`ggml_backend_cuda_buffer_type_alloc_buffer: allocating ...`).
                    || head.len() >= 8
                        && head.contains('_')
                        && head.starts_with(|c: char| c.is_ascii_lowercase())
                        && head.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'))
        })
}

/// Lines of a list start with the same word (`Bin (256):`, `Chunk at`, `InUse at`), or the
/// same mark (`# `, `- `).
fn same_start(l: &str, n: &str) -> bool {
    // (A logger's one-letter level is not the line's word: `I tensorflow/...`.)
    let word = |s: &str| {
        let mut w = s.split_whitespace();
        let first = w.next()?;
        let letter = first.len() == 1 && first.chars().all(char::is_alphabetic);
        let first = if letter { format!("{first} {}", w.next().unwrap_or("")) } else { first.to_string() };
        Some(first.trim_end_matches(|c: char| c.is_ascii_digit()).to_string())
    };
    let (a, b) = (word(l), word(n));
    a.is_some_and(|a| (a.len() >= 2 || !a.chars().all(char::is_alphanumeric)) && Some(a) == b)
}

/// `2026-11-27 10:00:00,123`, `2026-11-27T10:00:00.123456Z`, `[2026-11-27 10:00:00]` at the
/// start of `l`: its length, brackets and zone included.
fn date_time(l: &str) -> Option<usize> {
    let b = l.as_bytes();
    let open = usize::from(b.first() == Some(&b'['));
    let d = &b[open..];
    let digits = |r: std::ops::Range<usize>| d.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let date = digits(0..4) && d.get(4) == Some(&b'-') && digits(5..7) && d.get(7) == Some(&b'-') && digits(8..10);
    if !date || !matches!(d.get(10), Some(b' ' | b'T')) {
        return None;
    }
    if !(digits(11..13) && d.get(13) == Some(&b':') && digits(14..16) && d.get(16) == Some(&b':') && digits(17..19)) {
        return None;
    }
    let mut i = 19;
    if matches!(d.get(i), Some(b'.' | b',')) {
        i += 1;
        while d.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    if d.get(i) == Some(&b'Z') {
        i += 1;
    } else if matches!(d.get(i), Some(b'+' | b'-')) && digits(i + 1..i + 3) {
        i += 3;
        if d.get(i) == Some(&b':') {
            i += 1;
        }
        while d.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    if open == 1 { (d.get(i) == Some(&b']')).then_some(i + 2) } else { Some(i) }
}

const LEVELS: &[&str] = &["DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"];

/// vLLM's logger: `ERROR 11-27 10:00:00 [core.py:700] `, `INFO 05-12 10:20:30.123 engine.py:12] `.
fn vllm_logger(l: &str) -> Option<usize> {
    let (level, rest) = l.split_once(' ')?;
    if !LEVELS.contains(&level) {
        return None;
    }
    let b = rest.as_bytes();
    let ok = b.len() > 14
        && b[..2].iter().all(u8::is_ascii_digit)
        && b[2] == b'-'
        && b[3..5].iter().all(u8::is_ascii_digit)
        && b[5] == b' '
        && b[6..8].iter().all(u8::is_ascii_digit)
        && b[8] == b':';
    if !ok {
        return None;
    }
    let end = rest.find("] ")? + 2;
    (end < 80).then_some(level.len() + 1 + end)
}

/// The line without the prefixes launchers and loggers put before it, however many: a
/// rank's (`[rank0]: `, `[default0]:`, MPI's `[1,0]<stderr>:`), a Ray or vLLM worker's
/// (`(VllmWorker rank=0 pid=42) `), Docker Compose's (`trainer-1  | `), a timestamp with
/// its level (`2026-11-27 10:00:00,123 - ERROR - `, `[2026-11-27 10:00:00] [ERROR] `), vLLM's
/// logger. TensorFlow's C++ logger's prefixes stay.
fn without_prefixes(mut l: &str) -> &str {
    while let Some(r) = one_prefix(l) {
        l = r;
    }
    l
}

/// `l` without its outermost prefix, when it has one.
fn one_prefix(l: &str) -> Option<&str> {
    let t = l.trim_start();
    let r = if let Some(r) = rank_tag(t) {
        r
    } else if let Some(r) = worker_tag(t) {
        r
    } else if let Some(r) = compose_tag(t) {
        r
    } else if let Some(n) = date_time(t) {
        let rest = &t[n..];
        // absl's `2025-01-05 09:48:28.754302: I tensorflow/...] ` is TensorFlow's own.
        let b = rest.as_bytes();
        if b.first() == Some(&b':') && b.get(2).is_some_and(|c| b"IWEF".contains(c)) && b.get(3) == Some(&b' ') {
            return None;
        }
        without_level(rest)
    } else if let Some(n) = vllm_logger(t) {
        &t[n..]
    } else {
        return None;
    };
    (r.len() != l.len()).then_some(r)
}

/// `[rank0]: `, `[rank12]:`, `[default3]:`, `[1,0]<stderr>:`.
fn rank_tag(t: &str) -> Option<&str> {
    let rest = t.strip_prefix('[')?;
    let end = rest.find(']')?;
    let tag = &rest[..end];
    let after = &rest[end + 1..];
    let named = ["rank", "default", "RANK "]
        .iter()
        .any(|p| tag.strip_prefix(p).is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())));
    let mpi = !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit() || b == b',') && tag.contains(',');
    if named {
        return Some(
            after.strip_prefix(':').unwrap_or(after).strip_prefix(' ').unwrap_or(after.trim_start_matches(':')),
        );
    }
    if mpi {
        let after = after.strip_prefix("<stderr>").or_else(|| after.strip_prefix("<stdout>"))?;
        return Some(after.strip_prefix(':').unwrap_or(after));
    }
    None
}

/// `(VllmWorker rank=0 pid=42) `, `(EngineCore_DP0 pid=7) `, `(pid=123, ip=10.0.0.1) `.
fn worker_tag(t: &str) -> Option<&str> {
    let rest = t.strip_prefix('(')?;
    let end = rest.find(')')?;
    let tag = &rest[..end];
    (end < 100 && (tag.contains("pid=") || tag == "raylet")).then(|| rest[end + 1..].trim_start_matches(' '))
}

/// Docker Compose's `trainer-1  | `, `trainer_1  | `.
fn compose_tag(t: &str) -> Option<&str> {
    let (name, rest) = t.split_once(' ')?;
    let tail = name.rsplit(['-', '_']).next()?;
    let named = name.len() > 2
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && (name.contains('-') || name.contains('_'))
        && !tail.is_empty()
        && tail.bytes().all(|b| b.is_ascii_digit());
    let rest = rest.trim_start_matches(' ');
    if !named {
        return None;
    }
    rest.strip_prefix("| ").or_else(|| (rest == "|").then_some(""))
}

/// After a timestamp: a level and a logger's name in any of the usual orders (` - name -
/// ERROR - `, ` [ERROR] `, ` ERROR `, `: `), and a `[file.py:12]` source.
fn without_level(rest: &str) -> &str {
    let mut r = rest.trim_start_matches([' ', ':', '|']);
    if let Some(x) = r.strip_prefix("- ") {
        // `name - LEVEL - ` or `LEVEL - `.
        let mut at = x;
        for _ in 0..3 {
            let Some((head, tail)) = at.split_once(" - ") else { break };
            at = tail;
            if LEVELS.contains(&head.trim()) {
                return tail;
            }
        }
        r = x;
    }
    for level in LEVELS {
        for form in [format!("[{level}]"), format!("{level}:"), format!("{level} "), format!("|{level}|")] {
            if let Some(x) = r.strip_prefix(form.as_str()) {
                r = x.trim_start_matches([' ', ':', '-']);
                // `[train.py:42] ` after the level.
                if r.starts_with('[')
                    && let Some(end) = r.find("] ")
                    && r[1..end].contains(':')
                    && end < 80
                {
                    r = &r[end + 2..];
                }
                return r;
            }
        }
    }
    r
}

/// The largest text whose message's words are looked for lower-cased among capitals (each
/// word is a pass over the text).
const MIXED_CASE_LIMIT: usize = 1 << 20;

/// A text lower-cased whole: letters, and not one in upper case.
fn lower_cased(text: &str) -> bool {
    let letters = text.bytes().filter(u8::is_ascii_alphabetic).count();
    letters >= 20 && !text.bytes().any(|b| b.is_ascii_uppercase())
}

/// Words of the messages' sentences, for telling a forum's breaks from a terminal's.
const COMMON: &[&str] = &[
    "total",
    "capacity",
    "already",
    "allocated",
    "free",
    "reserved",
    "cached",
    "in",
    "by",
    "of",
    "the",
    "is",
    "and",
    "to",
    "memory",
    "which",
    "has",
    "a",
    "on",
    "for",
    "with",
    "this",
    "process",
    "non",
    "including",
    "if",
    "try",
    "setting",
    "avoid",
    "fragmentation",
    "see",
    "documentation",
    "management",
    "out",
    "tried",
    "allocate",
    "unallocated",
    "but",
    "large",
    "when",
    "allocating",
    "tensor",
    "shape",
    "type",
    "float",
    "device",
    "bytes",
];

/// Words the readers look for whose case a lower-cased paste lost, beside the markers of
/// messages and of look-alikes (`message::phrases`).
const WORDS: &[&str] = &[
    "Tried to allocate",
    "GPU ",
    "GPU_",
    "PyTorch",
    "Of the allocated memory",
    "Including non-PyTorch memory",
    "NPU ",
    "XPU ",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_HIP_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "CUDA out of memory",
    "HIP out of memory",
    "RuntimeError",
    "See documentation for Memory Management",
    "OOM when allocating tensor",
    "ResourceExhaustedError",
    "RESOURCE_EXHAUSTED",
    "XlaRuntimeError",
    "Traceback",
    "File \"",
    "MPS",
    "KV cache",
    "Killed",
    "Bin (",
    "Chunk at",
    "Stats:",
    "Limit:",
    "InUse:",
    "MaxInUse:",
    "Total size in pool",
    "Allocator (",
];

/// A lower-cased paste with the readers' words in their case again, and sizes' units
/// (`2.00 gib` is `2.00 GiB`).
fn recased(text: &str) -> String {
    let mut phrases: Vec<&str> = super::message::phrases().chain(WORDS.iter().copied()).collect();
    phrases.sort_by_key(|p| std::cmp::Reverse(p.len()));
    let mut out = text.to_string();
    for p in phrases {
        let lower = p.to_lowercase();
        if lower == p || !out.contains(&lower) {
            continue;
        }
        out = out.replace(&lower, p);
    }
    // `Process 1234 has` (PyTorch's list of processes), not `this process has`.
    let mut listed = String::with_capacity(out.len());
    let mut rest = out.as_str();
    while let Some(i) = rest.find("process ") {
        let digit = rest[i + "process ".len()..].starts_with(|c: char| c.is_ascii_digit());
        listed.push_str(&rest[..i]);
        listed.push_str(if digit { "Process " } else { "process " });
        rest = &rest[i + "process ".len()..];
    }
    listed.push_str(rest);
    units(&listed)
}

/// Sizes' units after a figure in their case: `gib` → `GiB`, `mb` → `MB`, `b` → `B`.
fn units(text: &str) -> String {
    const UNITS: &[&str] = &["GiB", "MiB", "KiB", "TiB", "GB", "MB", "KB", "TB", "B"];
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut after_digit = false;
    while let Some(c) = rest.chars().next() {
        if after_digit {
            let gap = usize::from(rest.starts_with(' '));
            let unit = UNITS.iter().find(|u| {
                let lo = u.to_ascii_lowercase();
                rest[gap..].starts_with(lo.as_str())
                    && rest[gap + lo.len()..].chars().next().is_none_or(|c| !c.is_ascii_alphanumeric())
            });
            if let Some(u) = unit {
                out.push_str(&rest[..gap]);
                out.push_str(u);
                rest = &rest[gap + u.len()..];
                after_digit = false;
                continue;
            }
        }
        out.push(c);
        after_digit = c.is_ascii_digit();
        rest = &rest[c.len_utf8()..];
    }
    out
}

/// A line that ends where none of a framework's does: in a word or a figure, not after a
/// sentence's or a bracket's end, nor on the words messages end with.
fn ends_open(l: &str) -> bool {
    let t = l.trim_end();
    if t.is_empty() {
        return false;
    }
    let last = t.chars().last().unwrap_or(' ');
    // (A colon ends a line that goes on below it: `RuntimeError: cuDNN error:` last is cut.)
    if ".)]}!?\"'>".contains(last) {
        return false;
    }
    // Old PyTorch messages end on the variable's name; a stats row on its figure. (Not a
    // runtime's name, after which its error's words come: `RuntimeError: CUDA`.)
    let word = t.rsplit(' ').next().unwrap_or(t);
    let stat = t.split_whitespace().count() <= 3 && word.chars().all(|c| c.is_ascii_digit());
    let runtime = ["CUDA", "CUBLAS", "CUDNN", "NCCL", "HIP", "ROCM", "XLA", "GPU", "MIOPEN"].contains(&word);
    !(word.len() > 3 && word.chars().all(|c| c.is_ascii_uppercase() || c == '_') && !runtime || stat)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TensorFlow's occupancy bar keeps its pairs of `*` (markdown's bold is no bar's).
    #[test]
    fn an_occupancy_bar_keeps_its_cells() {
        let bar = format!("W bfc_allocator.cc:319] {}x**x", "*".repeat(96));
        assert_eq!(undo(&bar).text.trim_end(), bar);
    }

    #[test]
    fn invisible_characters_full_width_punctuation_and_decimal_commas_are_undone() {
        assert_eq!(
            normalised("Tried to allo\u{200B}cate 2,00 GiB（GPU 0； 10,76 GiB total）"),
            "Tried to allocate 2.00 GiB(GPU 0; 10.76 GiB total)"
        );
        // A thousands separator stays.
        assert_eq!(normalised("allocating 25,600,000 bytes, 1,024 MiB"), "allocating 25,600,000 bytes, 1,024 MiB");
        assert_eq!(normalised("a\nb\n").lines().count(), 2);
        // A comma before two digits and a multi-byte character is no figure's (and no panic).
        assert_eq!(normalised("1,23已"), "1,23已");
        // HTML's escapes as their characters, an escaped escape once.
        assert_eq!(
            normalised("enforce allocating &lt;= available failed, &quot;x&quot; &amp;lt;"),
            "enforce allocating <= available failed, \"x\" &lt;"
        );
    }

    #[test]
    fn wrapped_lines_are_joined_as_they_were() {
        let line = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total \
                    capacity of 23.65 GiB of which 1.12 GiB is free. Of the allocated memory 20.10 GiB is allocated \
                    by PyTorch, and 1.23 GiB is reserved by PyTorch but unallocated.";
        let text = format!("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n{line}\n");
        for width in [60, 80] {
            let mut wrapped = String::new();
            for l in text.lines() {
                let mut rest = l;
                while rest.len() > width {
                    let cut = rest[..=width].rfind(' ').unwrap();
                    wrapped.push_str(&rest[..cut]);
                    wrapped.push('\n');
                    rest = &rest[cut + 1..];
                }
                wrapped.push_str(rest);
                wrapped.push('\n');
            }
            let p = undo(&wrapped);
            assert!(p.text.contains(line), "{width}: {}", p.text);
            assert_eq!(p.line(3), 3);
        }
        // A terminal's column, mid-word.
        let cols: String = line.as_bytes().chunks(70).map(|c| format!("{}\n", String::from_utf8_lossy(c))).collect();
        let p = undo(&cols);
        assert_eq!(p.text.trim_end(), line);
        assert!(matches!(p.undone[..], [PasteDamage::Wrapped { mid_word: true, .. }]));
    }

    #[test]
    fn lists_and_logs_are_not_joined() {
        let opencv = "opencv/modules/core/src/cuda_info.cpp:74: error: (-217:Gpu API call) out of memory in function 'setDevice'\n\
                      opencv/modules/core/src/cuda_host_mem.cpp:95: error: (-217:Gpu API call) out of memory in function 'allocate'\n";
        assert_eq!(undo(opencv).text, opencv);
        let bins = "Bin (256): \tTotal Chunks: 12, Chunks in use: 12. 3.0KiB allocated for chunks. 3.0KiB in use.\n\
                    Bin (512): \tTotal Chunks: 1, Chunks in use: 1. 512B allocated for chunks. 512B in use in bin.\n\
                    Bin (1024): \tTotal Chunks: 3, Chunks in use: 2. 3.2KiB allocated for chunks. 2.0KiB in use.\n";
        assert_eq!(undo(bins).text, bins);
        assert!(undo(bins).undone.is_empty());
        // TF's request line, as long as the log's longest, then its own advice.
        let tf = "W tensorflow/core/common_runtime/bfc_allocator.cc:479] Allocator (mklcpu) ran out of memory trying to \
                  allocate 64.00MiB (rounded to 67108864)requested by op sequential_1/lstm_1/while/MatMul_1\n\
                  If the cause is memory fragmentation maybe the environment variable 'TF_GPU_ALLOCATOR=cuda_malloc_async' \
                  will improve the situation.\n";
        assert_eq!(undo(tf).text, tf);
    }

    #[test]
    fn prefixes_quotes_and_markdown_are_taken_off() {
        let p = undo(
            "> **[rank0]: torch.OutOfMemoryError: CUDA out of memory.**\n\
             (VllmWorker rank=0 pid=4242) 2026-11-27 10:00:00,123 - ERROR - `Tried to allocate 2.00 GiB`\n\
             trainer-1  | INFO 11-27 10:00:00 [core.py:700] done\n\
             2025-01-05 09:48:28.754302: I tensorflow/core/bfc_allocator.cc:1049] Stats:\n",
        );
        let lines: Vec<&str> = p.text.lines().collect();
        assert_eq!(lines[0], "torch.OutOfMemoryError: CUDA out of memory.");
        assert_eq!(lines[1], "Tried to allocate 2.00 GiB");
        assert_eq!(lines[2], "done");
        assert!(lines[3].starts_with("2025-01-05 09:48:28.754302: I tensorflow"), "TF's own prefix stays");
        assert_eq!(p.undone, [PasteDamage::Quoted, PasteDamage::Markdown, PasteDamage::Prefixed]);
    }

    #[test]
    fn a_message_retyped_without_its_spaces_gets_them_back() {
        let p = undo(
            "cuda out of memory, tried to allocate 50MiB(GPU 0; 1.96GiB totalcapacity;1.33GiB already allocated)\n",
        );
        assert!(
            p.text.contains("Tried to allocate 50MiB (GPU 0; 1.96GiB total capacity; 1.33GiB already"),
            "{}",
            p.text
        );
        assert!(p.undone.contains(&PasteDamage::Retyped), "{:?}", p.undone);
        // A message as PyTorch prints it is left alone.
        let printed = "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 7.93 GiB total capacity; 1.00 GiB already allocated)\n";
        assert!(!undo(printed).undone.contains(&PasteDamage::Retyped));
        // Nor a traceback's code line above it.
        let code = format!("    out = model(x);loss = crit(out, y)\n{printed}");
        assert!(!undo(&code).undone.contains(&PasteDamage::Retyped));
    }

    #[test]
    fn a_retyped_message_is_read_as_the_frameworks() {
        let p = undo("RuntimeError: CUDA out of the memory. Tried to allocate 360.00 MiB\n");
        assert_eq!(p.text, "RuntimeError: CUDA out of memory. Tried to allocate 360.00 MiB\n");
        assert_eq!(p.undone, [PasteDamage::Retyped]);
    }

    #[test]
    fn a_lower_cased_paste_gets_its_words_back() {
        let p = undo("runtimeerror: cuda out of memory. tried to allocate 20.00 mib (gpu 0; 7.93 gib total capacity)");
        assert!(
            p.text.contains("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.93 GiB total"),
            "{}",
            p.text
        );
        assert_eq!(p.undone, [PasteDamage::LowerCased]);
        // Only the message's words lower-cased, by hand.
        let p = undo("RuntimeError: cuda out of memory. tried to allocate 2.00 gib (gpu 0; 7.93 gib total capacity)");
        assert!(p.text.contains("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0"), "{}", p.text);
        // A text with no message stays as it is.
        assert_eq!(undo("Epoch 1: loss 0.25, 3.2 gb/s\n").text, "Epoch 1: loss 0.25, 3.2 gb/s\n");
    }

    #[test]
    fn a_last_line_cut_short_is_told() {
        assert!(undo("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capac").cut);
        assert!(!undo("CUDA out of memory. Tried to allocate 2.00 GiB.").cut);
        assert!(!undo("... try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF").cut);
    }
}
