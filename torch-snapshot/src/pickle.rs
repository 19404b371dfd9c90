//! The part of Python's pickle format that PyTorch's memory snapshots use:
//! dicts, lists, tuples, strings, integers, floats, booleans and None, with
//! the memo that lets one object appear many times (a snapshot's frames).
//!
//! Reading never runs code: a pickle that names a Python class (the
//! opcodes that import and call) is refused, as is any damage, with the
//! offset where it was found. Objects live in one arena and refer to each
//! other by index, so an object the memo shares is stored once however
//! often it is used; a gigabyte of snapshot stays a few arrays.
//!
//! Writing emits the opcodes PyTorch's own viewer (memory_viz's JavaScript
//! unpickler) reads: protocol 4 without frames, strings memoized so each is
//! written once, lists appended a thousand items at a time (as Python's
//! pickler does: the viewer spreads each batch onto its stack).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Write};

/// A fast hash for the reader's own tables (strings and containers of
/// the file at hand, where SipHash's defence against chosen keys buys
/// nothing and costs a third of the reading time): the multiply-rotate
/// of rustc's FxHasher.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.write_u64(u64::from_le_bytes(c.try_into().unwrap_or_default()));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(last));
        }
    }

    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// A value: small ones inline, the rest an index into [`Pickle::objects`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Obj(u32),
}

/// An object of the arena.
#[derive(Clone, Debug, PartialEq)]
pub enum Obj {
    Str(Box<str>),
    Bytes(Box<[u8]>),
    /// Lists, tuples, sets and frozensets alike.
    List(Vec<Val>),
    Dict(Vec<(Val, Val)>),
}

/// Why a pickle could not be read, and where (its byte offset).
#[derive(Debug, thiserror::Error)]
#[error("{what} (at byte {offset})")]
pub struct PickleError {
    pub what: String,
    pub offset: usize,
}

/// A whole unpickled value.
#[derive(Debug, Default)]
pub struct Pickle {
    pub objects: Vec<Obj>,
    pub root: Option<Val>,
}

impl Pickle {
    pub fn obj(&self, v: Val) -> Option<&Obj> {
        match v {
            Val::Obj(i) => self.objects.get(i as usize),
            _ => None,
        }
    }

    pub fn str(&self, v: Val) -> Option<&str> {
        match self.obj(v) {
            Some(Obj::Str(s)) => Some(s),
            _ => None,
        }
    }

    pub fn list(&self, v: Val) -> Option<&[Val]> {
        match self.obj(v) {
            Some(Obj::List(l)) => Some(l),
            _ => None,
        }
    }

    pub fn dict(&self, v: Val) -> Option<&[(Val, Val)]> {
        match self.obj(v) {
            Some(Obj::Dict(d)) => Some(d),
            _ => None,
        }
    }

    /// `d[key]` for a dict `d` with string keys.
    pub fn get(&self, d: Val, key: &str) -> Option<Val> {
        self.dict(d)?
            .iter()
            .find(|(k, _)| self.str(*k) == Some(key))
            .map(|(_, v)| *v)
    }
}

