//! A row of events in the compact form the writer stores since schema 6: a byte for the
//! form's version, the events' count, then each event — its time, its turn family and
//! its body — as variable-length integers, one-byte flags and length-prefixed UTF-8.
//! A request's and a reply's members are written one after the other in a fixed order
//! (no names, no escaping); every other event, rare, as its JSON.
//!
//! The strings that repeat through a session (door, front, models, rule, the router's
//! reason, backend, stop reason, error, a tool's name, the family) are written once: a
//! string equal to the last one written whole for the same member earlier in the row
//! (a request's member for requests, a reply's for replies; a tool's name for any call,
//! a result's for any result; the family for any event) is a one-byte reference to it.
//! Texts (a user's, a reply's, a tool result's), keys and ids are always written
//! whole. At saturation the writer serialises every request's two events on a core the
//! requests share, so the bytes it writes, compresses and hands to SQLite are
//! throughput (`bench/results/2026-12-05-context-cost13.md`).
//!
//! Reading checks everything it reads: a short row, a bad length, a reference with
//! nothing before it, a string that is not UTF-8, an unknown tag, bytes left over —
//! each is a [`Malformed`] error, never a panic; room is made only for what the bytes
//! read so far back (a count is not trusted for memory).
//!
//! One file past 600 lines on purpose: the packer and the unpacker are one format
//! written twice, field for field, and are kept side by side so that each change to one
//! is made to the other.

use std::borrow::Cow;

use glider_ngl::{Dialect, StopReason};
use glider_vocab::{Door, RuleName};

use crate::event::{Event, EventBody, ReplyEvent, RequestEvent, ToolCall, ToolResult};

/// The version byte every row starts with.
const FORM: u8 = 1;

/// What follows an event's family: its body's kind.
const TAG_JSON: u8 = 0;
const TAG_REQUEST: u8 = 1;
const TAG_REPLY: u8 = 2;

/// A string's header: absent, the same as the slot's previous string, or `length + 2`
/// bytes of its own.
const ABSENT: u64 = 0;
const SAME: u64 = 1;
const OWN: u64 = 2;

/// Bytes a JSON value's header takes: its length is known only once it is written.
const PADDED: usize = 5;

/// Most tool calls or results a reader makes room for before reading them (an event in
/// memory is far larger than its bytes: room is not made for what a count claims).
const MAX_RESERVED: usize = 16;

/// The members whose previous value a string may repeat by reference.
#[derive(Clone, Copy)]
enum Slot {
    Family,
    Door,
    Front,
    ModelRequested,
    Model,
    Rule,
    Reason,
    Backend,
    ReplyBackend,
    ReplyModel,
    StopReason,
    Error,
    CallName,
    ResultName,
}

const SLOTS: usize = Slot::ResultName as usize + 1;

/// An event of a row: its time, its turn family, its body.
pub(crate) type RowEvent = (u64, Option<String>, EventBody);

/// Why a stored row could not be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub String);

/// `events` as one row, appended to `out`.
pub(crate) fn write_row<'e>(
    out: &mut Vec<u8>,
    events: impl ExactSizeIterator<Item = (u64, Option<&'e str>, &'e EventBody)>,
) -> serde_json::Result<()> {
    let mut packer = Packer {
        out,
        previous: [None; SLOTS],
    };
    packer.out.push(FORM);
    packer.int(events.len() as u64);
    for (at_ms, family, body) in events {
        packer.int(at_ms);
        packer.opt_str(Slot::Family, family);
        match body {
            EventBody::Request(request) => {
                packer.out.push(TAG_REQUEST);
                packer.request(request)?;
            }
            EventBody::Reply(reply) => {
                packer.out.push(TAG_REPLY);
                packer.reply(reply)?;
            }
            other => {
                packer.out.push(TAG_JSON);
                packer.json(other)?;
            }
        }
    }
    Ok(())
}

/// An event as the log's queue carries it to the writer ([`crate::queue`]): a
/// one-event row whose family member holds the event's session (the writer gives each
/// event its family).
pub(crate) fn write_queued(
    out: &mut Vec<u8>,
    at_ms: u64,
    session: Option<&str>,
    body: &EventBody,
) -> serde_json::Result<()> {
    write_row(out, std::iter::once((at_ms, session, body)))
}

