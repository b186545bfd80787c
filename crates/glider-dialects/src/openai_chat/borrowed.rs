//! The borrowing reads ([`crate::typed`]) of a well-formed `chat.completion` reply and of
//! a stream chunk without tool calls. Each reads exactly what its `Value` reading reads
//! ([`super::response`], [`super::stream`]) and returns `None` for anything that would
//! read differently or be refused — an `error` member, no choice, a member of an
//! unexpected type, duplicate members, array `content`, a chunk's tool calls — so the
//! caller falls back to it and the result (and every error message) is the `Value`
//! reading's. What a local server (llama.cpp, vLLM, Ollama's OpenAI door) sends decodes
//! here for a fraction of the instructions.

use std::borrow::Cow;

use glider_ngl::stream::parse_arguments;
use glider_ngl::{Part, Response, StopReason, Usage};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::response::{USAGE_COUNTS, decode_finish, decode_usage};
use crate::ReplyText;
use crate::reader::{ReadCounts, Reader, Refused, once};
use crate::typed::{Object, string_of, usage_counts};

#[derive(Deserialize)]
struct Reply<'a> {
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow)]
    choices: Vec<Object<Choice<'a>>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(borrow)]
    message: Object<Message<'a>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    finish_reason: Option<Cow<'a, str>>,
    /// vLLM's: the stop string that matched, or a token id (read only as a string).
    #[serde(borrow, default)]
    stop_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    content: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<Vec<Object<Call<'a>>>>,
}

#[derive(Deserialize)]
struct Call<'a> {
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    function: Object<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(borrow, default)]
    arguments: Option<&'a RawValue>,
}

/// A stream chunk (`chat.completion.chunk`) as [`chunk`] reads it.
#[derive(Deserialize)]
pub(super) struct Chunk<'a> {
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    object: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    pub(super) id: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    pub(super) model: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    usage: Option<&'a RawValue>,
    #[serde(borrow, default)]
    choices: Option<Vec<Object<ChunkChoice<'a>>>>,
}

#[derive(Deserialize)]
pub(super) struct ChunkChoice<'a> {
    #[serde(default)]
    index: Option<u64>,
    #[serde(borrow, default)]
    delta: Option<Object<ChunkDelta<'a>>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    pub(super) finish_reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    stop_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(super) struct ChunkDelta<'a> {
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "crate::typed::optional_text")]
    pub(super) content: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    tool_calls: Option<&'a RawValue>,
}

impl<'a> Chunk<'a> {
    /// The choices the stream reads (index 0; none, or no index, reads as 0).
    pub(super) fn first_choices(&self) -> impl Iterator<Item = &ChunkChoice<'a>> {
        self.choices
            .iter()
            .flatten()
            .map(|Object(choice)| choice)
            .filter(|choice| choice.index.unwrap_or(0) == 0)
    }
}

impl<'a> ChunkChoice<'a> {
    pub(super) fn delta(&self) -> Option<&ChunkDelta<'a>> {
        self.delta.as_ref().map(|Object(delta)| delta)
    }

    /// vLLM's `stop_reason` when it is a string (the stop sequence that matched).
    pub(super) fn stop_sequence(&self) -> Option<String> {
        string_of(self.stop_reason)
    }
}

impl ChunkDelta<'_> {
    /// The reasoning text, `reasoning_content` first.
    pub(super) fn reasoning(&self) -> Option<&str> {
        self.reasoning_content
            .as_deref()
            .or(self.reasoning.as_deref())
    }
}

/// A chunk with its usage, or `None` where the `Value` reading must read it: an error,
/// tool calls (their fragments are read one way only, there), usage the scan cannot
/// read.
pub(super) fn chunk(data: &str) -> Option<(Chunk<'_>, Usage)> {
    let Object(chunk) = serde_json::from_str::<Object<Chunk<'_>>>(data).ok()?;
    if chunk.error.is_some() || chunk.object.as_deref() == Some("error") {
        return None;
    }
    let calls = |Object(choice): &Object<ChunkChoice<'_>>| {
        choice
            .delta()
            .is_some_and(|delta| delta.tool_calls.is_some())
    };
    if chunk.choices.iter().flatten().any(calls) {
        return None;
    }
    let usage = usage_counts(chunk.usage, |counts| decode_usage(counts))?;
    Some((chunk, usage))
}

