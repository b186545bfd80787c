//! Protobuf wire primitives: a bounds-checked reader that yields each field with its raw
//! bytes (so unknown fields can be kept verbatim) and the writers for the field kinds
//! Glider encodes. No schema here: that is [`crate::fields`] and [`crate::messages`].

use crate::Error;

/// Wire type 0: varint.
pub const VARINT: u8 = 0;
/// Wire type 1: 64-bit little-endian.
pub const I64: u8 = 1;
/// Wire type 2: length-delimited (strings, bytes, messages, packed repeats).
pub const LEN: u8 = 2;
/// Wire type 5: 32-bit little-endian.
pub const I32: u8 = 5;

/// The value of one field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    Varint(u64),
    I64(u64),
    Len(&'a [u8]),
    I32(u32),
}

impl Value<'_> {
    /// The wire type this value was read with.
    pub fn wire_type(&self) -> u8 {
        match self {
            Value::Varint(_) => VARINT,
            Value::I64(_) => I64,
            Value::Len(_) => LEN,
            Value::I32(_) => I32,
        }
    }
}

/// One field as read: its number, value and the exact bytes (tag included) it took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field<'a> {
    pub number: u32,
    pub value: Value<'a>,
    pub raw: &'a [u8],
}

/// Reads fields from one message's bytes.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Largest field number protobuf allows.
const MAX_FIELD: u64 = (1 << 29) - 1;

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, Error> {
        let (value, used) = read_varint(&self.buf[self.pos..])?;
        self.pos += used;
        Ok(value)
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], Error> {
        let end = self.pos.checked_add(n).ok_or(Error::Truncated(what))?;
        let bytes = self.buf.get(self.pos..end).ok_or(Error::Truncated(what))?;
        self.pos = end;
        Ok(bytes)
    }

    /// The next field, or `None` at the end of the message.
    pub fn next_field(&mut self) -> Result<Option<Field<'a>>, Error> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let start = self.pos;
        let tag = self.varint()?;
        let number = tag >> 3;
        let wire_type = (tag & 7) as u8;
        if number == 0 || number > MAX_FIELD {
            return Err(Error::FieldNumber(number));
        }
        let value = match wire_type {
            VARINT => Value::Varint(self.varint()?),
            I64 => {
                let b = self.take(8, "fixed64 field")?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                Value::I64(u64::from_le_bytes(a))
            }
            LEN => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| Error::Truncated("length"))?;
                Value::Len(self.take(len, "length-delimited field")?)
            }
            I32 => {
                let b = self.take(4, "fixed32 field")?;
                let mut a = [0u8; 4];
                a.copy_from_slice(b);
                Value::I32(u32::from_le_bytes(a))
            }
            other => {
                return Err(Error::WireType {
                    field: number,
                    wire_type: other,
                });
            }
        };
        Ok(Some(Field {
            // Checked against MAX_FIELD above.
            number: number as u32,
            value,
            raw: &self.buf[start..self.pos],
        }))
    }
}