/// An event written by [`write_queued`] (read as a row of one, without a row's list).
pub(crate) fn read_queued(bytes: &[u8]) -> Result<Event, Malformed> {
    let (mut unpacker, count) = Unpacker::open(bytes)?;
    if count != 1 {
        return Err(Malformed(format!(
            "a queued event holds one event, not {count}"
        )));
    }
    let (at_ms, session, body) = unpacker.event()?;
    unpacker.end()?;
    Ok(Event {
        at_ms,
        session,
        body,
    })
}

struct Packer<'o, 'e> {
    out: &'o mut Vec<u8>,
    previous: [Option<&'e str>; SLOTS],
}

impl<'e> Packer<'_, 'e> {
    /// LEB128: seven bits a byte, low first.
    fn int(&mut self, mut value: u64) {
        while value >= 0x80 {
            self.out.push(value as u8 | 0x80);
            value >>= 7;
        }
        self.out.push(value as u8);
    }

    fn bool(&mut self, value: bool) {
        self.out.push(u8::from(value));
    }

    fn opt_bool(&mut self, value: Option<bool>) {
        self.out.push(match value {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        });
    }

    fn opt_int(&mut self, value: Option<u64>) {
        match value {
            None => self.out.push(0),
            Some(value) => {
                self.out.push(1);
                self.int(value);
            }
        }
    }

    /// A string of its own (one that rarely repeats: a request key, a tool result).
    fn own(&mut self, text: &str) {
        self.int(text.len() as u64 + OWN);
        self.out.extend_from_slice(text.as_bytes());
    }

    fn opt_own(&mut self, text: Option<&str>) {
        match text {
            Some(text) => self.own(text),
            None => self.out.push(ABSENT as u8),
        }
    }

    fn str(&mut self, slot: Slot, text: &'e str) {
        self.opt_str(slot, Some(text));
    }

    fn opt_str(&mut self, slot: Slot, text: Option<&'e str>) {
        let Some(text) = text else {
            self.out.push(ABSENT as u8);
            return;
        };
        let previous = &mut self.previous[slot as usize];
        if *previous == Some(text) {
            self.out.push(SAME as u8);
        } else {
            *previous = Some(text);
            self.own(text);
        }
    }

    /// `value`'s JSON as a string of its own. Its header goes first, so it is written
    /// after, in the [`PADDED`] bytes kept for it (LEB128 allows an integer's high
    /// groups to be written as zeros).
    fn json(&mut self, value: &impl serde::Serialize) -> serde_json::Result<()> {
        let at = self.out.len();
        self.out.extend_from_slice(&[0; PADDED]);
        serde_json::to_writer(&mut *self.out, value)?;
        let header = (self.out.len() - at - PADDED) as u64 + OWN;
        if header >> (7 * PADDED) != 0 {
            return Err(serde::ser::Error::custom("a JSON value past 32 GiB"));
        }
        for (index, byte) in self.out[at..at + PADDED].iter_mut().enumerate() {
            let continues = if index + 1 < PADDED { 0x80 } else { 0 };
            *byte = (header >> (7 * index)) as u8 & 0x7f | continues;
        }
        Ok(())
    }

    fn request(&mut self, request: &'e RequestEvent) -> serde_json::Result<()> {
        let RequestEvent {
            request,
            door,
            front,
            model_requested,
            model,
            rule,
            reason,
            backend,
            local,
            estimated_tokens,
            root,
            user_text,
            tool_calls,
            tool_results,
            compaction,
        } = request;
        self.own(request);
        self.str(Slot::Door, door);
        self.str(Slot::Front, front);
        self.str(Slot::ModelRequested, model_requested);
        self.str(Slot::Model, model);
        self.str(Slot::Rule, rule);
        self.str(Slot::Reason, reason);
        self.opt_str(Slot::Backend, backend.as_deref());
        self.opt_bool(*local);
        self.int(*estimated_tokens);
        self.bool(*root);
        self.opt_own(user_text.as_deref());
        self.calls(tool_calls)?;
        self.results(tool_results);
        self.bool(*compaction);
        Ok(())
    }

