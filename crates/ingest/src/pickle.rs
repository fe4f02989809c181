//! Python pickles, as far as memory snapshots need them: reading protocols 0–5 (writing,
//! for `oomscope export`, is `oomscope_report::pickle`).
//!
//! Reading builds plain values. A memo reference shares the memoized value (`Rc`) instead of
//! copying it, so memory stays proportional to the input: a few hundred bytes that reference
//! a list a million times cost a million pointers at most, never a million copies. Class
//! instances and other objects are kept as opaque values: a snapshot holds none that matter.
//!
//! What reading refuses, so that nothing walking a value (dropping it included) can recurse
//! without bound: values nested deeper than [`MAX_DEPTH`], and a list or dict filled after it
//! was put in another value. Python's pickler fills each container before its parent takes
//! it; only a value that contains itself needs otherwise, and a snapshot holds none. With
//! that rule each container's depth is final once it is taken, so depth is counted exactly.

use std::cell::{Cell, Ref, RefCell};
use std::collections::HashMap;
use std::fmt;
use std::rc::Rc;

/// How deep values may nest. Real snapshots nest fewer than 10 levels; dropping a value
/// recurses once per level, so the limit keeps that well inside any thread's stack.
pub const MAX_DEPTH: u32 = 1000;

/// A Python value. Its `Debug` output is bounded (a few hundred characters), whatever the
/// value holds.
#[derive(Clone)]
pub enum Value {
    None,
    Bool(bool),
    /// Integers up to 128 bits (snapshot addresses can exceed 2^63).
    Int(i128),
    /// Integers beyond 128 bits: kept as a marker only.
    BigInt,
    Float(f64),
    Str(Rc<str>),
    Bytes(Rc<[u8]>),
    /// A list, or a set.
    List(Rc<List>),
    Tuple(Rc<Tuple>),
    Dict(Rc<Dict>),
    /// A reference to a class or function (`module.name`).
    Global(Rc<str>),
    /// An instance built by a reduce or newobj: unknown here.
    Object,
}

/// Nesting depth, and whether another value took the container (then it is complete).
#[derive(Clone, Copy, Debug)]
struct Shape {
    /// 1 for an empty container, 1 + the deepest item's depth otherwise.
    depth: u32,
    taken: bool,
}

impl Shape {
    fn new() -> Cell<Shape> {
        Cell::new(Shape { depth: 1, taken: false })
    }
}

/// A list's items.
pub struct List {
    items: RefCell<Vec<Value>>,
    shape: Cell<Shape>,
}

impl List {
    pub fn items(&self) -> Ref<'_, Vec<Value>> {
        self.items.borrow()
    }

    pub fn len(&self) -> usize {
        self.items.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A tuple's items.
pub struct Tuple {
    items: Box<[Value]>,
    depth: u32,
}

impl std::ops::Deref for Tuple {
    type Target = [Value];
    fn deref(&self) -> &[Value] {
        &self.items
    }
}

/// Keys that compare equal to one another: other keys (floats, tuples...) never match one.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Scalar {
    Int(i128),
    Bool(bool),
    None,
}

/// Entries from which a dict looks keys up by hash instead of in order: below, a scan of
/// the few entries is cheaper.
const INDEXED_FROM: usize = 16;

/// Where each key is, for a dict of more than [`INDEXED_FROM`] entries.
#[derive(Default)]
struct Index {
    strs: HashMap<Rc<str>, usize>,
    scalars: HashMap<Scalar, usize>,
}

impl Index {
    fn insert(&mut self, key: &Value, at: usize) {
        match key {
            Value::Str(s) => {
                self.strs.insert(s.clone(), at);
            }
            _ => {
                if let Some(s) = scalar(key) {
                    self.scalars.insert(s, at);
                }
            }
        }
    }

    fn find(&self, key: &Value) -> Option<usize> {
        match key {
            Value::Str(s) => self.strs.get(&**s).copied(),
            _ => scalar(key).and_then(|s| self.scalars.get(&s).copied()),
        }
    }
}

fn scalar(key: &Value) -> Option<Scalar> {
    match key {
        Value::Int(i) => Some(Scalar::Int(*i)),
        Value::Bool(b) => Some(Scalar::Bool(*b)),
        Value::None => Some(Scalar::None),
        _ => None,
    }
}