/// Opcodes, as Python's `pickletools` names them.
mod op {
    pub const MARK: u8 = b'(';
    pub const STOP: u8 = b'.';
    pub const POP: u8 = b'0';
    pub const POP_MARK: u8 = b'1';
    pub const DUP: u8 = b'2';
    pub const BINFLOAT: u8 = b'G';
    pub const BININT: u8 = b'J';
    pub const BININT1: u8 = b'K';
    pub const BININT2: u8 = b'M';
    pub const NONE: u8 = b'N';
    pub const BINUNICODE: u8 = b'X';
    pub const BINBYTES: u8 = b'B';
    pub const SHORT_BINBYTES: u8 = b'C';
    pub const APPEND: u8 = b'a';
    pub const APPENDS: u8 = b'e';
    pub const BINGET: u8 = b'h';
    pub const LONG_BINGET: u8 = b'j';
    pub const LIST: u8 = b'l';
    pub const EMPTY_LIST: u8 = b']';
    pub const BINPUT: u8 = b'q';
    pub const LONG_BINPUT: u8 = b'r';
    pub const SETITEM: u8 = b's';
    pub const TUPLE: u8 = b't';
    pub const EMPTY_TUPLE: u8 = b')';
    pub const SETITEMS: u8 = b'u';
    pub const DICT: u8 = b'd';
    pub const EMPTY_DICT: u8 = b'}';
    pub const PROTO: u8 = 0x80;
    pub const TUPLE1: u8 = 0x85;
    pub const TUPLE2: u8 = 0x86;
    pub const TUPLE3: u8 = 0x87;
    pub const NEWTRUE: u8 = 0x88;
    pub const NEWFALSE: u8 = 0x89;
    pub const LONG1: u8 = 0x8a;
    pub const LONG4: u8 = 0x8b;
    pub const SHORT_BINUNICODE: u8 = 0x8c;
    pub const BINUNICODE8: u8 = 0x8d;
    pub const BINBYTES8: u8 = 0x8e;
    pub const EMPTY_SET: u8 = 0x8f;
    pub const ADDITEMS: u8 = 0x90;
    pub const FROZENSET: u8 = 0x91;
    pub const MEMOIZE: u8 = 0x94;
    pub const FRAME: u8 = 0x95;
    /// Opcodes that import or call Python code: never in a snapshot.
    pub const CODE: &[(u8, &str)] = &[
        (b'c', "GLOBAL"),
        (0x93, "STACK_GLOBAL"),
        (b'R', "REDUCE"),
        (b'b', "BUILD"),
        (0x81, "NEWOBJ"),
        (0x92, "NEWOBJ_EX"),
        (b'i', "INST"),
        (b'o', "OBJ"),
        (b'P', "PERSID"),
        (b'Q', "BINPERSID"),
        (0x82, "EXT1"),
        (0x83, "EXT2"),
        (0x84, "EXT4"),
    ];
}