    fn reply(&mut self, reply: &'e ReplyEvent) -> serde_json::Result<()> {
        let ReplyEvent {
            request,
            backend,
            model,
            local,
            status,
            error,
            input_tokens,
            output_tokens,
            stop_reason,
            tool_calls,
            ttft_ms,
            total_ms,
            text,
        } = reply;
        self.own(request);
        self.opt_str(Slot::ReplyBackend, backend.as_deref());
        self.opt_str(Slot::ReplyModel, model.as_deref());
        self.opt_bool(*local);
        self.opt_int(status.map(u64::from));
        self.opt_str(Slot::Error, error.as_deref());
        self.int(*input_tokens);
        self.int(*output_tokens);
        self.opt_str(Slot::StopReason, stop_reason.as_deref());
        self.calls(tool_calls)?;
        self.opt_int(*ttft_ms);
        self.opt_int(*total_ms);
        self.opt_own(text.as_deref());
        Ok(())
    }

    fn calls(&mut self, calls: &'e [ToolCall]) -> serde_json::Result<()> {
        self.int(calls.len() as u64);
        for ToolCall {
            id,
            name,
            arguments,
        } in calls
        {
            self.own(id);
            self.str(Slot::CallName, name);
            self.json(arguments)?;
        }
        Ok(())
    }

    fn results(&mut self, results: &'e [ToolResult]) {
        self.int(results.len() as u64);
        for ToolResult {
            call_id,
            name,
            is_error,
            text,
            chars,
        } in results
        {
            self.own(call_id);
            self.opt_str(Slot::ResultName, name.as_deref());
            self.bool(*is_error);
            self.own(text);
            self.int(*chars as u64);
        }
    }
}

/// The events of a row written by [`write_row`].
pub(crate) fn read_row(bytes: &[u8]) -> Result<Vec<RowEvent>, Malformed> {
    let (mut unpacker, count) = Unpacker::open(bytes)?;
    // A damaged count is refused by the bytes running out, not trusted for memory.
    let mut events = Vec::with_capacity((count as usize).min(crate::store::MAX_ROW_EVENTS));
    for _ in 0..count {
        events.push(unpacker.event()?);
    }
    unpacker.end()?;
    Ok(events)
}

struct Unpacker<'b> {
    bytes: &'b [u8],
    at: usize,
    previous: [Option<&'b str>; SLOTS],
}

impl<'b> Unpacker<'b> {
    /// A row's reader past its form and count, and the count.
    fn open(bytes: &'b [u8]) -> Result<(Unpacker<'b>, u64), Malformed> {
        let mut unpacker = Unpacker {
            bytes,
            at: 0,
            previous: [None; SLOTS],
        };
        let form = unpacker.byte("the form")?;
        if form != FORM {
            return Err(Malformed(format!("form {form}, not one this Glider reads")));
        }
        let count = unpacker.int("the count")?;
        // Each event takes three bytes at least: a count past that is a damaged one.
        if count > (bytes.len() / 3) as u64 {
            return Err(Malformed(format!(
                "says it holds {count} events in {} bytes",
                bytes.len()
            )));
        }
        Ok((unpacker, count))
    }

    /// The row's next event.
    fn event(&mut self) -> Result<RowEvent, Malformed> {
        let at_ms = self.int("a time")?;
        let family = self.opt_str(Slot::Family)?.map(str::to_owned);
        let body = match self.byte("a tag")? {
            TAG_REQUEST => EventBody::Request(self.request()?),
            TAG_REPLY => EventBody::Reply(self.reply()?),
            TAG_JSON => self.json()?,
            tag => return Err(Malformed(format!("unknown tag {tag}"))),
        };
        Ok((at_ms, family, body))
    }

    /// The row ends with its last event.
    fn end(&self) -> Result<(), Malformed> {
        match self.bytes.len() - self.at {
            0 => Ok(()),
            left => Err(Malformed(format!("{left} bytes after its last event"))),
        }
    }

    fn short(&self, what: &str) -> Malformed {
        Malformed(format!("ends at byte {} inside {what}", self.at))
    }

    fn byte(&mut self, what: &str) -> Result<u8, Malformed> {
        let byte = *self.bytes.get(self.at).ok_or_else(|| self.short(what))?;
        self.at += 1;
        Ok(byte)
    }

    fn int(&mut self, what: &str) -> Result<u64, Malformed> {
        // Most are under 128: one byte.
        if let Some(&byte) = self.bytes.get(self.at)
            && byte < 0x80
        {
            self.at += 1;
            return Ok(u64::from(byte));
        }
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let byte = self.byte(what)?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                break;
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(Malformed(format!(
            "{what} past 64 bits at byte {}",
            self.at
        )))
    }

    fn bool(&mut self, what: &str) -> Result<bool, Malformed> {
        match self.byte(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(Malformed(format!("{what} is {other}, not a boolean"))),
        }
    }