/// A dict's entries, in insertion order, each key once (a key set again keeps its place and
/// takes the new value, as in Python).
pub struct Dict {
    entries: RefCell<Vec<(Value, Value)>>,
    /// Boxed: most dicts are small and never get one.
    index: RefCell<Option<Box<Index>>>,
    shape: Cell<Shape>,
}

impl Dict {
    fn new() -> Dict {
        Dict { entries: RefCell::new(Vec::new()), index: RefCell::new(None), shape: Shape::new() }
    }

    pub fn entries(&self) -> Ref<'_, Vec<(Value, Value)>> {
        self.entries.borrow()
    }

    pub fn len(&self) -> usize {
        self.entries.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The value of a string key.
    pub fn get(&self, key: &str) -> Option<Value> {
        let entries = self.entries.borrow();
        let at = match &*self.index.borrow() {
            Some(index) => index.strs.get(key).copied(),
            None => entries.iter().position(|(k, _)| k.as_str() == Some(key)),
        };
        at.map(|i| entries[i].1.clone())
    }

    fn set(&self, key: Value, value: Value) {
        let mut entries = self.entries.borrow_mut();
        let mut index = self.index.borrow_mut();
        let at = match &*index {
            Some(ix) => ix.find(&key),
            None => entries.iter().position(|(k, _)| same_key(k, &key)),
        };
        match at {
            Some(i) => entries[i].1 = value,
            None => {
                if let Some(ix) = index.as_mut() {
                    ix.insert(&key, entries.len());
                }
                entries.push((key, value));
                if index.is_none() && entries.len() > INDEXED_FROM {
                    let mut ix = Index::default();
                    for (i, (k, _)) in entries.iter().enumerate() {
                        ix.insert(k, i);
                    }
                    *index = Some(Box::new(ix));
                }
            }
        }
    }
}