/// The reply's first choice and the reply with its choices taken out, or `None` where
/// the `Value` decode must read it. The body is validated UTF-8 whole first (by its
/// caller): skipping an unknown member does not check its UTF-8, and the `Value` decode
/// refuses a reply with a bad byte anywhere.
fn first_choice(body: &str) -> Option<(Reply<'_>, Choice<'_>)> {
    let Object(mut reply) = serde_json::from_str::<Object<Reply<'_>>>(body).ok()?;
    if reply.error.is_some() {
        return None;
    }
    let Object(choice) = std::mem::take(&mut reply.choices).into_iter().next()?;
    Some((reply, choice))
}

/// A choice's stop reason and vLLM's stop string (`None` unless the reason is a stop
/// sequence), as the `Value` decode reads them.
fn stop_of(choice: &Choice<'_>, has_calls: bool) -> (StopReason, Option<String>) {
    stop_from(
        choice.finish_reason.as_deref(),
        string_of(choice.stop_reason),
        has_calls,
    )
}

/// [`stop_of`] from the choice's `finish_reason` and its `stop_reason` when a string.
fn stop_from(
    finish_reason: Option<&str>,
    stop_sequence: Option<String>,
    has_calls: bool,
) -> (StopReason, Option<String>) {
    let stop_reason = decode_finish(finish_reason, stop_sequence.is_some(), has_calls);
    let stop_sequence = stop_sequence.filter(|_| stop_reason == StopReason::StopSequence);
    (stop_reason, stop_sequence)
}

/// The reply, or `None` where the `Value` decode must read it.
pub(super) fn decode(body: &[u8]) -> Option<Response> {
    let (reply, choice) = first_choice(std::str::from_utf8(body).ok()?)?;
    let (stop_reason, stop_sequence) = stop_of(&choice, has_calls(&choice));
    let Object(message) = choice.message;
    let mut parts = Vec::new();
    let reasoning = message.reasoning_content.or(message.reasoning);
    if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
        parts.push(Part::Thinking {
            text: text.into_owned(),
            signature: None,
            redacted: None,
        });
    }
    if let Some(text) = message.content.filter(|t| !t.is_empty()) {
        parts.push(Part::text(text.into_owned()));
    }
    if let Some(refusal) = message.refusal {
        parts.push(Part::text(refusal.into_owned()));
    }
    for (i, Object(call)) in message.tool_calls.into_iter().flatten().enumerate() {
        let Object(function) = call.function;
        parts.push(Part::ToolCall {
            id: call.id.map_or_else(|| format!("call_{i}"), Cow::into_owned),
            name: function.name.into_owned(),
            arguments: arguments(function.arguments)?,
        });
    }
    Some(Response {
        id: reply.id.map(Cow::into_owned).unwrap_or_default(),
        model: reply.model.map(Cow::into_owned).unwrap_or_default(),
        parts,
        stop_reason,
        stop_sequence,
        usage: usage_counts(reply.usage, |counts| decode_usage(counts))?,
    })
}

/// Whether the choice's message makes a tool call.
fn has_calls(choice: &Choice<'_>) -> bool {
    let Object(message) = &choice.message;
    message
        .tool_calls
        .as_ref()
        .is_some_and(|calls| !calls.is_empty())
}

/// A reply that makes no tool call, read for its usage, stop reason and text alone
/// ([`ReplyText`]: what [`decode`] reads of them, without building the [`Response`]);
/// `None` for one with tool calls, or where [`decode`] would be `None`.
pub(super) fn reply_text(body: &[u8]) -> Option<ReplyText<'_>> {
    let body = std::str::from_utf8(body).ok()?;
    read_reply_text(body).or_else(|| typed_reply_text(body))
}