/// Reads a whole pickle held in memory.
pub fn read(data: &[u8]) -> Result<Pickle, PickleError> {
    Reader {
        data,
        at: 0,
        out: Pickle::default(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Vec::new(),
        strings: FxMap::default(),
        consed: FxMap::default(),
        key: Vec::new(),
        memo_of_open: FxMap::default(),
        duplicated: false,
    }
    .run()
}

/// Whether `data` starts as a pickle of protocol 2 or later does.
pub fn looks_like_pickle(data: &[u8]) -> bool {
    data.len() >= 2 && data[0] == op::PROTO && (2..=5).contains(&data[1])
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
    out: Pickle,
    stack: Vec<Val>,
    marks: Vec<usize>,
    memo: Vec<Option<Val>>,
    /// Every string read so far, by its bytes: Python writes a string
    /// again wherever it is not the same object (a snapshot's frames are
    /// fresh dicts of fresh strings), and each is kept once. Strings are
    /// immutable, so sharing them changes nothing a reader can see.
    strings: FxMap<&'a [u8], u32>,
    /// Every small list and dict completed so far, by its contents (the
    /// same frame dicts and frame lists come again event after event):
    /// an equal one completed later is replaced by the first, its own
    /// storage released. Only containers filled by one APPENDS or SETITEMS
    /// of fewer than `BATCH` items are complete then (Python's pickler
    /// writes larger ones in batches); and only those holding no integer
    /// of 2^32 or more: addresses and times, which make a container
    /// (an event, a block) unique, so keeping it to compare costs and
    /// saves nothing.
    consed: FxMap<Box<[u64]>, u32>,
    /// The key being built (`cons`).
    key: Vec<u64>,
    /// The memo index of each container memoized while still empty, so a
    /// replaced one's memo entry can point at its replacement.
    memo_of_open: FxMap<u32, usize>,
    /// DUP was seen: a container may have another reference on the
    /// stack, so replaced ones keep their storage.
    duplicated: bool,
}

/// A value as bits, for `Reader::consed`'s keys.
fn val_bits(v: Val) -> [u64; 2] {
    match v {
        Val::None => [0, 0],
        Val::Bool(b) => [1, u64::from(b)],
        Val::Int(i) => [2, i as u64],
        Val::Float(f) => [3, f.to_bits()],
        Val::Obj(i) => [4, u64::from(i)],
    }
}

impl<'a> Reader<'a> {
    fn fail<T>(&self, what: impl Into<String>) -> Result<T, PickleError> {
        Err(PickleError {
            what: what.into(),
            offset: self.at,
        })
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], PickleError> {
        match self.at.checked_add(n).filter(|&e| e <= self.data.len()) {
            Some(end) => {
                let s = &self.data[self.at..end];
                self.at = end;
                Ok(s)
            }
            None => self.fail("the pickle ends in the middle of a value"),
        }
    }

    fn u8(&mut self) -> Result<u8, PickleError> {
        Ok(self.take(1)?[0])
    }

    fn le(&mut self, n: usize) -> Result<u64, PickleError> {
        let b = self.take(n)?;
        Ok(b.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x)))
    }

    fn pop(&mut self) -> Result<Val, PickleError> {
        match self.stack.pop() {
            Some(v) => Ok(v),
            None => self.fail("a value is taken from an empty stack"),
        }
    }

    /// The values pushed since the last MARK, removed from the stack.
    fn pop_mark(&mut self) -> Result<Vec<Val>, PickleError> {
        let Some(m) = self.marks.pop() else {
            return self.fail("no MARK before a collection's items");
        };
        if m > self.stack.len() {
            return self.fail("a MARK above the stack");
        }
        Ok(self.stack.split_off(m))
    }

    fn push_obj(&mut self, o: Obj) -> Result<(), PickleError> {
        let Ok(i) = u32::try_from(self.out.objects.len()) else {
            return self.fail("more than 4 billion objects");
        };
        self.out.objects.push(o);
        self.stack.push(Val::Obj(i));
        Ok(())
    }

    fn string(&mut self, n: usize) -> Result<(), PickleError> {
        let at = self.at;
        let bytes = self.take(n)?;
        if let Some(&i) = self.strings.get(bytes) {
            self.stack.push(Val::Obj(i));
            return Ok(());
        }
        match std::str::from_utf8(bytes) {
            Ok(s) => {
                let s: Box<str> = s.into();
                self.strings.insert(bytes, self.out.objects.len() as u32);
                self.push_obj(Obj::Str(s))
            }
            Err(_) => Err(PickleError {
                what: "a string that is not UTF-8".into(),
                offset: at,
            }),
        }
    }

    fn bytes(&mut self, n: usize) -> Result<(), PickleError> {
        let b: Box<[u8]> = self.take(n)?.into();
        self.push_obj(Obj::Bytes(b))
    }

    fn long(&mut self, n: usize) -> Result<(), PickleError> {
        if n > 8 {
            return self.fail(format!("an integer of {n} bytes (at most 8 are read)"));
        }
        let b = self.take(n)?;
        let mut v: i64 = 0;
        for (i, &x) in b.iter().enumerate() {
            v |= i64::from(x) << (8 * i);
        }
        if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
            v |= -1i64 << (8 * n);
        }
        self.stack.push(Val::Int(v));
        Ok(())
    }

    fn memo_put(&mut self, i: usize) -> Result<(), PickleError> {
        let Some(&top) = self.stack.last() else {
            return self.fail("memoizing an empty stack");
        };
        if i > self.memo.len() + (1 << 24) {
            return self.fail(format!("memo index {i} far past the memo's end"));
        }
        if self.memo.len() <= i {
            self.memo.resize(i + 1, None);
        }
        self.memo[i] = Some(top);
        if let Val::Obj(o) = top {
            let empty = match self.out.objects.get(o as usize) {
                Some(Obj::List(l)) => l.is_empty(),
                Some(Obj::Dict(d)) => d.is_empty(),
                _ => false,
            };
            if empty {
                self.memo_of_open.insert(o, i);
            }
        }
        Ok(())
    }

    fn memo_get(&mut self, i: usize) -> Result<(), PickleError> {
        match self.memo.get(i).copied().flatten() {
            Some(v) => {
                self.stack.push(v);
                Ok(())
            }
            None => self.fail(format!("memo index {i} was never stored")),
        }
    }

    /// The list (or set) at `target` of the stack, extended by `items`.
    fn extend(&mut self, target: Val, items: Vec<Val>, whole: bool) -> Result<(), PickleError> {
        if let Val::Obj(i) = target {
            if let Some(Obj::List(l)) = self.out.objects.get_mut(i as usize) {
                let complete = whole && l.is_empty() && items.len() < BATCH as usize;
                l.extend(items);
                if complete {
                    self.cons(i, false);
                }
                return Ok(());
            }
        }
        self.fail("items appended to something that is not a list")
    }

    fn set_items(&mut self, target: Val, items: Vec<Val>, whole: bool) -> Result<(), PickleError> {
        if !items.len().is_multiple_of(2) {
            return self.fail("a dict's items are not key, value pairs");
        }
        if let Val::Obj(i) = target {
            if let Some(Obj::Dict(d)) = self.out.objects.get_mut(i as usize) {
                let complete = whole && d.is_empty() && items.len() < 2 * BATCH as usize;
                d.extend(items.chunks_exact(2).map(|p| (p[0], p[1])));
                if complete {
                    self.cons(i, true);
                }
                return Ok(());
            }
        }
        self.fail("items set on something that is not a dict")
    }

    /// The container `i`, just completed on top of the stack: replaced by
    /// an equal one completed before, if any (`consed`).
    fn cons(&mut self, i: u32, dict: bool) {
        let mut key = std::mem::take(&mut self.key);
        key.clear();
        key.push(u64::from(dict));
        let vals: Box<dyn Iterator<Item = Val> + '_> = match &self.out.objects[i as usize] {
            Obj::List(l) => Box::new(l.iter().copied()),
            Obj::Dict(d) => Box::new(d.iter().flat_map(|&(k, v)| [k, v])),
            _ => return,
        };
        for v in vals {
            if matches!(v, Val::Int(n) if !(0..1 << 32).contains(&n)) {
                self.key = key;
                self.memo_of_open.remove(&i);
                return;
            }
            key.extend(val_bits(v));
        }
        let memo = self.memo_of_open.remove(&i);
        match self.consed.get(key.as_slice()) {
            Some(&first) => {
                if let Some(top) = self.stack.last_mut() {
                    *top = Val::Obj(first);
                }
                if let Some(m) = memo {
                    self.memo[m] = Some(Val::Obj(first));
                }
                if !self.duplicated {
                    self.out.objects[i as usize] = Obj::List(Vec::new());
                }
            }
            None => {
                self.consed.insert(key.as_slice().into(), i);
            }
        }
        self.key = key;
    }

    fn top(&self) -> Result<Val, PickleError> {
        match self.stack.last() {
            Some(&v) => Ok(v),
            None => self.fail("a collection expected on an empty stack"),
        }
    }

    fn run(mut self) -> Result<Pickle, PickleError> {
        loop {
            let code = self.u8()?;
            if code == op::STOP {
                let root = self.pop()?;
                self.out.root = Some(root);
                return Ok(self.out);
            }
            self.step(code)?;
        }
    }

    #[expect(
        clippy::too_many_lines,
        reason = "one arm per opcode, each a line or two: the format's table"
    )]
    fn step(&mut self, code: u8) -> Result<(), PickleError> {
        match code {
            op::PROTO => {
                let v = self.u8()?;
                if v > 5 {
                    return self.fail(format!("pickle protocol {v} (5 is the newest)"));
                }
            }
            op::FRAME => {
                self.take(8)?;
            }
            op::MARK => self.marks.push(self.stack.len()),
            op::POP => {
                self.pop()?;
            }
            op::POP_MARK => {
                self.pop_mark()?;
            }
            op::DUP => {
                self.duplicated = true;
                let v = self.top()?;
                self.stack.push(v);
            }
            op::NONE => self.stack.push(Val::None),
            op::NEWTRUE => self.stack.push(Val::Bool(true)),
            op::NEWFALSE => self.stack.push(Val::Bool(false)),
            op::BININT => {
                let v = self.le(4)? as u32 as i32;
                self.stack.push(Val::Int(v.into()));
            }
            op::BININT1 => {
                let v = self.le(1)?;
                self.stack.push(Val::Int(v as i64));
            }
            op::BININT2 => {
                let v = self.le(2)?;
                self.stack.push(Val::Int(v as i64));
            }
            op::LONG1 => {
                let n = self.le(1)? as usize;
                self.long(n)?;
            }
            op::LONG4 => {
                let n = self.le(4)? as usize;
                self.long(n)?;
            }
            op::BINFLOAT => {
                let b = self.take(8)?;
                let v = f64::from_be_bytes(b.try_into().unwrap_or_default());
                self.stack.push(Val::Float(v));
            }
            op::SHORT_BINUNICODE => {
                let n = self.le(1)? as usize;
                self.string(n)?;
            }
            op::BINUNICODE => {
                let n = self.le(4)? as usize;
                self.string(n)?;
            }
            op::BINUNICODE8 => {
                let n = self.le(8)? as usize;
                self.string(n)?;
            }
            op::SHORT_BINBYTES => {
                let n = self.le(1)? as usize;
                self.bytes(n)?;
            }
            op::BINBYTES => {
                let n = self.le(4)? as usize;
                self.bytes(n)?;
            }
            op::BINBYTES8 => {
                let n = self.le(8)? as usize;
                self.bytes(n)?;
            }
            op::EMPTY_LIST | op::EMPTY_SET => self.push_obj(Obj::List(Vec::new()))?,
            op::EMPTY_TUPLE => self.push_obj(Obj::List(Vec::new()))?,
            op::EMPTY_DICT => self.push_obj(Obj::Dict(Vec::new()))?,
            op::APPEND => {
                let v = self.pop()?;
                let target = self.top()?;
                self.extend(target, vec![v], false)?;
            }
            op::APPENDS | op::ADDITEMS => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.extend(target, items, code == op::APPENDS)?;
            }
            op::LIST | op::TUPLE | op::FROZENSET => {
                let items = self.pop_mark()?;
                self.push_obj(Obj::List(items))?;
            }
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                let n = usize::from(code - op::TUPLE1 + 1);
                if self.stack.len() < n {
                    return self.fail("a tuple of more items than the stack holds");
                }
                let items = self.stack.split_off(self.stack.len() - n);
                self.push_obj(Obj::List(items))?;
            }
            op::DICT => {
                let items = self.pop_mark()?;
                self.push_obj(Obj::Dict(Vec::new()))?;
                let target = self.top()?;
                self.set_items(target, items, false)?;
            }
            op::SETITEM => {
                let v = self.pop()?;
                let k = self.pop()?;
                let target = self.top()?;
                self.set_items(target, vec![k, v], false)?;
            }
            op::SETITEMS => {
                let items = self.pop_mark()?;
                let target = self.top()?;
                self.set_items(target, items, true)?;
            }
            op::MEMOIZE => {
                let i = self.memo.len();
                self.memo_put(i)?;
            }
            op::BINPUT => {
                let i = self.le(1)? as usize;
                self.memo_put(i)?;
            }
            op::LONG_BINPUT => {
                let i = self.le(4)? as usize;
                self.memo_put(i)?;
            }
            op::BINGET => {
                let i = self.le(1)? as usize;
                self.memo_get(i)?;
            }
            op::LONG_BINGET => {
                let i = self.le(4)? as usize;
                self.memo_get(i)?;
            }
            _ => {
                self.at -= 1;
                return match op::CODE.iter().find(|(c, _)| *c == code) {
                    Some((_, name)) => self.fail(format!(
                        "the pickle builds Python objects ({name}), which a memory snapshot never holds; \
                         it is not read"
                    )),
                    None => self.fail(format!("unknown or unsupported pickle opcode 0x{code:02x}")),
                };
            }
        }
        Ok(())
    }
}