impl Value {
    /// The value of a string key in a dict.
    pub fn get(&self, key: &str) -> Option<Value> {
        match self {
            Value::Dict(d) => d.get(key),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_i128(&self) -> Option<i128> {
        match self {
            Value::Int(i) => Some(*i),
            Value::Bool(b) => Some(*b as i128),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            Value::Int(i) => Some(*i != 0),
            _ => None,
        }
    }

    /// A non-negative integer that fits 64 bits.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i128().and_then(|i| u64::try_from(i).ok())
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Value::Float(f) => Some(*f),
            Value::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    /// The items of a list or a tuple (a cheap copy of shared references).
    pub fn items(&self) -> Option<Vec<Value>> {
        match self {
            Value::List(l) => Some(l.items().clone()),
            Value::Tuple(t) => Some(t.to_vec()),
            _ => None,
        }
    }

    /// Item `i` of a list or a tuple, without copying the others.
    pub fn item(&self, i: usize) -> Option<Value> {
        match self {
            Value::List(l) => l.items().get(i).cloned(),
            Value::Tuple(t) => t.get(i).cloned(),
            _ => None,
        }
    }

    pub fn is_dict(&self) -> bool {
        matches!(self, Value::Dict(_))
    }

    /// The number of items of a list or a tuple, without copying them.
    pub fn item_count(&self) -> Option<usize> {
        match self {
            Value::List(l) => Some(l.len()),
            Value::Tuple(t) => Some(t.len()),
            _ => None,
        }
    }

    /// Which shared value this is: equal for the same list, tuple, dict or string reached
    /// twice (through the memo), so that what reads it once can skip it the next time. Only
    /// meaningful while the value is alive; `None` for plain values.
    pub fn identity(&self) -> Option<usize> {
        match self {
            Value::List(l) => Some(Rc::as_ptr(l) as *const () as usize),
            Value::Tuple(t) => Some(Rc::as_ptr(t) as *const () as usize),
            Value::Dict(d) => Some(Rc::as_ptr(d) as *const () as usize),
            Value::Str(s) => Some(Rc::as_ptr(s) as *const () as usize),
            _ => None,
        }
    }

    /// How deep containers nest in the value (0 for a plain value).
    fn depth(&self) -> u32 {
        match self {
            Value::List(l) => l.shape.get().depth,
            Value::Dict(d) => d.shape.get().depth,
            Value::Tuple(t) => t.depth,
            _ => 0,
        }
    }

    /// A Python-like text of the value, cut at about `max` characters (`…`). Iterative and
    /// bounded: a value of any depth or size renders in `max` steps or so.
    pub fn repr(&self, max: usize) -> String {
        enum Work {
            Value(Value),
            Text(&'static str),
        }
        let mut out = String::new();
        let mut todo = vec![Work::Value(self.clone())];
        while let Some(w) = todo.pop() {
            if out.len() >= max {
                out.push('…');
                break;
            }
            let v = match w {
                Work::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                Work::Value(v) => v,
            };
            // Items go on the stack last first; no more than can still be shown.
            let room = max.saturating_sub(out.len()) / 2 + 1;
            match &v {
                Value::None => out.push_str("None"),
                Value::Bool(true) => out.push_str("True"),
                Value::Bool(false) => out.push_str("False"),
                Value::Int(i) => out.push_str(&i.to_string()),
                Value::BigInt => out.push_str("<big int>"),
                Value::Float(f) => out.push_str(&format!("{f:?}")),
                Value::Str(s) => {
                    let cut: String = s.chars().take(max.saturating_sub(out.len()) + 1).collect();
                    out.push_str(&format!("{cut:?}"));
                }
                Value::Bytes(b) => out.push_str(&format!("<{} bytes>", b.len())),
                Value::Global(g) => out.push_str(&format!("<{}>", g.chars().take(max).collect::<String>())),
                Value::Object => out.push_str("<object>"),
                Value::List(_) | Value::Tuple(_) => {
                    let (open, close, total, items): (_, _, _, Vec<Value>) = match &v {
                        Value::List(l) => ("[", "]", l.len(), l.items().iter().take(room).cloned().collect()),
                        Value::Tuple(t) => ("(", ")", t.len(), t.iter().take(room).cloned().collect()),
                        _ => unreachable!("matched as a list or a tuple"),
                    };
                    out.push_str(open);
                    todo.push(Work::Text(close));
                    if total > items.len() {
                        todo.push(Work::Text(", …"));
                    }
                    for (i, item) in items.into_iter().enumerate().rev() {
                        todo.push(Work::Value(item));
                        if i > 0 {
                            todo.push(Work::Text(", "));
                        }
                    }
                }
                Value::Dict(d) => {
                    out.push('{');
                    todo.push(Work::Text("}"));
                    if d.len() > room {
                        todo.push(Work::Text(", …"));
                    }
                    let entries: Vec<(Value, Value)> = d.entries().iter().take(room).cloned().collect();
                    for (i, (k, val)) in entries.into_iter().enumerate().rev() {
                        todo.push(Work::Value(val));
                        todo.push(Work::Text(": "));
                        todo.push(Work::Value(k));
                        if i > 0 {
                            todo.push(Work::Text(", "));
                        }
                    }
                }
            }
        }
        out
    }
}

/// Characters of a value's `Debug` output.
const DEBUG_CHARS: usize = 400;

impl fmt::Debug for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repr(DEBUG_CHARS))
    }
}

impl fmt::Debug for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<list of {}>", self.len())
    }
}

impl fmt::Debug for Tuple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<tuple of {}>", self.len())
    }
}

impl fmt::Debug for Dict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<dict of {}>", self.len())
    }
}

/// Why a pickle could not be read, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PickleError {
    pub offset: usize,
    pub message: String,
}

impl fmt::Display for PickleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "byte {}: {}", self.offset, self.message)
    }
}

impl std::error::Error for PickleError {}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

/// Reads one pickled value.
pub fn read(data: &[u8]) -> Result<Value, PickleError> {
    let mut r = Reader { data, at: 0, stack: Vec::new(), marks: Vec::new(), memo: HashMap::new() };
    r.run()
}

impl<'a> Reader<'a> {
    fn err<T>(&self, message: impl Into<String>) -> Result<T, PickleError> {
        Err(PickleError { offset: self.at, message: message.into() })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        match self.at.checked_add(n).filter(|&end| end <= self.data.len()) {
            Some(end) => {
                let s = &self.data[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => self.err(format!("the pickle ends inside an argument of {n} bytes (truncated file?)")),
        }
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn le(&mut self, n: usize) -> Result<u64, PickleError> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | x as u64))
    }