/// [`reply_text`] by the typed parse.
fn typed_reply_text(body: &str) -> Option<ReplyText<'_>> {
    let (reply, choice) = first_choice(body)?;
    if has_calls(&choice) {
        return None;
    }
    let (stop_reason, _) = stop_of(&choice, false);
    let Object(message) = choice.message;
    Some(ReplyText {
        usage: usage_counts(reply.usage, |counts| decode_usage(counts))?,
        stop_reason,
        text: joined(message.content, message.refusal),
    })
}

/// A message's text parts joined, as the decode keeps them: its content (when not
/// empty), then its refusal.
fn joined<'a>(content: Option<Cow<'a, str>>, refusal: Option<Cow<'a, str>>) -> Cow<'a, str> {
    match (content.filter(|t| !t.is_empty()), refusal) {
        (Some(content), Some(refusal)) => Cow::Owned(content.into_owned() + &refusal),
        (Some(text), None) | (None, Some(text)) => text,
        (None, None) => Cow::Borrowed(""),
    }
}

/// [`reply_text`] by one pass of the validating reader ([`crate::reader`]): the
/// members the typed parse reads, read as it reads them, the rest validated and
/// skipped — for fewer instructions than the usage scan it stands in for where the
/// context log is off. `None` for what it declines — several choices, tool calls, a
/// member given twice, an escaped member name, an `error` — or refuses, and the typed
/// reading decides.
fn read_reply_text(body: &str) -> Option<ReplyText<'_>> {
    let mut reader = Reader::new(body);
    // `id` and `model` are not used: they are read so that one given twice is
    // declined, as the typed parse (which reads them) refuses it.
    let (mut choice, mut usage, mut id, mut model) = (None, None, None, None);
    reader
        .object(|name, reader| match name {
            Some("error") => Err(Refused),
            Some("choices") => {
                let mut first = None;
                reader.array(|index, reader| match index {
                    0 => once(&mut first, read_choice(reader)?),
                    _ => Err(Refused),
                })?;
                once(&mut choice, first.ok_or(Refused)?)
            }
            Some("usage") => once(&mut usage, ReadCounts::read(reader, USAGE_COUNTS)?),
            Some("id") => once(&mut id, reader.optional_text()?),
            Some("model") => once(&mut model, reader.optional_text()?),
            None => Err(Refused),
            _ => reader.skip(),
        })
        .ok()?;
    reader.end().ok()?;
    let (text, finish_reason, stop_reason) = choice?;
    let stop_sequence = stop_reason.and_then(crate::typed::string_in);
    let (stop_reason, _) = stop_from(finish_reason.as_deref(), stop_sequence, false);
    Some(ReplyText {
        usage: usage.map_or_else(Usage::default, |counts| decode_usage(&counts)),
        stop_reason,
        text,
    })
}

/// A choice as [`read_reply_text`] reads it: its message's text, its `finish_reason`,
/// and its `stop_reason`'s JSON text.
type ChoiceText<'a> = (Cow<'a, str>, Option<Cow<'a, str>>, Option<&'a str>);

fn read_choice<'a>(reader: &mut Reader<'a>) -> Result<ChoiceText<'a>, Refused> {
    let (mut text, mut finish_reason, mut stop_reason) = (None, None, None);
    reader.object(|name, reader| match name {
        Some("message") => once(&mut text, read_message(reader)?),
        Some("finish_reason") => once(&mut finish_reason, reader.optional_text()?),
        Some("stop_reason") => once(&mut stop_reason, reader.value()?),
        None => Err(Refused),
        _ => reader.skip(),
    })?;
    Ok((text.ok_or(Refused)?, finish_reason.flatten(), stop_reason))
}

/// A message's text parts joined ([`joined`]); one with tool calls is declined.
fn read_message<'a>(reader: &mut Reader<'a>) -> Result<Cow<'a, str>, Refused> {
    let (mut content, mut refusal, mut reasoning, mut reasoning_content, mut calls) =
        (None, None, None, None, None);
    reader.object(|name, reader| match name {
        Some("content") => once(&mut content, reader.optional_text()?),
        Some("refusal") => once(&mut refusal, reader.optional_text()?),
        Some("reasoning") => once(&mut reasoning, reader.optional_text()?),
        Some("reasoning_content") => once(&mut reasoning_content, reader.optional_text()?),
        // No call (`null`, `[]`) reads as none; calls are the decode's.
        Some("tool_calls") => match reader.value()? {
            none if no_calls(none) => once(&mut calls, ()),
            _ => Err(Refused),
        },
        None => Err(Refused),
        _ => reader.skip(),
    })?;
    Ok(joined(content.flatten(), refusal.flatten()))
}