/// Writes a pickle value by value: the caller opens and closes dicts and
/// lists in the order Python's pickler would.
pub struct Writer<W: Write> {
    out: W,
    strings: HashMap<String, u32>,
    memo: u32,
    /// For each open list, items since its last APPENDS; `None` for an
    /// open dict (its items are set at once).
    open: Vec<Option<u32>>,
}

/// Items per APPENDS, as Python's pickler batches them.
const BATCH: u32 = 1000;

impl<W: Write> Writer<W> {
    /// Starts a pickle of protocol 4.
    pub fn new(mut out: W) -> io::Result<Self> {
        out.write_all(&[op::PROTO, 4])?;
        Ok(Writer {
            out,
            strings: HashMap::new(),
            memo: 0,
            open: Vec::new(),
        })
    }

    /// Ends the pickle, returning the output.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[op::STOP])?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Counts an item written into the innermost open list, closing a
    /// batch every `BATCH` items.
    fn item(&mut self) -> io::Result<()> {
        if let Some(Some(n)) = self.open.last_mut() {
            *n += 1;
            if *n == BATCH {
                *n = 0;
                self.out.write_all(&[op::APPENDS, op::MARK])?;
            }
        }
        Ok(())
    }

    pub fn none(&mut self) -> io::Result<()> {
        self.out.write_all(&[op::NONE])?;
        self.item()
    }

