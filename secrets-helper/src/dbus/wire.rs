//! The D-Bus wire format (marshalling), as far as a Secret Service client needs it: every type
//! can be read (so that any message the bus sends can be skipped safely), the usual ones written.
//!
//! Alignment is relative to the start of the message; a body starts on an 8-byte boundary, so
//! a body encoded on its own from offset 0 aligns the same way. Buffers that may hold secret
//! bytes are `Zeroizing`.

use zeroize::Zeroizing;

/// Nesting deeper than this is refused (the specification allows 64; nothing we read nests
/// beyond 4).
const MAX_DEPTH: usize = 32;

/// One D-Bus value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Byte(u8),
    Bool(bool),
    U32(u32),
    /// A number of another type (`n q i h x t d`), which this client only reads past: its type
    /// code and its bits (as wide as the type).
    Number(u8, u64),
    Str(String),
    Path(String),
    Signature(String),
    /// `ay`, kept apart so that secret bytes live in one zeroized buffer.
    Bytes(Zeroizing<Vec<u8>>),
    /// An array of anything but bytes; `elem` is the element signature.
    Array {
        elem: String,
        items: Vec<Value>,
    },
    Struct(Vec<Value>),
    DictEntry(Box<Value>, Box<Value>),
    Variant(Box<Value>),
}

/// Why bytes are not a valid D-Bus message.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("malformed D-Bus data: {0}")]
pub struct WireError(pub String);

fn bad<T>(msg: impl Into<String>) -> Result<T, WireError> {
    Err(WireError(msg.into()))
}

impl Value {
    /// A dictionary `a{KV}` from pairs.
    pub fn dict(key_sig: &str, val_sig: &str, pairs: Vec<(Value, Value)>) -> Value {
        Value::Array {
            elem: format!("{{{key_sig}{val_sig}}}"),
            items: pairs
                .into_iter()
                .map(|(k, v)| Value::DictEntry(Box::new(k), Box::new(v)))
                .collect(),
        }
    }

    pub fn variant(inner: Value) -> Value {
        Value::Variant(Box::new(inner))
    }

    pub fn signature(&self) -> String {
        match self {
            Value::Byte(_) => "y".into(),
            Value::Bool(_) => "b".into(),
            Value::U32(_) => "u".into(),
            Value::Number(code, _) => char::from(*code).into(),
            Value::Str(_) => "s".into(),
            Value::Path(_) => "o".into(),
            Value::Signature(_) => "g".into(),
            Value::Bytes(_) => "ay".into(),
            Value::Array { elem, .. } => format!("a{elem}"),
            Value::Struct(fields) => {
                let inner: String = fields.iter().map(Value::signature).collect();
                format!("({inner})")
            }
            Value::DictEntry(k, v) => format!("{{{}{}}}", k.signature(), v.signature()),
            Value::Variant(_) => "v".into(),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Path(s) | Value::Signature(s) => Some(s),
            Value::Variant(v) => v.as_str(),
            _ => None,
        }
    }

    /// The elements of an array (`Bytes` excluded).
    pub fn items(&self) -> Option<&[Value]> {
        match self {
            Value::Array { items, .. } => Some(items),
            _ => None,
        }
    }
}

/// The alignment of the type that starts `sig` (for a fixed-size type, its size).
fn alignment(sig: u8) -> usize {
    match sig {
        b'y' | b'g' | b'v' => 1,
        b'n' | b'q' => 2,
        b'b' | b'i' | b'u' | b'h' | b's' | b'o' | b'a' => 4,
        _ => 8, // x t d ( {
    }
}

/// The end (exclusive) of the single complete type starting at `sig[i]`.
pub fn type_end(sig: &[u8], i: usize) -> Result<usize, WireError> {
    fn walk(sig: &[u8], i: usize, depth: usize) -> Result<usize, WireError> {
        if depth > MAX_DEPTH {
            return bad("signature nests too deep");
        }
        match sig.get(i) {
            None => bad("signature ends inside a type"),
            Some(
                b'y' | b'b' | b'n' | b'q' | b'i' | b'u' | b'x' | b't' | b'd' | b's' | b'o' | b'g'
                | b'h' | b'v',
            ) => Ok(i + 1),
            Some(b'a') => walk(sig, i + 1, depth + 1),
            Some(b'(') => {
                let mut j = i + 1;
                if sig.get(j) == Some(&b')') {
                    return bad("empty struct");
                }
                while sig.get(j) != Some(&b')') {
                    j = walk(sig, j, depth + 1)?;
                }
                Ok(j + 1)
            }
            Some(b'{') => {
                let k = walk(sig, i + 1, depth + 1)?;
                let v = walk(sig, k, depth + 1)?;
                if sig.get(v) != Some(&b'}') {
                    return bad("dict entry without exactly two types");
                }
                Ok(v + 1)
            }
            Some(c) => bad(format!("unknown type code {:?}", *c as char)),
        }
    }
    walk(sig, i, 0)
}

/// Writes values in little-endian D-Bus format.
pub struct Writer {
    pub buf: Zeroizing<Vec<u8>>,
}