/// Whether a message's `tool_calls` (its JSON text) holds no call: `null` or an empty
/// array.
fn no_calls(calls: &str) -> bool {
    calls == "null"
        || calls
            .strip_prefix('[')
            .is_some_and(|rest| rest.trim_start().starts_with(']'))
}

/// A call's arguments as the `Value` decode reads them: a string parsed (or kept when
/// it is not JSON), an object as it is, anything else an empty object.
fn arguments(raw: Option<&RawValue>) -> Option<Value> {
    let raw = raw.map(RawValue::get).unwrap_or("null");
    Some(match raw.as_bytes()[0] {
        b'"' => parse_arguments(&serde_json::from_str::<Cow<'_, str>>(raw).ok()?),
        b'{' => serde_json::from_str(raw).ok()?,
        _ => Value::Object(Map::new()),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use glider_ngl::{Part, Response};

    use super::{decode, reply_text};
    use crate::openai_chat::response::decode_value;

    /// A decoded reply's text parts joined, as [`super::reply_text`] gives them.
    fn joined_text(response: &Response) -> String {
        glider_ngl::texts(&response.parts).collect()
    }

    /// Replies a server sends: each decodes here, to what the `Value` decode reads.
    #[test]
    fn reads_what_the_value_decode_reads() {
        let replies = [
            json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hi \"you\"\n"},
                    "logprobs": null, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
                    "prompt_tokens_details": {"cached_tokens": 4}}}),
            // llama.cpp with reasoning, vLLM's stop string, a refusal, no usage.
            json!({"id": "x", "model": "gemma", "choices": [{"message": {"content": "",
                "reasoning_content": "think", "refusal": ""}, "finish_reason": "stop",
                "stop_reason": "###"}]}),
            json!({"choices": [{"message": {"content": "a", "reasoning": "r"},
                "finish_reason": "stop", "stop_reason": 128009}], "usage": null}),
            // Tool calls: string arguments (JSON and not), an object, none, no id.
            json!({"id": "c", "model": "m", "error": null, "choices": [{"finish_reason": "stop",
                "message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "Read",
                        "arguments": "{\"file_path\": \"/a \\u00e9.rs\", \"n\": 2}"}},
                    {"function": {"name": "f", "arguments": "not json"}},
                    {"id": null, "function": {"name": "g", "arguments": {"b": 1, "a": [true]}}},
                    {"id": "d", "function": {"name": "h", "arguments": null}},
                    {"id": "e", "function": {"name": "i"}}]}}]}),
            json!({"choices": [{"message": {"content": "x"}, "finish_reason": "length"},
                {"message": {"content": "second"}}], "usage": {"completion_tokens": 7,
                "completion_tokens_details": {"reasoning_tokens": 2}, "prompt_tokens": 1.5}}),
        ];
        for reply in replies {
            let body = reply.to_string();
            let borrowed = decode(body.as_bytes()).unwrap_or_else(|| panic!("borrowed: {body}"));
            let value = decode_value(body.as_bytes()).expect("value decode");
            assert_eq!(borrowed, value, "{body}");
            let calls = value
                .parts
                .iter()
                .any(|p| matches!(p, Part::ToolCall { .. }));
            match reply_text(body.as_bytes()) {
                Some(read) => {
                    assert!(
                        !calls,
                        "a reply with tool calls is left to the decode: {body}"
                    );
                    assert_eq!(read.text, joined_text(&value), "{body}");
                    assert_eq!(read.stop_reason, value.stop_reason, "{body}");
                    assert_eq!(read.usage, value.usage, "{body}");
                }
                None => assert!(calls, "only tool calls send the text reading back: {body}"),
            }
        }
    }

    /// The text reading joins content and refusal as the decode's text parts do, and an
    /// empty `tool_calls` is no call.
    #[test]
    fn the_text_reading_joins_what_the_decode_keeps_as_text() {
        let body = br#"{"choices": [{"message": {"content": "a\n", "refusal": "no",
            "reasoning_content": "hidden", "tool_calls": []}, "finish_reason": "length"}]}"#;
        let read = reply_text(body).expect("no calls");
        let value = decode_value(body).expect("value decode");
        assert_eq!(read.text, "a\nno");
        assert_eq!(read.text, joined_text(&value));
        assert_eq!(read.stop_reason, glider_ngl::StopReason::MaxTokens);
        let plain = br#"{"choices": [{"message": {"content": "just this"}}]}"#;
        let read = reply_text(plain).expect("plain");
        assert!(
            matches!(read.text, std::borrow::Cow::Borrowed("just this")),
            "a text without escapes is borrowed from the body"
        );
    }

    /// The reader reads a reply without tool calls as the typed parse
    /// does — text, stop reason and usage — however it is spaced and ordered, and
    /// declines what it does not read for certain.
    #[test]
    fn the_reader_reads_a_text_reply_as_the_typed_parse_does() {
        let usages = [
            json!(null),
            json!({"prompt_tokens": 239, "completion_tokens": 3, "total_tokens": 242,
                "prompt_tokens_details": {"cached_tokens": 7}}),
            json!({"completion_tokens": 2, "prompt_tokens": 1.5}),
            // vLLM's null details; a count past u64, a negative one, a nested array.
            json!({"prompt_tokens": 5, "prompt_tokens_details": null,
                "completion_tokens": 18_446_744_073_709_551_615u64}),
            json!({"prompt_tokens": -3, "completion_tokens": 2, "prompt_tokens_details":
                {"cached_tokens": 2}, "completion_tokens_details": {"reasoning_tokens": 1, "x": [1]}}),
        ];
        let messages = [
            json!({"role": "assistant", "content": "Benchmark reply", "refusal": null}),
            json!({"content": "esc \"q\" \\ \n \u{1} é 😀", "tool_calls": []}),
            json!({"content": "", "refusal": "no", "reasoning_content": "r"}),
            json!({"content": "a", "refusal": "b", "reasoning": null, "tool_calls": null}),
            json!({"content": null}),
            json!({}),
        ];
        let stops = [
            json!({"finish_reason": "stop"}),
            json!({"finish_reason": "length", "stop_reason": null}),
            json!({"finish_reason": "stop", "stop_reason": "###"}),
            json!({"finish_reason": "stop", "stop_reason": 128009}),
            json!({"finish_reason": "content_filter", "logprobs": {"content": [{"t": "}"}]}}),
            json!({"finish_reason": null}),
            json!({}),
        ];
        let mut read = 0;
        for usage in &usages {
            for message in &messages {
                for stop in &stops {
                    let mut choice = stop.clone();
                    choice["message"] = message.clone();
                    choice["index"] = json!(0);
                    let reply = json!({"id": "chatcmpl-1", "object": "chat.completion",
                        "created": 1, "model": "m", "choices": [choice], "usage": usage});
                    for body in [
                        reply.to_string(),
                        serde_json::to_string_pretty(&reply).expect("serialises"),
                    ] {
                        let by_reader = super::read_reply_text(&body)
                            .unwrap_or_else(|| panic!("the reader reads {body}"));
                        let typed = super::typed_reply_text(&body).expect("typed");
                        assert_eq!(by_reader.text, typed.text, "{body}");
                        assert_eq!(by_reader.stop_reason, typed.stop_reason, "{body}");
                        assert_eq!(by_reader.usage, typed.usage, "{body}");
                        read += 1;
                    }
                }
            }
        }
        assert_eq!(read, 5 * 6 * 7 * 2);
        let plain = r#"{"choices": [{"message": {"content": "just this"}}]}"#;
        assert!(matches!(
            super::read_reply_text(plain).map(|read| read.text),
            Some(std::borrow::Cow::Borrowed("just this"))
        ));
        // Left to the typed reading: several choices, a member given twice, an escaped
        // member name, tool calls, a text of another type, an error, no choice or
        // message, a raw control byte in a text, bytes after the reply, JSON it refuses.
        for body in [
            r#"{"choices": [{"message": {"content": "x"}}, {"message": {"content": "y"}}]}"#,
            r#"{"choices": [{"message": {"content": "x", "content": "y"}}]}"#,
            r#"{"choices": [{"message": {"content": "x"}, "finish_reason": null, "finish_reason": "length"}]}"#,
            r#"{"choices": [{"message": {"content": "x"}}], "usage": {}, "usage": {}}"#,
            r#"{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 1, "prompt_tokens": 2}}"#,
            r#"{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens_details": {"cached_tokens": 1}, "prompt_tokens_details": null}}"#,
            r#"{"choices": [{"message": {"cont\u0065nt": "x"}}]}"#,
            r#"{"choices": [{"message": {"content": null, "tool_calls": [{"function": {"name": "f"}}]}}]}"#,
            r#"{"choices": [{"message": {"content": "x", "reasoning": 1}}]}"#,
            r#"{"choices": [{"message": {"content": "x"}, "finish_reason": 1}]}"#,
            r#"{"choices": [{"message": {"content": ["x"]}}]}"#,
            r#"{"choices": [{"message": {"content": "x"}}], "id": 7}"#,
            r#"{"choices": [{"message": {"content": "x"}}], "error": null}"#,
            r#"{"choices": []}"#,
            r#"{"choices": [{"finish_reason": "stop"}]}"#,
            r#"{"choices": [{"message": ["x"]}]}"#,
            "{\"choices\": [{\"message\": {\"content\": \"a\nb\"}}]}",
            r#"{"choices": [{"message": {"content": "x"}}]} x"#,
            r#"{"choices": [{"message": {"content": "x"}}] "#,
            r#"{"choices": [{"message": {"content": "x"}}], "x": tru}"#,
            r#"{"choices": {"message": {"content": "x"}}}"#,
        ] {
            assert!(super::read_reply_text(body).is_none(), "{body}");
        }
    }

    /// What the `Value` decode reads otherwise, or refuses, is left to it.
    #[test]
    fn leaves_the_rest_to_the_value_decode() {
        let ok = r#"{"choices": [{"message": {"content": "x"}}]}"#;
        assert!(decode(ok.as_bytes()).is_some(), "the baseline decodes here");
        let others: [&[u8]; 12] = [
            br#"{"error": {"message": "overloaded"}, "choices": [{"message": {"content": "x"}}]}"#,
            br#"{"choices": []}"#,
            br#"{"choices": null}"#,
            br#"[[{"message": {"content": "x"}}]]"#,
            br#"{"choices": [{"message": ["x"]}]}"#,
            br#"{"choices": [[{"content": "x"}]]}"#,
            br#"{"choices": [{"message": {"content": [{"type": "text", "text": "x"}]}}]}"#,
            br#"{"choices": [{"message": {"content": "x"}}], "model": "a", "model": "b"}"#,
            br#"{"choices": [{"message": {"content": "x", "tool_calls": [{"function": {}}]}}]}"#,
            br#"{"choices": [{"message": {"content": "x"}, "finish_reason": 1}]}"#,
            br#"{"choices": [{"message": {"content": "x"}}], "usage": {"prompt_tokens": 01}}"#,
            b"{\"choices\": [{\"message\": {\"content\": \"x\"}}], \"fp\": \"\xff\"}",
        ];
        for body in others {
            assert!(decode(body).is_none(), "{}", String::from_utf8_lossy(body));
            assert!(
                reply_text(body).is_none(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        // Each of those reads as the `Value` decode reads it, through the codec.
        let duplicate = others[7];
        let read = crate::Codec::decode_response(&super::super::OpenAiChat, duplicate)
            .expect("the last duplicate wins, as a parse keeps it");
        assert_eq!(read.model, "b");
        for refused in [others[0], others[4], others[11]] {
            assert!(crate::Codec::decode_response(&super::super::OpenAiChat, refused).is_err());
        }
    }
}
