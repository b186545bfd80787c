//! The borrowing read ([`crate::typed`]) of an Ollama stream line without tool calls —
//! nearly every line a model streams. It reads exactly what the `Value` reading in
//! [`super::stream`] reads and returns `None` for anything that would read differently
//! or be refused (an error, tool calls, a member of an unexpected type, duplicate
//! members, usage the scan cannot read), and the decoder falls back to that reading.

use std::borrow::Cow;

use glider_ngl::Usage;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::response::decode_usage;
use crate::typed::Object;

/// A stream line as [`line`] reads it.
#[derive(Deserialize)]
pub(super) struct Line<'a> {
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    pub(super) created_at: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    pub(super) model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Object<Message<'a>>>,
    #[serde(default)]
    done: Option<bool>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    pub(super) done_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(super) struct Message<'a> {
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    pub(super) thinking: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    pub(super) content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
}

impl<'a> Line<'a> {
    pub(super) fn message(&self) -> Option<&Message<'a>> {
        self.message.as_ref().map(|Object(message)| message)
    }
}

/// A line and, when it is the last (`done: true`), the reply's usage; `None` where the
/// `Value` reading must read it.
pub(super) fn line(text: &str) -> Option<(Line<'_>, Option<Usage>)> {
    let Object(line) = serde_json::from_str::<Object<Line<'_>>>(text).ok()?;
    if line.error.is_some() || line.message().is_some_and(|m| m.tool_calls.is_some()) {
        return None;
    }
    let usage = match line.done {
        // The counts are top-level members of the line itself.
        Some(true) => Some(crate::scan::counts_of(text.as_bytes(), |c| decode_usage(c)).ok()?),
        _ => None,
    };
    Some((line, usage))
}