    pub fn bool(&mut self, b: bool) -> io::Result<()> {
        self.out
            .write_all(&[if b { op::NEWTRUE } else { op::NEWFALSE }])?;
        self.item()
    }

    pub fn int(&mut self, v: i64) -> io::Result<()> {
        if (0..0x100).contains(&v) {
            self.out.write_all(&[op::BININT1, v as u8])?;
        } else if (0..0x1_0000).contains(&v) {
            self.out.write_all(&[op::BININT2])?;
            self.out.write_all(&(v as u16).to_le_bytes())?;
        } else if i32::try_from(v).is_ok() {
            self.out.write_all(&[op::BININT])?;
            self.out.write_all(&(v as i32).to_le_bytes())?;
        } else {
            // LONG1: the shortest two's complement little-endian bytes.
            let bytes = v.to_le_bytes();
            let mut n = 8;
            while n > 1 {
                let top = bytes[n - 1];
                let next_sign = bytes[n - 2] & 0x80;
                if (top == 0 && next_sign == 0) || (top == 0xff && next_sign != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.out.write_all(&[op::LONG1, n as u8])?;
            self.out.write_all(&bytes[..n])?;
        }
        self.item()
    }

    pub fn uint(&mut self, v: u64) -> io::Result<()> {
        self.int(i64::try_from(v).unwrap_or(i64::MAX))
    }

    pub fn float(&mut self, v: f64) -> io::Result<()> {
        self.out.write_all(&[op::BINFLOAT])?;
        self.out.write_all(&v.to_be_bytes())?;
        self.item()
    }

    /// A string: written once, then fetched from the memo.
    pub fn str(&mut self, s: &str) -> io::Result<()> {
        if let Some(&i) = self.strings.get(s) {
            self.get(i)?;
        } else {
            let n = s.len();
            if n < 0x100 {
                self.out.write_all(&[op::SHORT_BINUNICODE, n as u8])?;
            } else {
                self.out.write_all(&[op::BINUNICODE])?;
                self.out.write_all(&(n as u32).to_le_bytes())?;
            }
            self.out.write_all(s.as_bytes())?;
            let i = self.memoize()?;
            self.strings.insert(s.to_owned(), i);
        }
        self.item()
    }

    /// Stores the value on top of the stack in the memo; returns its index.
    pub fn memoize(&mut self) -> io::Result<u32> {
        self.out.write_all(&[op::MEMOIZE])?;
        self.memo += 1;
        Ok(self.memo - 1)
    }

    /// Pushes memo entry `i` again (not counted as an item: `shared` does).
    fn get(&mut self, i: u32) -> io::Result<()> {
        if i < 0x100 {
            self.out.write_all(&[op::BINGET, i as u8])
        } else {
            self.out.write_all(&[op::LONG_BINGET])?;
            self.out.write_all(&i.to_le_bytes())
        }
    }

    /// An object written before and memoized (`memoize`), used again.
    pub fn shared(&mut self, i: u32) -> io::Result<()> {
        self.get(i)?;
        self.item()
    }

    /// Opens a dict; then key, value, key, value …, then `end_dict`.
    pub fn begin_dict(&mut self) -> io::Result<()> {
        self.out.write_all(&[op::EMPTY_DICT, op::MARK])?;
        self.open.push(None);
        Ok(())
    }

    pub fn end_dict(&mut self) -> io::Result<()> {
        self.open.pop();
        self.out.write_all(&[op::SETITEMS])?;
        self.item()
    }

    /// A dict's key and its integer value.
    pub fn key_int(&mut self, k: &str, v: i64) -> io::Result<()> {
        self.str(k)?;
        self.int(v)
    }

    pub fn key_str(&mut self, k: &str, v: &str) -> io::Result<()> {
        self.str(k)?;
        self.str(v)
    }

    /// Opens a list; then its items, then `end_list`.
    pub fn begin_list(&mut self) -> io::Result<()> {
        self.out.write_all(&[op::EMPTY_LIST, op::MARK])?;
        self.open.push(Some(0));
        Ok(())
    }

    /// Closes the innermost list (`begin_list`); `memoize` right after to
    /// use it again with `shared`.
    pub fn end_list(&mut self) -> io::Result<()> {
        self.open.pop();
        self.out.write_all(&[op::APPENDS])?;
        self.item()
    }

    /// The list just closed, memoized without counting it again.
    pub fn end_list_shared(&mut self) -> io::Result<u32> {
        self.open.pop();
        self.out.write_all(&[op::APPENDS])?;
        let i = self.memoize()?;
        self.item()?;
        Ok(i)
    }
}
