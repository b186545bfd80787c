//! Typed, borrowing reads of backend JSON for the hot paths (a reply, a stream chunk):
//! structs over the bytes, strings borrowed where they have no escapes, unknown members
//! skipped, no `serde_json::Value` tree. Each reader returns `None` for what its `Value`
//! reading would read differently or refuse, and its caller falls back to that reading,
//! so results and errors are the `Value` reading's. This module holds what they share,
//! and the small shapes the stream writers serialise alike.

use std::borrow::Cow;

use serde::de::{Deserializer, Visitor};
use serde::{Deserialize, Serialize, forward_to_deserialize_any};
use serde_json::value::RawValue;

use crate::scan::ScannedCounts;

/// An optional JSON string, borrowed from the body when it has no escapes, for a field
/// `#[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]`.
/// serde's `borrow` reaches only a bare `Cow<str>` field: inside an `Option` every
/// string was read owned, an allocation each (a reply's id, model, text and finish
/// reason; each stream chunk's).
pub(crate) fn optional_text<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    struct OptionalText;
    impl<'de> Visitor<'de> for OptionalText {
        type Value = Option<Cow<'de, str>>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a string or null")
        }

        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, inner: D) -> Result<Self::Value, D::Error> {
            inner.deserialize_str(self)
        }

        fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(text)))
        }

        fn visit_str<E>(self, text: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(text.to_owned())))
        }

        fn visit_string<E>(self, text: String) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(text)))
        }
    }
    deserializer.deserialize_option(OptionalText)
}

/// A struct read only from a JSON object: serde's derive also reads a struct from an
/// array, by position, which the `Value` decode refuses (`"message": [...]`).
pub(crate) struct Object<T>(pub(crate) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(MapOnly(deserializer)).map(Object)
    }
}

/// A deserializer that reads whatever is asked of it as a map.
struct MapOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for MapOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct enum
        identifier ignored_any
    }
}

/// The counts of a `usage` member read from its bytes by `decode`; absent, `null` or not
/// an object is no usage, as `Value::get` and a filter on objects read it. `None` when
/// the scan cannot read it.
pub(crate) fn usage_counts(
    raw: Option<&RawValue>,
    decode: impl FnOnce(&ScannedCounts<'_>) -> glider_ngl::Usage,
) -> Option<glider_ngl::Usage> {
    match raw.map(RawValue::get) {
        Some(object) if object.starts_with('{') => {
            crate::scan::counts_of(object.as_bytes(), decode).ok()
        }
        _ => Some(glider_ngl::Usage::default()),
    }
}

/// A JSON string member's text, `None` for any other value (what `Value::as_str` reads
/// of it); the reply and chunk readers keep vLLM's `stop_reason`, a string or a token
/// id, this way.
pub(crate) fn string_of(raw: Option<&RawValue>) -> Option<String> {
    string_in(raw?.get())
}

/// [`string_of`] a member's JSON text.
pub(crate) fn string_in(raw: &str) -> Option<String> {
    // A string token the whole parse accepted always decodes.
    raw.starts_with('"')
        .then(|| serde_json::from_str(raw).ok())
        .flatten()
}

/// `{"type": KIND}`: a bare event (`ping`, `message_stop`) or a tag object.
#[derive(Serialize)]
pub(crate) struct Typed {
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
}

/// `{}`.
#[derive(Serialize)]
pub(crate) struct EmptyObject {}

/// Whether a stream decoder tries its borrowing reader before the `Value` reading:
/// always, in a build (a field of no size); the differential tests turn it off
/// (`value_only`) to compare the two readings on the same wire.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Reading {
    #[cfg(test)]
    pub(crate) value_only: bool,
}

impl Reading {
    pub(crate) fn borrowing(self) -> bool {
        #[cfg(test)]
        return !self.value_only;
        #[cfg(not(test))]
        true
    }
}

/// What `decoder` gives for all of `wire` and its end, an error as an `Error` event:
/// the differential tests' one reading of a stream.
#[cfg(test)]
pub(crate) fn decode_all(
    mut decoder: impl crate::StreamDecoder,
    wire: &[u8],
) -> Vec<glider_ngl::StreamEvent> {
    let mut events = match decoder.feed(wire) {
        Ok(events) => events,
        Err(error) => vec![glider_ngl::StreamEvent::Error { error }],
    };
    events.extend(decoder.finish());
    events
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;

    #[derive(serde::Deserialize)]
    struct Field<'a> {
        #[serde(borrow, default, deserialize_with = "super::optional_text")]
        text: Option<Cow<'a, str>>,
    }

    fn read(json: &str) -> Option<Option<Cow<'_, str>>> {
        serde_json::from_str::<Field<'_>>(json).ok().map(|f| f.text)
    }

    #[test]
    fn an_optional_text_is_borrowed_unless_escaped_and_refuses_other_types() {
        assert!(matches!(
            read(r#"{"text": "plain"}"#),
            Some(Some(Cow::Borrowed("plain")))
        ));
        match read(r#"{"text": "a\nb"}"#) {
            Some(Some(Cow::Owned(text))) => assert_eq!(text, "a\nb"),
            other => panic!("an escaped string is read owned: {other:?}"),
        }
        assert_eq!(read(r#"{"text": null}"#), Some(None));
        assert_eq!(read("{}"), Some(None), "absent is the default");
        assert_eq!(
            read(r#"{"text": 1}"#),
            None,
            "a number is refused, as before"
        );
    }
}