    fn opt_bool(&mut self, what: &str) -> Result<Option<bool>, Malformed> {
        match self.byte(what)? {
            0 => Ok(None),
            1 => Ok(Some(false)),
            2 => Ok(Some(true)),
            other => Err(Malformed(format!(
                "{what} is {other}, not an optional boolean"
            ))),
        }
    }

    fn opt_int(&mut self, what: &str) -> Result<Option<u64>, Malformed> {
        match self.byte(what)? {
            0 => Ok(None),
            1 => self.int(what).map(Some),
            other => Err(Malformed(format!("{what} is marked {other}"))),
        }
    }

    /// A string's header and, for one of its own, its bytes (`None` for an absent one,
    /// `Some(None)` for a reference to the slot's previous one).
    fn text(&mut self, what: &str) -> Result<Option<Option<&'b str>>, Malformed> {
        let header = self.int(what)?;
        if header < OWN {
            return Ok((header == SAME).then_some(None));
        }
        let length = header - OWN;
        let end = (self.at as u64)
            .checked_add(length)
            .filter(|&end| end <= self.bytes.len() as u64)
            .ok_or_else(|| self.short(what))? as usize;
        let text = std::str::from_utf8(&self.bytes[self.at..end])
            .map_err(|error| Malformed(format!("{what} is not UTF-8: {error}")))?;
        self.at = end;
        Ok(Some(Some(text)))
    }

    /// A string written whole (neither absent nor a reference).
    fn whole(&mut self, what: &str) -> Result<&'b str, Malformed> {
        match self.text(what)? {
            Some(Some(text)) => Ok(text),
            _ => Err(Malformed(format!("{what} is missing"))),
        }
    }

    fn own(&mut self, what: &str) -> Result<String, Malformed> {
        self.whole(what).map(str::to_owned)
    }

    fn opt_own(&mut self, what: &str) -> Result<Option<String>, Malformed> {
        match self.text(what)? {
            None => Ok(None),
            Some(Some(text)) => Ok(Some(text.to_owned())),
            Some(None) => Err(Malformed(format!("{what} refers to another"))),
        }
    }

    fn opt_str(&mut self, slot: Slot) -> Result<Option<&'b str>, Malformed> {
        let what = slot.name();
        match self.text(what)? {
            None => Ok(None),
            Some(Some(text)) => {
                self.previous[slot as usize] = Some(text);
                Ok(Some(text))
            }
            Some(None) => match self.previous[slot as usize] {
                Some(text) => Ok(Some(text)),
                None => Err(Malformed(format!("{what} refers to none before it"))),
            },
        }
    }

    fn str(&mut self, slot: Slot) -> Result<String, Malformed> {
        match self.opt_str(slot)? {
            Some(text) => Ok(text.to_owned()),
            None => Err(Malformed(format!("{} is missing", slot.name()))),
        }
    }

    fn opt_string(&mut self, slot: Slot) -> Result<Option<String>, Malformed> {
        Ok(self.opt_str(slot)?.map(str::to_owned))
    }

    /// A name the request path borrows from the engine (a door, a dialect, a rule, a
    /// stop reason): read back borrowed too when it is one of `names` (no allocation a
    /// name a read), else owned.
    fn opt_name<T: Copy>(
        &mut self,
        slot: Slot,
        names: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<Option<Cow<'static, str>>, Malformed> {
        Ok(self.opt_str(slot)?.map(|text| {
            match names
                .iter()
                .map(|&known| name(known))
                .find(|&known| known == text)
            {
                Some(known) => Cow::Borrowed(known),
                None => Cow::Owned(text.to_owned()),
            }
        }))
    }

    fn name<T: Copy>(
        &mut self,
        slot: Slot,
        names: &[T],
        name: fn(T) -> &'static str,
    ) -> Result<Cow<'static, str>, Malformed> {
        self.opt_name(slot, names, name)?
            .ok_or_else(|| Malformed(format!("{} is missing", slot.name())))
    }

    fn json<T: serde::de::DeserializeOwned>(&mut self) -> Result<T, Malformed> {
        serde_json::from_str(self.whole("a JSON value")?)
            .map_err(|error| Malformed(format!("its JSON: {error}")))
    }

    fn count(&mut self, what: &str) -> Result<usize, Malformed> {
        let count = self.int(what)?;
        // Each item takes two bytes at least.
        if count > ((self.bytes.len() - self.at) / 2) as u64 {
            return Err(Malformed(format!(
                "{count} {what}, more than its bytes hold"
            )));
        }
        Ok(count as usize)
    }

    fn request(&mut self) -> Result<RequestEvent, Malformed> {
        Ok(RequestEvent {
            request: self.own("a request key")?,
            door: self.name(Slot::Door, &Door::ALL, Door::as_str)?,
            front: self.name(Slot::Front, &Dialect::ALL, Dialect::as_str)?,
            model_requested: self.str(Slot::ModelRequested)?,
            model: self.str(Slot::Model)?,
            rule: self.name(Slot::Rule, &RuleName::ALL, RuleName::as_str)?,
            reason: self.str(Slot::Reason)?,
            backend: self.opt_string(Slot::Backend)?,
            local: self.opt_bool("local")?,
            estimated_tokens: self.int("estimated tokens")?,
            root: self.bool("root")?,
            user_text: self.opt_own("a user's text")?,
            tool_calls: self.calls()?,
            tool_results: self.results()?,
            compaction: self.bool("compaction")?,
        })
    }

    fn reply(&mut self) -> Result<ReplyEvent, Malformed> {
        Ok(ReplyEvent {
            request: self.own("a request key")?,
            backend: self.opt_string(Slot::ReplyBackend)?,
            model: self.opt_string(Slot::ReplyModel)?,
            local: self.opt_bool("local")?,
            status: match self.opt_int("a status")? {
                None => None,
                Some(status) => Some(
                    u16::try_from(status)
                        .map_err(|_| Malformed(format!("status {status} past 16 bits")))?,
                ),
            },
            error: self.opt_string(Slot::Error)?,
            input_tokens: self.int("input tokens")?,
            output_tokens: self.int("output tokens")?,
            stop_reason: self.opt_name(Slot::StopReason, &StopReason::ALL, StopReason::as_str)?,
            tool_calls: self.calls()?,
            ttft_ms: self.opt_int("the time to the first token")?,
            total_ms: self.opt_int("the total time")?,
            text: self.opt_own("a reply's text")?,
        })
    }

    fn calls(&mut self) -> Result<Vec<ToolCall>, Malformed> {
        let count = self.count("tool calls")?;
        let mut calls = Vec::with_capacity(count.min(MAX_RESERVED));
        for _ in 0..count {
            calls.push(ToolCall {
                id: self.own("a call's id")?,
                name: self.str(Slot::CallName)?,
                arguments: self.json()?,
            });
        }
        Ok(calls)
    }

    fn results(&mut self) -> Result<Vec<ToolResult>, Malformed> {
        let count = self.count("tool results")?;
        let mut results = Vec::with_capacity(count.min(MAX_RESERVED));
        for _ in 0..count {
            results.push(ToolResult {
                call_id: self.own("a result's call id")?,
                name: self.opt_string(Slot::ResultName)?,
                is_error: self.bool("is_error")?,
                text: self.own("a result's text")?,
                chars: usize::try_from(self.int("a result's length")?)
                    .map_err(|_| Malformed("a result's length past usize".into()))?,
            });
        }
        Ok(results)
    }
}

