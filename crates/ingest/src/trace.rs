//! Allocation traces: JSON Lines, one event per line.
//!
//! ```text
//! {"ev":"alloc","id":"t1","bytes":4096,"op":"conv1/Conv2D","shape":[1,32,32,1],"dtype":"float32","step":3,"t":12.5}
//! {"ev":"free","id":"t1"}
//! {"ev":"step","step":3}
//! ```
//!
//! `shape`, `dtype`, `step`, `t` (microseconds), `kind` (weight, optimizer, input, activation,
//! gradient, temporary) and `outside` (taken straight from the device, outside the allocator's
//! pool, as cuDNN does) are optional; unknown fields are ignored;
//! blank lines are skipped. An id is live from its `alloc` to its `free`. The whole file is
//! checked before anything is replayed, so a bad trace is refused the same way whatever the
//! memory limit: a malformed line, an unknown event, a negative size, an `alloc` of an id
//! that is live, or a `free` of one that is not, all name the line.

use oomscope_core::record::{Kind, Meta};
use oomscope_format::InputError;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

/// A trace that cannot be replayed, and where.
pub use oomscope_core::trace::{Builder, Event, Trace};

/// A JSON number that should be a byte count, kept as given until it is checked.
enum Number {
    Unsigned(u64),
    Negative(i64),
    Fraction(f64),
}

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Number, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Number;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number")
            }
            fn visit_u64<E>(self, v: u64) -> Result<Number, E> {
                Ok(Number::Unsigned(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Number, E> {
                Ok(if v < 0 { Number::Negative(v) } else { Number::Unsigned(v as u64) })
            }
            fn visit_f64<E>(self, v: f64) -> Result<Number, E> {
                Ok(Number::Fraction(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// An id: a string, or an integer taken as its decimal text.
struct Id<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Id<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Id<'a>, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Id<'de>, E> {
                Ok(Id(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Id<'de>, E> {
                Ok(Id(Cow::Owned(v.to_string())))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Id<'de>, E> {
                Ok(Id(Cow::Owned(v.to_string())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Id<'de>, E> {
                Ok(Id(Cow::Owned(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Id<'de>, E> {
                Err(E::custom(format_args!("id {v} is not a string or an integer")))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow)]
    ev: Option<Cow<'a, str>>,
    #[serde(borrow)]
    id: Option<Id<'a>>,
    bytes: Option<Number>,
    #[serde(borrow)]
    op: Option<Cow<'a, str>>,
    shape: Option<Vec<i64>>,
    #[serde(borrow)]
    dtype: Option<Cow<'a, str>>,
    step: Option<i64>,
    t: Option<f64>,
    #[serde(borrow)]
    kind: Option<Cow<'a, str>>,
    outside: Option<bool>,
    address: Option<Number>,
}

/// Parses and checks a trace file.
pub fn read(path: &Path) -> Result<Trace, InputError> {
    let file = std::fs::File::open(path).map_err(|e| InputError {
        path: path.into(),
        line: 0,
        message: format!("cannot open the trace: {e}"),
    })?;
    parse(path, BufReader::with_capacity(1 << 20, file), |_| {})
}

/// Parses and checks a trace from any reader; `path` names it in errors; `progress` is
/// called with the bytes read so far, now and then.
pub fn parse(path: &Path, mut input: impl BufRead, mut progress: impl FnMut(u64)) -> Result<Trace, InputError> {
    let mut p = Parser { path, trace: Trace::default(), live: LiveIds::default(), step: -1, t_ns: 0 };
    let mut buf = Vec::with_capacity(256);
    let (mut line_no, mut read_bytes) = (0usize, 0u64);
    loop {
        buf.clear();
        let n = input
            .read_until(b'\n', &mut buf)
            .map_err(|e| p.error(line_no + 1, format!("cannot read the trace: {e}")))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        read_bytes += n as u64;
        if line_no % 65_536 == 0 {
            progress(read_bytes);
        }
        p.line(line_no, &buf)?;
    }
    Ok(p.trace)
}

/// Parses a whole trace held in memory.
pub fn parse_str(path: &Path, text: &str) -> Result<Trace, InputError> {
    parse(path, io::Cursor::new(text.as_bytes()), |_| {})
}

struct Parser<'p> {
    path: &'p Path,
    trace: Trace,
    live: LiveIds,
    step: i64,
    t_ns: u64,
}

/// The ids that are live, each with the index of its `alloc` event (which holds the
/// allocation's number and whether it is outside the pool, and whose line is in
/// [`Trace::lines`]). A trace whose tensors are never freed keeps every id to the end, so
/// this table is most of what reading costs beyond the events themselves: it is kept
/// compact.
///
/// Most traces number their tensors (`17`, `"t17"`, `"tensor-17"`). Such an id is split
/// into its prefix and its number, one-to-one (the number is taken without leading zeros:
/// `"t007"` is prefix `"t00"` and 7). The numbers of the first prefix seen index a vector
/// while they stay within a few times the allocations so far (4 bytes an id, where an
/// owned string cost about 100); other numbered ids are kept as (prefix, number), other ids
/// as their text. The maps hash with SipHash: ids come from the file, and a crafted file
/// must not make them collide.
#[derive(Debug, Default)]
struct LiveIds {
    dense_prefix: Option<Box<str>>,
    /// Slot n: 1 + the event index of the alloc of id (dense prefix, n); 0 when not live.
    dense: Vec<u32>,
    numbered: HashMap<(u32, u64), usize>,
    /// Prefixes of the ids in `numbered`: their number and how many live ids use them, so
    /// a trace of ever new prefixes does not keep every prefix it saw.
    prefixes: HashMap<Box<str>, (u32, u32)>,
    /// Prefix numbers given back, for reuse.
    spare: Vec<u32>,
    next_prefix: u32,
    text: HashMap<Box<str>, usize>,
}

/// `"t17"` → `("t", 17)`; `None` when the id does not end in a number that fits 64 bits.
fn split_number(id: &str) -> Option<(&str, u64)> {
    let digits = id.len() - id.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    let run = &id[id.len() - digits..];
    // Leading zeros belong to the prefix, so the number's decimal text gives the id back.
    let number = match run.trim_start_matches('0') {
        "" => &run[run.len() - 1..],
        n => n,
    };
    let n = number.parse().ok()?;
    Some((&id[..id.len() - number.len()], n))
}

impl LiveIds {
    /// The slot of `(prefix, n)` in the vector, if it has one now.
    fn dense_slot(&self, prefix: &str, n: u64) -> Option<usize> {
        let slot = usize::try_from(n).ok()?;
        (self.dense_prefix.as_deref() == Some(prefix) && slot < self.dense.len()).then_some(slot)
    }

    fn get(&self, id: &str) -> Option<usize> {
        match split_number(id) {
            Some((prefix, n)) => {
                if let Some(slot) = self.dense_slot(prefix, n)
                    && self.dense[slot] != 0
                {
                    return Some(self.dense[slot] as usize - 1);
                }
                let &(p, _) = self.prefixes.get(prefix)?;
                self.numbered.get(&(p, n)).copied()
            }
            None => self.text.get(id).copied(),
        }
    }

    /// Adds an id that is not live, allocated by event `event`; `allocs` allocations were
    /// made before it (what bounds the vector).
    fn insert(&mut self, id: &str, event: usize, allocs: u32) {
        let Some((prefix, n)) = split_number(id) else {
            self.text.insert(id.into(), event);
            return;
        };
        if self.dense_prefix.is_none() {
            self.dense_prefix = Some(prefix.into());
        }
        let bound = (allocs as usize).saturating_mul(4).max(1 << 16);
        if let (Some(slot), Ok(value)) = (usize::try_from(n).ok(), u32::try_from(event + 1))
            && self.dense_prefix.as_deref() == Some(prefix)
            && slot < bound
        {
            if slot >= self.dense.len() {
                self.dense.resize(slot + 1, 0);
            }
            self.dense[slot] = value;
            return;
        }
        let p = match self.prefixes.get_mut(prefix) {
            Some((p, uses)) => {
                *uses += 1;
                *p
            }
            None => {
                let p = self.spare.pop().unwrap_or_else(|| {
                    self.next_prefix += 1;
                    self.next_prefix - 1
                });
                self.prefixes.insert(prefix.into(), (p, 1));
                p
            }
        };
        self.numbered.insert((p, n), event);
    }

    fn remove(&mut self, id: &str) -> Option<usize> {
        let Some((prefix, n)) = split_number(id) else {
            return self.text.remove(id);
        };
        if let Some(slot) = self.dense_slot(prefix, n)
            && self.dense[slot] != 0
        {
            return Some(std::mem::take(&mut self.dense[slot]) as usize - 1);
        }
        let (p, uses) = self.prefixes.get_mut(prefix)?;
        let event = self.numbered.remove(&(*p, n))?;
        *uses -= 1;
        if *uses == 0 {
            let p = *p;
            self.prefixes.remove(prefix);
            self.spare.push(p);
        }
        Some(event)
    }
}

impl Parser<'_> {
    fn error(&self, line: usize, message: String) -> InputError {
        InputError { path: self.path.into(), line, message }
    }

    fn line(&mut self, line: usize, bytes: &[u8]) -> Result<(), InputError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let content = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let content = content.strip_suffix(b"\r").unwrap_or(content);
        let raw: RawEvent<'_> = serde_json::from_slice(content).map_err(|e| {
            let what = match e.classify() {
                serde_json::error::Category::Data => "not a trace event",
                serde_json::error::Category::Eof => "the line ends inside a JSON value (truncated?)",
                _ => "malformed JSON",
            };
            let msg = e.to_string();
            let msg = msg.rfind(" at line ").map_or(msg.as_str(), |i| &msg[..i]).to_string();
            self.error(line, format!("{what} at column {}: {msg}", e.column()))
        })?;
        if let Some(t) = raw.t {
            if !(t.is_finite() && t >= 0.0) {
                return Err(self.error(line, format!("\"t\" is {t}; it must be a non-negative time in microseconds")));
            }
            self.t_ns = (t * 1000.0) as u64;
        }
        let t_ns = self.t_ns;
        let ev = raw.ev.as_deref().ok_or_else(|| {
            self.error(line, "no \"ev\" field; expected \"ev\": \"alloc\", \"free\", \"step\" or \"region\"".into())
        })?;
        let event = match ev {
            "alloc" => {
                let id = raw.id.ok_or_else(|| self.error(line, "alloc without an \"id\"".into()))?.0;
                let bytes = match raw.bytes {
                    Some(Number::Unsigned(b)) => b,
                    Some(Number::Negative(b)) => {
                        return Err(
                            self.error(line, format!("\"bytes\" is {b}; a size must be a non-negative integer"))
                        );
                    }
                    Some(Number::Fraction(b)) => {
                        return Err(
                            self.error(line, format!("\"bytes\" is {b}; a size must be a non-negative integer"))
                        );
                    }
                    None => return Err(self.error(line, "alloc without \"bytes\"".into())),
                };
                let alloc = self.trace.allocs;
                if let Some(at) = self.live.get(&id) {
                    let at = self.trace.lines.get(at).copied().unwrap_or(0);
                    return Err(
                        self.error(line, format!("id {id:?} is already live (allocated on line {at} and not freed)"))
                    );
                }
                let kind = match raw.kind.as_deref() {
                    None => Kind::Unknown,
                    Some(k) => Kind::parse(k).ok_or_else(|| {
                        self.error(
                            line,
                            format!(
                                "unknown kind {k:?}; expected one of weight, optimizer, input, activation, gradient, temporary, backward, collective"
                            ),
                        )
                    })?,
                };
                let outside = raw.outside.unwrap_or(false);
                self.live.insert(&id, self.trace.events.len(), alloc);
                self.trace.allocs = alloc
                    .checked_add(1)
                    .ok_or_else(|| self.error(line, "more than 4294967295 allocations in one trace".into()))?;
                let names = &mut self.trace.names;
                let meta = Meta {
                    op: raw.op.as_deref().map_or(0, |o| names.ops.intern(o)),
                    shape: raw.shape.as_deref().map_or(0, |s| names.shapes.intern(s)),
                    dtype: raw.dtype.as_deref().map_or(0, |d| names.dtypes.intern(d)),
                    stack: 0,
                    step: raw.step.unwrap_or(self.step),
                    t_ns,
                    kind,
                };
                Event::Alloc { alloc, bytes, meta, outside }
            }
            "free" => {
                let id = raw.id.ok_or_else(|| self.error(line, "free without an \"id\"".into()))?.0;
                let at = self.live.remove(&id).ok_or_else(|| {
                    self.error(
                        line,
                        format!("free of id {id:?}, which is not live (never allocated, or already freed)"),
                    )
                })?;
                let Some(&Event::Alloc { alloc, outside, .. }) = self.trace.events.get(at) else {
                    unreachable!("a live id refers to its alloc event");
                };
                Event::Free { alloc, t_ns, outside }
            }
            "step" => {
                let step = raw.step.ok_or_else(|| self.error(line, "step event without \"step\"".into()))?;
                self.step = step;
                Event::Step { step, t_ns }
            }
            "region" => {
                let (Some(Number::Unsigned(address)), Some(Number::Unsigned(bytes))) = (raw.address, raw.bytes) else {
                    return Err(self
                        .error(line, "region event without a non-negative integer \"address\" and \"bytes\"".into()));
                };
                self.trace.regions.push((address, bytes));
                return Ok(());
            }
            other => {
                return Err(self.error(
                    line,
                    format!("unknown event {other:?}; expected \"alloc\", \"free\", \"step\" or \"region\""),
                ));
            }
        };
        self.trace.events.push(event);
        self.trace.lines.push(u32::try_from(line).unwrap_or(u32::MAX));
        Ok(())
    }
}

/// One line of the file form, fields in the documented order.
#[derive(serde::Serialize)]
struct Line<'a> {
    ev: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    op: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    shape: Option<&'a [i64]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dtype: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<i64>,
    /// Microseconds, written when the clock moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    t: Option<f64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    outside: bool,
}

/// The trace as JSON Lines, the form [`parse`] reads: allocation `n` has id `n + 1`; an
/// allocation's step is written only where it is not the current step, a time only where
/// the clock moved.
pub fn to_jsonl(t: &Trace) -> String {
    let mut out = String::new();
    let (mut step, mut clock) = (-1i64, 0u64);
    let mut moved = |t_ns: u64| {
        let m = (t_ns != clock).then_some(t_ns as f64 / 1000.0);
        clock = t_ns;
        m
    };
    for &(address, bytes) in &t.regions {
        out.push_str(&format!("{{\"ev\":\"region\",\"address\":{address},\"bytes\":{bytes}}}\n"));
    }
    for e in &t.events {
        let line = match *e {
            Event::Alloc { alloc, bytes, ref meta, outside } => Line {
                ev: "alloc",
                id: Some(u64::from(alloc) + 1),
                bytes: Some(bytes),
                op: t.names.ops.get(meta.op).map(String::as_str),
                shape: t.names.shapes.get(meta.shape).map(Vec::as_slice),
                dtype: t.names.dtypes.get(meta.dtype).map(String::as_str),
                kind: (meta.kind != Kind::Unknown).then(|| meta.kind.name()),
                step: (meta.step != step).then_some(meta.step),
                t: moved(meta.t_ns),
                outside,
            },
            Event::Free { alloc, t_ns, .. } => {
                Line { id: Some(u64::from(alloc) + 1), t: moved(t_ns), ..Line::new("free") }
            }
            Event::Step { step: s, t_ns } => {
                step = s;
                Line { step: Some(s), t: moved(t_ns), ..Line::new("step") }
            }
        };
        // Plain data with string keys: serializing cannot fail.
        if let Ok(text) = serde_json::to_string(&line) {
            out.push_str(&text);
            out.push('\n');
        }
    }
    out
}

impl Line<'_> {
    fn new(ev: &'static str) -> Self {
        Line {
            ev,
            id: None,
            bytes: None,
            op: None,
            shape: None,
            dtype: None,
            kind: None,
            step: None,
            t: None,
            outside: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Trace, String> {
        parse_str(Path::new("t.jsonl"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_the_contract_events() {
        let t = parse(
            "{\"ev\":\"step\",\"step\":3}\n\n\
             {\"ev\":\"alloc\",\"id\":\"t1\",\"bytes\":4096,\"op\":\"conv1/Conv2D\",\"shape\":[2,3],\"dtype\":\"float32\",\"extra\":{\"x\":1}}\n\
             {\"ev\":\"free\",\"id\":\"t1\",\"t\":2.5}\n\
             {\"ev\":\"alloc\",\"id\":\"t1\",\"bytes\":0,\"step\":9}\n",
        )
        .unwrap();
        assert_eq!(t.events.len(), 4);
        assert_eq!(t.lines, vec![1, 3, 4, 5]);
        match t.events[1] {
            Event::Alloc { alloc: 0, bytes: 4096, meta, outside: false } => {
                assert_eq!(t.names.op(meta.op), "conv1/Conv2D");
                assert_eq!(meta.step, 3, "the step of the last step event");
                assert_eq!(t.names.shapes.get(meta.shape), Some(&vec![2, 3]));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(t.events[2], Event::Free { alloc: 0, t_ns: 2500, outside: false });
        assert!(
            matches!(t.events[3], Event::Alloc { alloc: 1, bytes: 0, meta, .. } if meta.step == 9 && meta.t_ns == 2500)
        );
    }

    #[test]
    fn refuses_bad_lines_naming_them() {
        let cases = [
            ("{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":1}\n{oops", "t.jsonl:2: malformed JSON at column 2"),
            (
                "{\"ev\":\"alloc\",\"id\":\"a\",\"by",
                "t.jsonl:1: the line ends inside a JSON value (truncated?) at column 26",
            ),
            ("{\"ev\":\"allocate\",\"id\":\"a\",\"bytes\":1}", "t.jsonl:1: unknown event \"allocate\""),
            ("{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":-5}", "t.jsonl:1: \"bytes\" is -5"),
            ("{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":1.5}", "t.jsonl:1: \"bytes\" is 1.5"),
            (
                "{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":1}\n{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":1}",
                "t.jsonl:2: id \"a\" is already live (allocated on line 1",
            ),
            ("{\"ev\":\"free\",\"id\":\"zz\"}", "t.jsonl:1: free of id \"zz\", which is not live"),
            ("{\"ev\":\"alloc\",\"bytes\":1}", "t.jsonl:1: alloc without an \"id\""),
            ("{\"ev\":\"alloc\",\"id\":\"a\"}", "t.jsonl:1: alloc without \"bytes\""),
            ("{\"id\":\"a\"}", "t.jsonl:1: no \"ev\" field"),
            ("[1,2]", "t.jsonl:1: not a trace event"),
            ("{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":\"lots\"}", "t.jsonl:1: not a trace event"),
            ("{\"ev\":\"step\"}", "t.jsonl:1: step event without \"step\""),
            ("{\"ev\":\"step\",\"step\":1,\"t\":-1}", "t.jsonl:1: \"t\" is -1"),
            ("{\"ev\":\"alloc\",\"id\":\"a\",\"bytes\":1,\"kind\":\"weights\"}", "t.jsonl:1: unknown kind \"weights\""),
            ("\u{0}\u{1}binary", "t.jsonl:1: malformed JSON"),
        ];
        for (text, expected) in cases {
            let err = parse(text).expect_err(text);
            assert!(err.starts_with(expected), "{text:?}\n  gave {err}\n  expected {expected}");
        }
    }

    #[test]
    fn kind_and_outside_are_carried_to_the_free() {
        let t = parse("{\"ev\":\"alloc\",\"id\":\"h\",\"bytes\":9,\"kind\":\"temporary\",\"outside\":true}\n{\"ev\":\"free\",\"id\":\"h\"}").unwrap();
        assert!(matches!(t.events[0], Event::Alloc { outside: true, meta, .. } if meta.kind == Kind::Temporary));
        assert!(matches!(t.events[1], Event::Free { outside: true, .. }));
    }

    #[test]
    fn ids_that_differ_only_in_leading_zeros_or_prefix_are_different_ids() {
        assert_eq!(split_number("t007"), Some(("t00", 7)));
        assert_eq!(split_number("t0"), Some(("t", 0)));
        assert_eq!(split_number("00"), Some(("0", 0)));
        assert_eq!(split_number("x"), None);
        assert_eq!(split_number("t99999999999999999999"), None, "past u64: kept as text");
        let ids =
            ["t7", "t07", "t007", "7", "07", "t", "0", "00", "t99999999999999999999", "s7", "t18446744073709551615"];
        let mut text = String::new();
        for id in ids {
            text.push_str(&format!("{{\"ev\":\"alloc\",\"id\":\"{id}\",\"bytes\":1}}\n"));
        }
        let t = parse(&text).unwrap();
        assert_eq!(t.allocs, ids.len() as u32, "every id is its own");
        // Freed in another order, each frees its own allocation.
        for id in ids.iter().rev() {
            text.push_str(&format!("{{\"ev\":\"free\",\"id\":\"{id}\"}}\n"));
        }
        let t = parse(&text).unwrap();
        let freed: Vec<u32> = t
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Free { alloc, .. } => Some(*alloc),
                _ => None,
            })
            .collect();
        assert_eq!(freed, (0..ids.len() as u32).rev().collect::<Vec<_>>());
    }

    #[test]
    fn live_ids_are_found_wherever_they_are_kept() {
        // Dense numbers, numbers far past the allocations (kept in the map), other prefixes,
        // text: all allocated, re-allocation refused naming the line, all freed once.
        let ids: Vec<String> = (0..2000u64)
            .map(|i| match i % 4 {
                0 => format!("t{i}"),
                1 => format!("t{}", i * 1_000_000_007),
                2 => format!("p{i}/q{i}"),
                _ => format!("name-{i}-x"),
            })
            .collect();
        let mut text = String::new();
        for id in &ids {
            text.push_str(&format!(
                "{{\"ev\":\"alloc\",\"id\":\"{id}\",\"bytes\":1,\"outside\":{}}}\n",
                id.len() % 2 == 0
            ));
        }
        for (k, id) in ids.iter().enumerate() {
            let again = format!("{text}{{\"ev\":\"alloc\",\"id\":\"{id}\",\"bytes\":1}}\n");
            let e = parse(&again).unwrap_err();
            assert!(e.contains(&format!("allocated on line {}", k + 1)), "{e}");
            if k > 20 {
                break;
            }
        }
        for id in ids.iter().rev() {
            text.push_str(&format!("{{\"ev\":\"free\",\"id\":\"{id}\"}}\n"));
        }
        let t = parse(&text).unwrap();
        for (k, id) in ids.iter().rev().enumerate() {
            let expected = (ids.len() - 1 - k) as u32;
            assert_eq!(
                t.events[ids.len() + k],
                Event::Free { alloc: expected, t_ns: 0, outside: id.len() % 2 == 0 },
                "{id}"
            );
        }
        let e = parse(&format!("{text}{{\"ev\":\"free\",\"id\":\"t4\"}}")).unwrap_err();
        assert!(e.contains("free of id \"t4\", which is not live"), "{e}");
    }

    #[test]
    fn numeric_ids_and_reuse_after_free() {
        let t = parse("{\"ev\":\"alloc\",\"id\":7,\"bytes\":1}\n{\"ev\":\"free\",\"id\":\"7\"}\n{\"ev\":\"alloc\",\"id\":7,\"bytes\":1}").unwrap();
        assert_eq!(t.allocs, 2);
    }
}