    fn len(&mut self, n: usize) -> Result<usize, PickleError> {
        let v = self.le(n)?;
        // A length beyond the input cannot be honest: refuse before trying to read it.
        match usize::try_from(v) {
            Ok(l) if l <= self.data.len() - self.at => Ok(l),
            _ => self.err(format!("a length of {v} bytes runs past the end of the pickle")),
        }
    }

    fn line(&mut self) -> Result<&'a str, PickleError> {
        let rest = &self.data[self.at..];
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            return self.err("the pickle ends inside a text argument");
        };
        self.at += end + 1;
        std::str::from_utf8(&rest[..end]).or_else(|_| self.err("a text argument is not UTF-8"))
    }

    fn pop(&mut self) -> Result<Value, PickleError> {
        match self.stack.pop() {
            Some(v) => Ok(v),
            None => self.err("an opcode needs a value and the stack is empty"),
        }
    }

    fn top(&self) -> Result<&Value, PickleError> {
        match self.stack.last() {
            Some(v) => Ok(v),
            None => self.err("an opcode needs a value and the stack is empty"),
        }
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let Some(mark) = self.marks.pop() else {
            return self.err("an opcode needs a mark and there is none");
        };
        if mark > self.stack.len() {
            return self.err("the stack is shorter than its mark");
        }
        Ok(self.stack.split_off(mark))
    }

    fn int_text(&self, text: &str) -> Result<Value, PickleError> {
        let t = text.trim_end_matches('L');
        match t {
            "00" => Ok(Value::Bool(false)),
            "01" => Ok(Value::Bool(true)),
            _ => match t.parse::<i128>() {
                Ok(i) => Ok(Value::Int(i)),
                Err(_) if !t.is_empty() && t.trim_start_matches('-').bytes().all(|b| b.is_ascii_digit()) => {
                    Ok(Value::BigInt)
                }
                Err(_) => self.err(format!("{text:?} is not an integer")),
            },
        }
    }

    fn long(&mut self, n: usize) -> Result<Value, PickleError> {
        let bytes = self.take(n)?;
        if n == 0 {
            return Ok(Value::Int(0));
        }
        if n > 16 {
            return Ok(Value::BigInt);
        }
        let mut buf = if bytes[n - 1] & 0x80 != 0 { [0xffu8; 16] } else { [0u8; 16] };
        buf[..n].copy_from_slice(bytes);
        Ok(Value::Int(i128::from_le_bytes(buf)))
    }

    fn string(&self, bytes: &[u8]) -> Result<Value, PickleError> {
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(Value::Str(Rc::from(s))),
            Err(_) => self.err("a string is not UTF-8"),
        }
    }

    /// Marks `items` as taken by a container and returns that container's depth: taken,
    /// a list or dict may not be filled any more (see the module's notes).
    fn take_in(&self, items: &[Value]) -> Result<u32, PickleError> {
        let mut deepest = 0;
        for item in items {
            let shape = match item {
                Value::List(l) => Some(&l.shape),
                Value::Dict(d) => Some(&d.shape),
                _ => None,
            };
            if let Some(shape) = shape {
                shape.set(Shape { taken: true, ..shape.get() });
            }
            deepest = deepest.max(item.depth());
        }
        if deepest >= MAX_DEPTH {
            return self
                .err(format!("values nested deeper than {MAX_DEPTH} levels: a memory snapshot nests fewer than 10"));
        }
        Ok(deepest + 1)
    }

    /// Makes room in a container for items of `depth` (from [`Reader::take_in`]).
    fn fill(&self, shape: &Cell<Shape>, depth: u32) -> Result<(), PickleError> {
        let s = shape.get();
        if s.taken {
            return self.err(
                "a list or dict is filled after it was put in another value, which is how a value is put inside itself: a memory snapshot holds no such value",
            );
        }
        shape.set(Shape { depth: s.depth.max(depth), ..s });
        Ok(())
    }

    fn new_list(&self, items: Vec<Value>) -> Result<Value, PickleError> {
        let depth = self.take_in(&items)?;
        Ok(Value::List(Rc::new(List { items: RefCell::new(items), shape: Cell::new(Shape { depth, taken: false }) })))
    }

    fn new_tuple(&self, items: Vec<Value>) -> Result<Value, PickleError> {
        let depth = self.take_in(&items)?;
        Ok(Value::Tuple(Rc::new(Tuple { items: items.into_boxed_slice(), depth })))
    }

    fn set_items(&self, dict: &Value, items: Vec<Value>) -> Result<(), PickleError> {
        let Value::Dict(d) = dict else {
            return self.err("items set on something that is not a dict");
        };
        if !items.len().is_multiple_of(2) {
            return self.err("a dict gets a key without a value");
        }
        let depth = self.take_in(&items)?;
        self.fill(&d.shape, depth)?;
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            d.set(k, v);
        }
        Ok(())
    }

    fn extend(&self, list: &Value, items: Vec<Value>) -> Result<(), PickleError> {
        match list {
            // A set's items too: kept, unordered semantics aside.
            Value::List(l) => {
                let depth = self.take_in(&items)?;
                self.fill(&l.shape, depth)?;
                l.items.borrow_mut().extend(items);
                Ok(())
            }
            _ => self.err("items appended to something that is not a list"),
        }
    }

    /// What a few standard callables build; anything else is opaque.
    fn reduce(&self, callable: &Value, args: &Value) -> Result<Value, PickleError> {
        let Value::Global(name) = callable else {
            return Ok(Value::Object);
        };
        let items = args.items().unwrap_or_default();
        match &**name {
            "collections.OrderedDict" | "builtins.dict" | "__builtin__.dict" => {
                let d = Value::Dict(Rc::new(Dict::new()));
                let pairs = items.first().and_then(Value::items).unwrap_or_default();
                let kvs = pairs.iter().filter_map(|p| p.items().filter(|kv| kv.len() == 2)).flatten().collect();
                self.set_items(&d, kvs)?;
                Ok(d)
            }
            "builtins.set" | "__builtin__.set" | "builtins.frozenset" | "builtins.list" => {
                self.new_list(items.first().and_then(Value::items).unwrap_or_default())
            }
            _ => Ok(Value::Object),
        }
    }

    fn run(&mut self) -> Result<Value, PickleError> {
        loop {
            let op = match self.data.get(self.at) {
                Some(&b) => b,
                None => return self.err("the pickle ends without a STOP (truncated file?)"),
            };
            self.at += 1;
            match op {
                b'.' => return self.pop(),
                0x80 => {
                    let proto = self.u8()?;
                    if proto > 5 {
                        return self.err(format!("pickle protocol {proto} is newer than 5"));
                    }
                }
                0x95 => {
                    self.take(8)?;
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?.clone();
                    self.stack.push(v);
                }
                b'N' => self.stack.push(Value::None),
                0x88 => self.stack.push(Value::Bool(true)),
                0x89 => self.stack.push(Value::Bool(false)),
                b'I' | b'L' => {
                    let t = self.line()?;
                    let v = self.int_text(t)?;
                    self.stack.push(v);
                }
                b'J' => {
                    let v = self.le(4)? as u32 as i32;
                    self.stack.push(Value::Int(v as i128));
                }
                b'K' => {
                    let v = self.u8()?;
                    self.stack.push(Value::Int(v as i128));
                }
                b'M' => {
                    let v = self.le(2)?;
                    self.stack.push(Value::Int(v as i128));
                }
                0x8a => {
                    let n = self.u8()? as usize;
                    let v = self.long(n)?;
                    self.stack.push(v);
                }
                0x8b => {
                    let n = self.len(4)?;
                    let v = self.long(n)?;
                    self.stack.push(v);
                }
                b'F' => {
                    let t = self.line()?;
                    match t.trim().parse::<f64>() {
                        Ok(f) => self.stack.push(Value::Float(f)),
                        Err(_) => return self.err(format!("{t:?} is not a float")),
                    }
                }
                b'G' => {
                    let b = self.take(8)?;
                    let v = f64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
                    self.stack.push(Value::Float(v));
                }
                b'X' | 0x8c | 0x8d | b'V' | b'S' | b'T' | b'U' | b'B' | b'C' | 0x8e | 0x96 => self.text_op(op)?,
                b']' | 0x8f => {
                    let v = self.new_list(Vec::new())?;
                    self.stack.push(v);
                }
                b'}' => self.stack.push(Value::Dict(Rc::new(Dict::new()))),
                b')' => {
                    let v = self.new_tuple(Vec::new())?;
                    self.stack.push(v);
                }
                b'l' | 0x91 => {
                    let items = self.pop_mark()?;
                    let v = self.new_list(items)?;
                    self.stack.push(v);
                }
                b't' => {
                    let items = self.pop_mark()?;
                    let v = self.new_tuple(items)?;
                    self.stack.push(v);
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n {
                        return self.err("a tuple needs more values than the stack has");
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    let v = self.new_tuple(items)?;
                    self.stack.push(v);
                }
                b'd' => {
                    let items = self.pop_mark()?;
                    let d = Value::Dict(Rc::new(Dict::new()));
                    self.set_items(&d, items)?;
                    self.stack.push(d);
                }
                b'a' => {
                    let v = self.pop()?;
                    let l = self.top()?.clone();
                    self.extend(&l, vec![v])?;
                }
                b'e' | 0x90 => {
                    let items = self.pop_mark()?;
                    let l = self.top()?.clone();
                    self.extend(&l, items)?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let d = self.top()?.clone();
                    self.set_items(&d, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let d = self.top()?.clone();
                    self.set_items(&d, items)?;
                }
                b'p' | b'q' | b'r' | 0x94 | b'g' | b'h' | b'j' => self.memo_op(op)?,
                b'c' | 0x93 | b'R' | 0x81 | 0x92 | b'b' | b'i' | b'o' => self.object_op(op)?,
                b'P' | b'Q' => {
                    return self.err("persistent ids (torch.save's tensor storage) are not part of a memory snapshot");
                }
                0x82..=0x84 => return self.err("extension codes are not supported"),
                0x97 | 0x98 => return self.err("out-of-band buffers are not supported"),
                other => return self.err(format!("unknown opcode 0x{other:02x}: not a pickle, or a damaged one")),
            }
        }
    }

    /// Strings and bytes, of every protocol.
    fn text_op(&mut self, op: u8) -> Result<(), PickleError> {
        match op {
            b'X' | 0x8c | 0x8d => {
                let n = match op {
                    b'X' => self.len(4)?,
                    0x8c => self.len(1)?,
                    _ => self.len(8)?,
                };
                let bytes = self.take(n)?;
                let v = self.string(bytes)?;
                self.stack.push(v);
            }
            b'V' => {
                // Protocol 0 unicode: raw-unicode-escape; \uXXXX escapes are kept as text.
                let t = self.line()?;
                self.stack.push(Value::Str(Rc::from(t)));
            }
            b'S' => {
                let t = self.line()?;
                let inner = t.trim();
                let inner = inner.strip_prefix(['\'', '"']).and_then(|s| s.strip_suffix(['\'', '"'])).unwrap_or(inner);
                self.stack.push(Value::Str(Rc::from(inner)));
            }
            b'T' | b'U' | b'B' | b'C' | 0x8e | 0x96 => {
                let n = match op {
                    b'T' | b'B' => self.len(4)?,
                    b'U' | b'C' => self.len(1)?,
                    _ => self.len(8)?,
                };
                let bytes = self.take(n)?;
                // Python 2 strings (T, U) are text in practice; bytes stay bytes.
                let v = if matches!(op, b'T' | b'U') {
                    self.string(bytes).unwrap_or(Value::Bytes(Rc::from(bytes)))
                } else {
                    Value::Bytes(Rc::from(bytes))
                };
                self.stack.push(v);
            }
            other => return self.err(format!("unknown opcode 0x{other:02x}: not a pickle, or a damaged one")),
        }
        Ok(())
    }

    /// The memo: a value kept under an id, and fetched again.
    fn memo_op(&mut self, op: u8) -> Result<(), PickleError> {
        match op {
            b'p' | b'q' | b'r' | 0x94 => {
                let id = match op {
                    b'p' => self.memo_id_line()?,
                    b'q' => self.u8()? as u32,
                    b'r' => self.le(4)? as u32,
                    _ => u32::try_from(self.memo.len()).unwrap_or(u32::MAX),
                };
                let v = self.top()?.clone();
                self.memo.insert(id, v);
            }
            b'g' | b'h' | b'j' => {
                let id = match op {
                    b'g' => self.memo_id_line()?,
                    b'h' => self.u8()? as u32,
                    _ => self.le(4)? as u32,
                };
                match self.memo.get(&id) {
                    Some(v) => {
                        let v = v.clone();
                        self.stack.push(v);
                    }
                    None => return self.err(format!("memo entry {id} is used before it is set")),
                }
            }
            other => return self.err(format!("unknown opcode 0x{other:02x}: not a pickle, or a damaged one")),
        }
        Ok(())
    }

    /// A memo id written as text on its own line (protocol 0's `p` and `g`).
    fn memo_id_line(&mut self) -> Result<u32, PickleError> {
        let t = self.line()?;
        match t.trim().parse::<u32>() {
            Ok(i) => Ok(i),
            Err(_) => self.err(format!("{t:?} is not a memo id")),
        }
    }

    /// Globals, calls and objects: kept as names and opaque values; nothing is imported or run.
    fn object_op(&mut self, op: u8) -> Result<(), PickleError> {
        match op {
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                self.stack.push(Value::Global(Rc::from(format!("{module}.{name}"))));
            }
            0x93 => {
                let name = self.pop()?;
                let module = self.pop()?;
                let g = format!("{}.{}", module.as_str().unwrap_or("?"), name.as_str().unwrap_or("?"));
                self.stack.push(Value::Global(Rc::from(g)));
            }
            b'R' => {
                let args = self.pop()?;
                let callable = self.pop()?;
                let v = self.reduce(&callable, &args)?;
                self.stack.push(v);
            }
            0x81 => {
                self.pop()?;
                self.pop()?;
                self.stack.push(Value::Object);
            }
            0x92 => {
                self.pop()?;
                self.pop()?;
                self.pop()?;
                self.stack.push(Value::Object);
            }
            b'b' => {
                // The state of an object: objects are opaque, so it is dropped.
                self.pop()?;
                self.top()?;
            }
            b'i' => {
                self.line()?;
                self.line()?;
                self.pop_mark()?;
                self.stack.push(Value::Object);
            }
            b'o' => {
                self.pop_mark()?;
                self.stack.push(Value::Object);
            }
            other => return self.err(format!("unknown opcode 0x{other:02x}: not a pickle, or a damaged one")),
        }
        Ok(())
    }
}