impl Slot {
    fn name(self) -> &'static str {
        match self {
            Slot::Family => "a family",
            Slot::Door => "a door",
            Slot::Front => "a front",
            Slot::ModelRequested => "a requested model",
            Slot::Model => "a model",
            Slot::Rule => "a rule",
            Slot::Reason => "a reason",
            Slot::Backend => "a backend",
            Slot::ReplyBackend => "a reply's backend",
            Slot::ReplyModel => "a reply's model",
            Slot::StopReason => "a stop reason",
            Slot::Error => "an error",
            Slot::CallName => "a tool's name",
            Slot::ResultName => "a result's tool name",
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::event::{CompactionEvent, ToolRunEvent};

    fn packed(events: &[RowEvent]) -> Vec<u8> {
        let mut out = Vec::new();
        write_row(
            &mut out,
            events
                .iter()
                .map(|(at_ms, family, body)| (*at_ms, family.as_deref(), body)),
        )
        .expect("writes");
        out
    }

    fn full_request(key: &str, model: &str) -> EventBody {
        EventBody::Request(RequestEvent {
            request: key.into(),
            door: "gateway".into(),
            front: Cow::Owned("openai_chat".into()),
            model_requested: format!("{model}-alias"),
            model: model.into(),
            rule: "model".into(),
            reason: "served by \"vllm\"\n".into(),
            backend: Some("vllm".into()),
            local: Some(true),
            estimated_tokens: 213,
            root: true,
            user_text: Some("fix the tests — 日本語 \u{1F600}".into()),
            tool_calls: vec![
                ToolCall::new(
                    "call_1".into(),
                    "Edit".into(),
                    json!({"file_path": "src/a.rs", "n": 1.5, "big": u64::MAX, "list": [true, null]}),
                ),
                ToolCall::new("call_2".into(), "Edit".into(), json!("not an object")),
            ],
            tool_results: vec![
                ToolResult::new("call_1".into(), Some("Edit".into()), true, "error:\n\tboom"),
                ToolResult::new("call_2".into(), None, false, ""),
            ],
            compaction: true,
        })
    }

    fn full_reply(key: &str, text: Option<&str>) -> EventBody {
        EventBody::Reply(ReplyEvent {
            request: key.into(),
            backend: Some("vllm".into()),
            model: Some("m".into()),
            local: Some(false),
            status: Some(u16::MAX),
            error: Some("upstream said \"no\"".into()),
            input_tokens: 239,
            output_tokens: u64::MAX,
            stop_reason: Some("end_turn".into()),
            tool_calls: vec![ToolCall::new("c".into(), "Bash".into(), json!({}))],
            ttft_ms: Some(0),
            total_ms: Some(u64::MAX),
            text: text.map(str::to_owned),
        })
    }

    /// Events of every kind, with members present and absent, repeated and changed.
    fn varied() -> Vec<RowEvent> {
        let family = |f: &str| Some(f.to_owned());
        vec![
            (1, family("r-1"), full_request("r-1", "m")),
            (2, family("r-1"), full_reply("r-1", Some("done.\r\n"))),
            (u64::MAX, family("r-1"), full_request("r-2", "m")),
            (0, None, EventBody::Request(RequestEvent::default())),
            (3, family("r-1"), EventBody::Reply(ReplyEvent::default())),
            (4, family("r-3"), full_reply("r-2", None)),
            (5, None, EventBody::Gap { dropped: 3 }),
            (
                6,
                family("r-3"),
                EventBody::Compaction(CompactionEvent {
                    accepted: true,
                    narrative: "we fixed it".into(),
                    missing: vec!["a.rs".into()],
                    ..Default::default()
                }),
            ),
            (
                7,
                family("r-3"),
                EventBody::ToolRun(ToolRunEvent {
                    request: "r-4".into(),
                    tool: "read_file".into(),
                    ..Default::default()
                }),
            ),
            (8, family("r-3"), full_request("r-5", "other")),
            (9, family("r-3"), full_reply("r-5", Some(""))),
        ]
    }

    #[test]
    fn a_row_reads_back_as_it_was_written() {
        let events = varied();
        assert_eq!(read_row(&packed(&events)), Ok(events.clone()));
        for one in &events {
            let one = std::slice::from_ref(one);
            assert_eq!(read_row(&packed(one)), Ok(one.to_vec()));
        }
        assert_eq!(read_row(&packed(&[])), Ok(vec![]));
    }

    #[test]
    fn the_engines_names_read_back_borrowed_and_others_owned() {
        let mut request = full_request("r-1", "m");
        if let EventBody::Request(request) = &mut request {
            request.rule = "a rule from a later Glider".into();
        }
        let events = vec![(1, None, request), (2, None, full_reply("r-1", None))];
        let read = read_row(&packed(&events)).expect("reads");
        assert_eq!(read, events);
        let [
            (_, _, EventBody::Request(request)),
            (_, _, EventBody::Reply(reply)),
        ] = &read[..]
        else {
            panic!("a request and a reply: {read:?}");
        };
        let borrowed = |name: &Cow<'static, str>| matches!(name, Cow::Borrowed(_));
        assert!(borrowed(&request.door) && borrowed(&request.front));
        assert!(!borrowed(&request.rule), "not one of the engine's rules");
        assert!(reply.stop_reason.as_ref().is_some_and(borrowed));
    }

    /// `all` has `count` members, each at the place `place` gives it.
    fn lists_every_variant<T: Copy>(all: &[T], count: usize, place: fn(T) -> usize) {
        assert_eq!(all.len(), count, "one a match arm");
        for (at, &variant) in all.iter().enumerate() {
            assert_eq!(place(variant), at);
        }
    }

    #[test]
    fn the_engines_name_lists_hold_every_variant() {
        // A variant added to one of these enums stops this compiling until it is
        // placed here, next to where its `ALL` lists it.
        lists_every_variant(&Door::ALL, 2, |door| match door {
            Door::Gateway => 0,
            Door::Mitm => 1,
        });
        lists_every_variant(&Dialect::ALL, 4, |dialect| match dialect {
            Dialect::Anthropic => 0,
            Dialect::OpenAiChat => 1,
            Dialect::OpenAiResponses => 2,
            Dialect::Ollama => 3,
        });
        lists_every_variant(&RuleName::ALL, 9, |rule| match rule {
            RuleName::Explicit => 0,
            RuleName::Sticky => 1,
            RuleName::Classifier => 2,
            RuleName::Starlark => 3,
            RuleName::Plugin => 4,
            RuleName::Model => 5,
            RuleName::TokenLimit => 6,
            RuleName::Origin => 7,
            RuleName::LocalFallback => 8,
        });
        lists_every_variant(&StopReason::ALL, 7, |reason| match reason {
            StopReason::EndTurn => 0,
            StopReason::MaxTokens => 1,
            StopReason::StopSequence => 2,
            StopReason::ToolUse => 3,
            StopReason::ContentFilter => 4,
            StopReason::Refusal => 5,
            StopReason::PauseTurn => 6,
        });
    }

    #[test]
    fn a_queued_event_reads_back_with_its_session() {
        for (session, body) in [
            (Some("s-1"), full_request("r-1", "m")),
            (None, full_reply("r-1", Some("done"))),
        ] {
            let event = Event {
                at_ms: 5,
                session: session.map(str::to_owned),
                body,
            };
            let mut out = Vec::new();
            write_queued(&mut out, event.at_ms, event.session.as_deref(), &event.body)
                .expect("writes");
            assert_eq!(read_queued(&out), Ok(event));
        }
        let two = packed(&varied()[..2]);
        assert!(read_queued(&two).is_err(), "a queued event is one event");
    }

    #[test]
    fn a_member_that_repeats_the_one_before_is_written_once() {
        let request = |key: &str| (1, Some("family".to_owned()), full_request(key, "model"));
        let one = packed(&[request("r-1")]).len();
        let two = packed(&[request("r-1"), request("r-2")]).len();
        // The second writes its key, numbers, flags and texts; its door, front, models,
        // rule, reason, backend, family and tool names are a byte each.
        let repeated = ["gateway", "openai_chat", "model-alias", "model", "model"]
            .iter()
            .map(|text| text.len())
            .sum::<usize>()
            + "served by \"vllm\"\n".len()
            + "vllm".len()
            + "family".len()
            + 2 * "Edit".len();
        assert!(two - one <= one - 2 - repeated, "{one} then {two}");
        assert_eq!(
            read_row(&packed(&[request("r-1"), request("r-2")])).expect("reads")[1],
            request("r-2")
        );
    }

    #[test]
    fn a_damaged_row_is_an_error_not_a_panic() {
        let bytes = packed(&varied());
        for end in 0..bytes.len() {
            assert!(read_row(&bytes[..end]).is_err(), "cut at {end}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(
            read_row(&longer),
            Err(Malformed("1 bytes after its last event".into()))
        );
        // Every byte changed to each of a few values: read or refused, never a panic.
        for at in 0..bytes.len() {
            for value in [0, 1, 2, 0x7f, 0x80, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] = value;
                let _ = read_row(&damaged);
            }
        }
        for (bytes, says) in [
            (&[2u8, 0][..], "form 2, not one this Glider reads"),
            (&[FORM, 9][..], "says it holds 9 events in 2 bytes"),
            (
                &[FORM, 1, 0, 1, TAG_JSON, 2][..],
                "a family refers to none before it",
            ),
            (&[FORM, 1, 0, 0, 9, 0, 0][..], "unknown tag 9"),
            (
                &[FORM, 1, 0, 3, 0xff, TAG_JSON, 2][..],
                "a family is not UTF-8",
            ),
            (
                &[
                    FORM, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
                ][..],
                "a time past 64 bits",
            ),
        ] {
            let error = read_row(bytes).expect_err("refused").0;
            assert!(error.contains(says), "{error}");
        }
    }
}