impl Writer {
    /// A writer whose buffer already holds `prefix` (message start = buffer start).
    pub fn with_prefix(prefix: &[u8]) -> Writer {
        let mut buf = Zeroizing::new(Vec::with_capacity(256));
        buf.extend_from_slice(prefix);
        Writer { buf }
    }

    pub fn pad(&mut self, align: usize) {
        while !self.buf.len().is_multiple_of(align) {
            self.buf.push(0);
        }
    }

    /// A fixed-size value, aligned to its size.
    fn fixed(&mut self, bytes: &[u8]) {
        self.pad(bytes.len());
        self.buf.extend_from_slice(bytes);
    }

    fn u32(&mut self, v: u32) {
        self.fixed(&v.to_le_bytes());
    }

    /// A string or signature: its length (`len`, a u32 or a byte), its bytes and a NUL.
    fn string(&mut self, len: &[u8], s: &str) {
        self.fixed(len);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
    }

    pub fn put(&mut self, v: &Value) {
        match v {
            Value::Byte(b) => self.buf.push(*b),
            Value::Bool(b) => self.u32(*b as u32),
            Value::U32(x) => self.u32(*x),
            Value::Number(code, bits) => self.fixed(&bits.to_le_bytes()[..alignment(*code)]),
            Value::Str(s) | Value::Path(s) => self.string(&(s.len() as u32).to_le_bytes(), s),
            Value::Signature(s) => self.string(&[s.len() as u8], s),
            Value::Bytes(b) => {
                self.u32(b.len() as u32);
                self.buf.extend_from_slice(b);
            }
            Value::Array { elem, items } => {
                self.u32(0);
                let len_at = self.buf.len() - 4;
                self.pad(alignment(elem.as_bytes().first().copied().unwrap_or(b'y')));
                let start = self.buf.len();
                for item in items {
                    self.put(item);
                }
                let len = (self.buf.len() - start) as u32;
                self.buf[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
            }
            Value::Struct(fields) => {
                self.pad(8);
                for f in fields {
                    self.put(f);
                }
            }
            Value::DictEntry(k, v) => {
                self.pad(8);
                self.put(k);
                self.put(v);
            }
            Value::Variant(inner) => {
                self.put(&Value::Signature(inner.signature()));
                self.put(inner);
            }
        }
    }
}

/// Reads values from a buffer whose offset 0 is 8-aligned relative to the message start.
pub struct Reader<'a> {
    buf: &'a [u8],
    pub pos: usize,
    big_endian: bool,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8], big_endian: bool) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            big_endian,
        }
    }

    fn align(&mut self, n: usize) -> Result<(), WireError> {
        let to = self.pos.div_ceil(n) * n;
        if to > self.buf.len() {
            return bad("padding runs past the end");
        }
        if self.buf[self.pos..to].iter().any(|&b| b != 0) {
            return bad("non-zero padding");
        }
        self.pos = to;
        Ok(())
    }

    /// The end of the `n` bytes from the current position, if they are all there.
    fn end_of(&self, n: usize) -> Option<usize> {
        self.pos.checked_add(n).filter(|&e| e <= self.buf.len())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let Some(end) = self.end_of(n) else {
            return bad("value runs past the end");
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    /// A number of `n` bytes (at most 8), aligned to its size.
    fn number(&mut self, n: usize) -> Result<u64, WireError> {
        self.align(n)?;
        let mut le = [0u8; 8];
        le[..n].copy_from_slice(self.take(n)?);
        if self.big_endian {
            le[..n].reverse();
        }
        Ok(u64::from_le_bytes(le))
    }

    pub fn u32(&mut self) -> Result<u32, WireError> {
        Ok(self.number(4)? as u32)
    }

    /// A string or signature: its length (`len_size` bytes: 4, or 1 for a signature), its
    /// bytes and a NUL.
    fn string(&mut self, len_size: usize) -> Result<String, WireError> {
        let len = match len_size {
            1 => self.take(1)?[0] as usize,
            _ => self.u32()? as usize,
        };
        let bytes = self.take(len)?;
        if self.take(1)? != [0] {
            return bad("string without its NUL");
        }
        String::from_utf8(bytes.to_vec()).or_else(|_| bad("string is not UTF-8"))
    }

    /// Reads one value of the single complete type `sig`.
    pub fn read(&mut self, sig: &[u8]) -> Result<Value, WireError> {
        self.read_at(sig, 0)
    }

    fn read_at(&mut self, sig: &[u8], depth: usize) -> Result<Value, WireError> {
        if depth > MAX_DEPTH {
            return bad("value nests too deep");
        }
        let Some(&code) = sig.first() else {
            return bad("empty signature");
        };
        Ok(match code {
            b'y' => Value::Byte(self.take(1)?[0]),
            b'b' => match self.u32()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                n => return bad(format!("boolean {n}")),
            },
            b'u' => Value::U32(self.u32()?),
            c @ (b'n' | b'q' | b'i' | b'h' | b'x' | b't' | b'd') => {
                Value::Number(c, self.number(alignment(c))?)
            }
            b's' => Value::Str(self.string(4)?),
            b'o' => Value::Path(self.string(4)?),
            b'g' => Value::Signature(self.string(1)?),
            b'v' => {
                let inner = self.string(1)?;
                let b = inner.as_bytes();
                if b.is_empty() || type_end(b, 0)? != b.len() {
                    return bad("variant signature is not one complete type");
                }
                Value::variant(self.read_at(b, depth + 1)?)
            }
            b'a' => {
                let len = self.u32()? as usize;
                let elem_end = type_end(sig, 1)?;
                let elem = &sig[1..elem_end];
                self.align(alignment(elem[0]))?;
                let Some(end) = self.end_of(len) else {
                    return bad("array runs past the end");
                };
                if elem == b"y" {
                    return Ok(Value::Bytes(Zeroizing::new(self.take(len)?.to_vec())));
                }
                let mut items = Vec::new();
                while self.pos < end {
                    items.push(self.read_at(elem, depth + 1)?);
                }
                if self.pos != end {
                    return bad("array element runs past the array");
                }
                Value::Array {
                    elem: String::from_utf8_lossy(elem).into_owned(),
                    items,
                }
            }
            b'(' => {
                self.align(8)?;
                let end = type_end(sig, 0)?;
                Value::Struct(self.read_seq(&sig[1..end - 1], depth + 1)?)
            }
            b'{' => {
                self.align(8)?;
                let k_end = type_end(sig, 1)?;
                let v_end = type_end(sig, k_end)?;
                let k = self.read_at(&sig[1..k_end], depth + 1)?;
                let v = self.read_at(&sig[k_end..v_end], depth + 1)?;
                Value::DictEntry(Box::new(k), Box::new(v))
            }
            c => return bad(format!("unknown type code {:?}", c as char)),
        })
    }

    /// Reads the values of a whole signature (a message body).
    pub fn read_all(&mut self, sig: &[u8]) -> Result<Vec<Value>, WireError> {
        self.read_seq(sig, 0)
    }

    /// Reads one value of each complete type in `sig` (a body, a struct's fields).
    fn read_seq(&mut self, sig: &[u8], depth: usize) -> Result<Vec<Value>, WireError> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < sig.len() {
            let e = type_end(sig, i)?;
            out.push(self.read_at(&sig[i..e], depth)?);
            i = e;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(v: Value) {
        let mut w = Writer::with_prefix(&[]);
        w.put(&v);
        let sig = v.signature();
        let mut r = Reader::new(&w.buf, false);
        assert_eq!(r.read(sig.as_bytes()).unwrap(), v, "{sig}");
        assert_eq!(r.pos, w.buf.len());
    }

    #[test]
    fn values_round_trip() {
        round_trip(Value::Str("hé".into()));
        round_trip(Value::Struct(vec![
            Value::Byte(1),
            Value::Number(b't', 7),
            Value::Number(b'n', 0xfffe),
            Value::Path("/a/b".into()),
            Value::Bytes(Zeroizing::new(b"secret".to_vec())),
            Value::Str("text/plain".into()),
        ]));
        round_trip(Value::dict(
            "s",
            "v",
            vec![
                (
                    Value::Str("k".into()),
                    Value::Variant(Box::new(Value::dict(
                        "s",
                        "s",
                        vec![(Value::Str("a".into()), Value::Str("b".into()))],
                    ))),
                ),
                (
                    Value::Str("n".into()),
                    Value::Variant(Box::new(Value::Bool(true))),
                ),
            ],
        ));
        round_trip(Value::Array {
            elem: "o".into(),
            items: vec![],
        });
    }

    #[test]
    fn known_bytes() {
        // (yu) with padding: byte 7, 3 zero bytes, u32 5.
        let mut w = Writer::with_prefix(&[]);
        w.put(&Value::Struct(vec![Value::Byte(7), Value::U32(5)]));
        assert_eq!(&w.buf[..], &[7, 0, 0, 0, 5, 0, 0, 0]);
        // A big-endian u32.
        let mut r = Reader::new(&[0, 0, 1, 2], true);
        assert_eq!(r.read(b"u").unwrap(), Value::U32(258));
    }

    #[test]
    fn malformed_input_is_refused_not_panicked_on() {
        for (bytes, sig) in [
            (&[5u8, 0, 0, 0, b'a'][..], &b"s"[..]),
            (&[1, 0, 0, 0, b'a', 1], b"s"),
            (&[2, 0, 0, 0], b"b"),
            (&[0xff, 0xff, 0xff, 0x7f], b"ai"),
            (&[1, b'z', 0], b"v"),
            (&[0], b"("),
            (&[0], b"{s}"),
        ] {
            assert!(
                Reader::new(bytes, false).read(sig).is_err(),
                "{bytes:?} {sig:?}"
            );
        }
        let deep = "a".repeat(40) + "y";
        assert!(type_end(deep.as_bytes(), 0).is_err());
    }
}
