//! The borrowing read ([`crate::typed`]) of an Anthropic `content_block_delta` event —
//! nearly every event of a stream. It reads exactly what the `Value` reading in
//! [`super::stream`] reads and returns `None` for anything that would read differently
//! or be refused (another event type, a member of an unexpected type, duplicate
//! members, no `index`), and the decoder falls back to that reading.

use std::borrow::Cow;

use serde::Deserialize;

use crate::typed::Object;

#[derive(Deserialize)]
struct Event<'a> {
    #[serde(
        rename = "type",
        borrow,
        default,
        deserialize_with = "crate::typed::optional_text"
    )]
    kind: Option<Cow<'a, str>>,
    index: u64,
    #[serde(borrow, default)]
    delta: Option<Object<Delta<'a>>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(
        rename = "type",
        borrow,
        default,
        deserialize_with = "crate::typed::optional_text"
    )]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    text: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    signature: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    partial_json: Option<Cow<'a, str>>,
}

/// What a content block delta carries, by its delta's type.
pub(super) enum ReadDelta<'a> {
    Text(Cow<'a, str>),
    Thinking(Cow<'a, str>),
    Signature(Cow<'a, str>),
    InputJson(Cow<'a, str>),
    /// No delta, or one of a type ngl does not carry.
    Other,
}

/// A `content_block_delta` event (`name` is its `event:` name; its data's `type`, when
/// present, must say the same, as the `Value` reading reads it): its block index and
/// delta; `None` for any other event — tried by name first, so no other event is parsed
/// twice — and where the `Value` reading must read it.
pub(super) fn read_block_delta<'a>(
    name: Option<&str>,
    data: &'a str,
) -> Option<(u64, ReadDelta<'a>)> {
    const DELTA: &str = "content_block_delta";
    if name != Some(DELTA) {
        return None;
    }
    let Object(event) = serde_json::from_str::<Object<Event<'a>>>(data).ok()?;
    if event.kind.as_deref().is_some_and(|kind| kind != DELTA) {
        return None;
    }
    let Some(Object(delta)) = event.delta else {
        return Some((event.index, ReadDelta::Other));
    };
    let text = |field: Option<Cow<'a, str>>| field.unwrap_or_default();
    let read = match delta.kind.as_deref() {
        Some("text_delta") => ReadDelta::Text(text(delta.text)),
        Some("thinking_delta") => ReadDelta::Thinking(text(delta.thinking)),
        Some("signature_delta") => ReadDelta::Signature(text(delta.signature)),
        Some("input_json_delta") => ReadDelta::InputJson(text(delta.partial_json)),
        _ => ReadDelta::Other,
    };
    Some((event.index, read))
}