fn same_key(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::None, Value::None) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_references_are_not_copied() {
        // [L, L, L, ...] where L = [L0, L0] ... 40 levels deep: 2^40 leaves if copied.
        let mut p = vec![0x80, 4, b']', 0x94]; // memo 0: []
        for level in 0..40u32 {
            p.extend_from_slice(b"](j");
            p.extend_from_slice(&level.to_le_bytes());
            p.push(b'j');
            p.extend_from_slice(&level.to_le_bytes());
            p.extend_from_slice(&[b'e', 0x94]);
        }
        p.push(b'.');
        let v = read(&p).unwrap();
        assert_eq!(v.items().map(|i| i.len()), Some(2));
    }

    /// `levels` empty lists, each then appended into the one below it.
    fn nested(levels: usize) -> Vec<u8> {
        let mut p = vec![0x80, 2];
        p.extend(std::iter::repeat_n(b']', levels));
        p.extend(std::iter::repeat_n(b'a', levels - 1));
        p.push(b'.');
        p
    }

    #[test]
    fn nesting_is_read_to_the_limit_and_refused_beyond() {
        let v = read(&nested(MAX_DEPTH as usize)).unwrap();
        assert_eq!(v.depth(), MAX_DEPTH);
        // Shown and dropped without recursing per level.
        assert!(format!("{v:?}").len() < 2 * DEBUG_CHARS);
        drop(v);
        for levels in [MAX_DEPTH as usize + 1, 100_000] {
            let e = read(&nested(levels)).unwrap_err();
            assert!(e.message.contains("nested deeper than 1000 levels"), "{e}");
        }
        // Tuples and dicts count too: (((...))) and {0: {0: ...}}.
        let mut p = vec![0x80, 2, b'N'];
        p.extend(std::iter::repeat_n(0x85, 2000));
        p.push(b'.');
        assert!(read(&p).unwrap_err().message.contains("nested deeper"));
        // {0: {0: {...}}}: each dict set into the one below it.
        let mut p = vec![0x80, 2, b'}'];
        for _ in 1..2000 {
            p.extend_from_slice(b"K\x00}");
        }
        p.extend(std::iter::repeat_n(b's', 1999));
        p.push(b'.');
        assert!(read(&p).unwrap_err().message.contains("nested deeper"));
    }

    #[test]
    fn a_value_put_inside_itself_is_refused() {
        // l = []; l.append(l)
        let e = read(b"\x80\x02]q\x00h\x00a.").unwrap_err();
        assert!(e.message.contains("inside itself"), "{e}");
        // DUP, then APPENDS: the same through the stack.
        assert!(read(b"\x80\x02]2(2e.").unwrap_err().message.contains("inside itself"));
        // d = {}; d["k"] = d
        assert!(read(b"\x80\x02}q\x00X\x01\x00\x00\x00kh\x00s.").unwrap_err().message.contains("inside itself"));
        // a = []; b = [a]; a.append(b): through another list.
        let e = read(b"\x80\x02]q\x00]q\x01h\x00ah\x00h\x01a.").unwrap_err();
        assert!(e.message.contains("inside itself"), "{e}");
        // A list shared by two others, each filled in turn, is fine: [[1], [1]].
        let v = read(b"\x80\x02](]q\x00K\x01ah\x00e.").unwrap();
        assert_eq!(v.items().map(|i| i.len()), Some(2));
    }

    #[test]
    fn a_dict_of_200_000_keys_reads_in_order_last_write_winning() {
        let n = 200_000u32;
        let mut p = vec![0x80, 2, b'}', b'('];
        for i in 0..n {
            p.push(b'J');
            p.extend_from_slice(&i.to_le_bytes());
            p.push(b'N');
        }
        // Set again: keeps its place, takes the new value.
        p.extend_from_slice(b"J\x07\x00\x00\x00X\x01\x00\x00\x00x");
        p.extend_from_slice(b"X\x04\x00\x00\x00sizeK\x05u.");
        let v = read(&p).unwrap();
        let Value::Dict(d) = &v else { panic!("{v:?}") };
        assert_eq!(d.len(), n as usize + 1);
        let entries = d.entries();
        assert_eq!(entries[7].0.as_i128(), Some(7));
        assert_eq!(entries[7].1.as_str(), Some("x"));
        assert_eq!(entries[n as usize].0.as_str(), Some("size"));
        drop(entries);
        assert_eq!(v.get("size").and_then(|s| s.as_u64()), Some(5));
        assert!(v.get("nothing").is_none());
    }

    #[test]
    fn a_small_dict_is_looked_up_like_a_large_one() {
        // {"a": 1, "a": 2, 1: 3, True: 4}: the same key twice is one entry; 1 and True differ.
        let v = read(b"\x80\x02}(X\x01\x00\x00\x00aK\x01X\x01\x00\x00\x00aK\x02K\x01K\x03\x88K\x04u.").unwrap();
        let Value::Dict(d) = &v else { panic!() };
        assert_eq!(d.len(), 3);
        assert_eq!(v.get("a").and_then(|x| x.as_i128()), Some(2));
    }

    #[test]
    fn debug_output_is_bounded() {
        // A list of 100 000 strings of 1 000 bytes, all the same one.
        let mut p = vec![0x80, 2, b']', b'X'];
        p.extend_from_slice(&1000u32.to_le_bytes());
        p.extend(std::iter::repeat_n(b'x', 1000));
        p.extend_from_slice(b"q\x000(");
        for _ in 0..100_000 {
            p.extend_from_slice(b"h\x00");
        }
        p.extend_from_slice(b"e.");
        let v = read(&p).unwrap();
        let text = format!("{v:?}");
        assert!(text.len() < 2 * DEBUG_CHARS && text.ends_with('…'), "{} chars", text.len());
        assert_eq!(v.repr(100).chars().next(), Some('['));
    }

    #[test]
    fn damaged_pickles_are_errors_not_crashes() {
        for bad in [
            &b""[..],
            b"\x80\x02",
            b"\x80\x02X\xff\xff\xff\x7fabc.",
            b"\x80\x02h\x05.",
            b"\x80\x02e.",
            b"garbage",
            b"\x80\x02\x8a\xff",
        ] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
    }
}