/// Read a varint from the start of `buf`: the value and the bytes it took.
pub fn read_varint(buf: &[u8]) -> Result<(u64, usize), Error> {
    let mut value: u64 = 0;
    for (i, byte) in buf.iter().enumerate().take(10) {
        let low = u64::from(byte & 0x7f);
        if i == 9 && low > 1 {
            return Err(Error::Varint);
        }
        value |= low << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    if buf.len() >= 10 {
        Err(Error::Varint)
    } else {
        Err(Error::Truncated("varint"))
    }
}

/// Append `value` as a varint.
pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_tag(out: &mut Vec<u8>, number: u32, wire_type: u8) {
    put_varint(out, (u64::from(number) << 3) | u64::from(wire_type));
}

/// A varint field (skipped when zero, as proto3 does for scalars).
pub fn put_uint(out: &mut Vec<u8>, number: u32, value: u64) {
    if value != 0 {
        put_tag(out, number, VARINT);
        put_varint(out, value);
    }
}

/// A bool field (skipped when false).
pub fn put_bool(out: &mut Vec<u8>, number: u32, value: bool) {
    put_uint(out, number, u64::from(value));
}

/// A length-delimited field, always written (an empty sub-message still says "set").
pub fn put_bytes(out: &mut Vec<u8>, number: u32, value: &[u8]) {
    put_tag(out, number, LEN);
    put_varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

/// A string field (skipped when empty, as proto3 does).
pub fn put_str(out: &mut Vec<u8>, number: u32, value: &str) {
    if !value.is_empty() {
        put_bytes(out, number, value.as_bytes());
    }
}

/// A string field, only when set.
pub fn put_opt_str(out: &mut Vec<u8>, number: u32, value: &Option<String>) {
    if let Some(value) = value {
        put_bytes(out, number, value.as_bytes());
    }
}

/// A sub-message field, only when set.
pub fn put_msg<M: Encode>(out: &mut Vec<u8>, number: u32, value: &Option<M>) {
    if let Some(value) = value {
        put_bytes(out, number, &value.encode());
    }
}

/// A message Glider can write.
pub trait Encode {
    /// The message's bytes.
    fn encode(&self) -> Vec<u8>;
}

/// The fields of a message that Glider does not model, kept byte for byte in the order
/// they arrived and written back after the known ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Unknown(pub Vec<u8>);

impl Unknown {
    /// Keep `field` verbatim.
    pub fn keep(&mut self, field: &Field<'_>) {
        self.0.extend_from_slice(field.raw);
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Typed access to a known field, with the message's name for errors.
pub struct Known<'f, 'a> {
    pub message: &'static str,
    pub field: &'f Field<'a>,
}

impl<'a> Known<'_, 'a> {
    fn mismatch(&self, expected: u8) -> Error {
        Error::FieldType {
            message: self.message,
            field: self.field.number,
            wire_type: self.field.value.wire_type(),
            expected,
        }
    }

    /// The field's bytes (strings, bytes, sub-messages).
    pub fn bytes(&self) -> Result<&'a [u8], Error> {
        match self.field.value {
            Value::Len(b) => Ok(b),
            _ => Err(self.mismatch(LEN)),
        }
    }

    /// The field as UTF-8 text.
    pub fn string(&self) -> Result<String, Error> {
        let bytes = self.bytes()?;
        std::str::from_utf8(bytes)
            .map(str::to_owned)
            .map_err(|_| Error::Utf8 {
                message: self.message,
                field: self.field.number,
            })
    }

    /// The field as a varint.
    pub fn uint(&self) -> Result<u64, Error> {
        match self.field.value {
            Value::Varint(v) => Ok(v),
            _ => Err(self.mismatch(VARINT)),
        }
    }
}

/// Deepest nesting a decoder follows; Cursor's messages Glider reads are 5 levels deep.
pub const MAX_DEPTH: usize = 32;

/// Visit every field of `buf`, handing known numbers to `known` and keeping the rest.
/// `known` returns `false` for a number it does not model.
pub fn decode_fields<'a>(
    buf: &'a [u8],
    unknown: &mut Unknown,
    mut known: impl FnMut(&Field<'a>) -> Result<bool, Error>,
) -> Result<(), Error> {
    let mut reader = Reader::new(buf);
    while let Some(field) = reader.next_field()? {
        if !known(&field)? {
            unknown.keep(&field);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_garbage() {
        for value in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert_eq!(read_varint(&out), Ok((value, out.len())));
        }
        assert_eq!(read_varint(&[0x80, 0x80]), Err(Error::Truncated("varint")));
        assert_eq!(read_varint(&[0xff; 11]), Err(Error::Varint));
        // Ten bytes whose last one overflows 64 bits.
        let mut over = vec![0xff; 9];
        over.push(0x02);
        assert_eq!(read_varint(&over), Err(Error::Varint));
    }

    #[test]
    fn fields_carry_their_raw_bytes() {
        let mut buf = Vec::new();
        put_str(&mut buf, 1, "hi");
        put_uint(&mut buf, 3, 7);
        buf.extend_from_slice(&[0x2d, 1, 2, 3, 4]); // field 5, fixed32
        let mut reader = Reader::new(&buf);
        let a = reader.next_field().expect("ok").expect("field");
        assert_eq!((a.number, a.value), (1, Value::Len(b"hi")));
        assert_eq!(a.raw, &buf[..4]);
        let b = reader.next_field().expect("ok").expect("field");
        assert_eq!((b.number, b.value), (3, Value::Varint(7)));
        let c = reader.next_field().expect("ok").expect("field");
        assert_eq!(c.value, Value::I32(0x04030201));
        assert_eq!(reader.next_field(), Ok(None));
    }

    #[test]
    fn malformed_fields_are_errors() {
        // Group wire type.
        assert!(matches!(
            Reader::new(&[0x0b]).next_field(),
            Err(Error::WireType { .. })
        ));
        // Field 0.
        assert_eq!(
            Reader::new(&[0x00, 0x00]).next_field(),
            Err(Error::FieldNumber(0))
        );
        // Length beyond the buffer.
        assert!(matches!(
            Reader::new(&[0x0a, 0x05, b'a']).next_field(),
            Err(Error::Truncated(_))
        ));
        // Fixed64 cut short.
        assert!(matches!(
            Reader::new(&[0x09, 1, 2]).next_field(),
            Err(Error::Truncated(_))
        ));
    }
}
