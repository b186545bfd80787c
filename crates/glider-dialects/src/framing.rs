//! Stream framing shared by the codecs: an incremental Server-Sent Events parser and
//! writer, and an incremental newline-delimited JSON splitter (Ollama). Both parsers scan
//! each byte once (they remember where the last scan stopped) and refuse a line, or an
//! SSE event, longer than [`MAX_LINE_BYTES`], so a backend that never sends a line end
//! costs neither unbounded memory nor quadratic time.

use glider_ngl::{ApiError, StreamEvent};

/// Most bytes one line of a stream may hold before its line end, and most bytes one SSE
/// event's data may hold before the blank line that ends it. A backend streams a reply in
/// many small events, but some (vLLM, Ollama, llama.cpp with non-incremental tool
/// parsing) send a whole tool call's arguments in one line. The longest reply a model
/// produces today is about 128k output tokens: roughly 0.5 MB of text, ~1 MB once
/// JSON-escaped. 8 MiB leaves eight times that as headroom while bounding what one
/// stream can make Glider hold.
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// A stream line or event passed [`MAX_LINE_BYTES`]: the stream is malformed (or
/// hostile) and decoding stops. Once returned, every later `feed` returns it again
/// without buffering anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTooLong {
    /// What passed the limit.
    pub what: TooLongPart,
    /// The limit, in bytes.
    pub limit: usize,
}

/// Which part of a stream [`FrameTooLong`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooLongPart {
    /// One line without its line end.
    Line,
    /// One SSE event's `data:` lines together, before a blank line ended it.
    Event,
}

impl std::fmt::Display for FrameTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let what = match self.what {
            TooLongPart::Line => "a line without a line end",
            TooLongPart::Event => "an event without the blank line that ends it",
        };
        write!(
            f,
            "backend stream sent {what} longer than {} bytes; stream refused",
            self.limit
        )
    }
}

impl std::error::Error for FrameTooLong {}

impl From<FrameTooLong> for ApiError {
    /// A backend's fault, shown to the client as a bad-gateway stream error.
    fn from(error: FrameTooLong) -> Self {
        crate::json::bad_gateway(error.to_string())
    }
}

/// For a stream decoder's `feed`: the parser refused the stream, so the decoder has
/// ended (`ended` is set) and the caller gets the error.
pub(crate) fn refused(error: FrameTooLong, ended: &mut bool) -> ApiError {
    *ended = true;
    error.into()
}

/// For a stream decoder's `finish`: the parser's last event or line, or, when the parser
/// refused the stream and the decoder has not ended yet, the error event that ends it.
pub(crate) fn finished<T>(
    last: Result<Option<T>, FrameTooLong>,
    ended: &mut bool,
    out: &mut Vec<StreamEvent>,
) -> Option<T> {
    match last {
        Ok(last) => last,
        Err(error) => {
            if !*ended {
                out.push(StreamEvent::Error {
                    error: refused(error, ended),
                });
            }
            None
        }
    }
}

/// One Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub event: Option<String>,
    /// All `data:` lines joined with `\n`.
    pub data: String,
}

/// Incremental SSE parser (WHATWG rules: `\n`, `\r\n` or `\r` line ends; `:` comments;
/// one optional space after the colon; an event ends at a blank line).
#[derive(Debug)]
pub struct SseParser {
    /// The unfinished line.
    buf: Vec<u8>,
    /// How much of `buf` has already been searched for a line end.
    scanned: usize,
    event: Option<String>,
    data: Option<String>,
    limit: usize,
    failed: Option<FrameTooLong>,
    /// Names of events nobody reads ([`SseParser::passing_over`]).
    pass_over: Option<fn(&str) -> bool>,
    /// The event being passed over, if any.
    skipped: Skipped,
    /// Bytes examined in all, so a test can show each is examined once.
    #[cfg(test)]
    examined: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::with_limit(MAX_LINE_BYTES)
    }
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// As [`SseParser::new`], refusing lines and events above `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        SseParser {
            buf: Vec::new(),
            scanned: 0,
            event: None,
            data: None,
            limit,
            failed: None,
            pass_over: None,
            skipped: Skipped::default(),
            #[cfg(test)]
            examined: 0,
        }
    }

    /// As [`SseParser::new`], for a reader that drops every event whose name
    /// `pass_over` accepts (a usage-only decoder skips the content events, nearly the
    /// whole stream): such an event, named by an `event:` line before its first `data:`
    /// line, is not returned, and its data goes to a buffer reused from one such event
    /// to the next (no allocation, no `String` per event). A later `event:` line in the
    /// same event does not bring it back. The stream ending inside one is the
    /// exception: `finish` returns it as it would any event, so its reader sees what
    /// the full reading sees (a cut event is an error).
    pub fn passing_over(pass_over: fn(&str) -> bool) -> Self {
        SseParser {
            pass_over: Some(pass_over),
            ..Self::default()
        }
    }

    /// Feed bytes; returns the events completed by them, or the error that ends the
    /// stream when a line or event passes the limit. A line is read in place (copied
    /// only when it is not UTF-8, to replace the bad bytes).
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, FrameTooLong> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        // Taken out while its lines are read, so `line` can borrow the parser.
        let mut buf = std::mem::take(&mut self.buf);
        buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        let mut at = self.scanned;
        loop {
            let Some(offset) = memchr::memchr2(b'\n', b'\r', &buf[at..]) else {
                self.count_examined(buf.len() - at);
                at = buf.len();
                break;
            };
            self.count_examined(offset + 1);
            let end = at + offset;
            let cr = buf[end] == b'\r';
            // A lone `\r` at the very end may be the first half of `\r\n`: wait.
            if cr && end + 1 == buf.len() {
                at = end;
                break;
            }
            at = end + 1;
            if cr && buf.get(at) == Some(&b'\n') {
                at += 1;
            }
            if end - start > self.limit {
                return Err(self.fail(TooLongPart::Line));
            }
            let line = String::from_utf8_lossy(&buf[start..end]);
            start = at;
            if let Some(event) = self.line(&line)? {
                events.push(event);
            }
        }
        buf.drain(..start);
        self.buf = buf;
        self.scanned = at - start;
        if self.buf.len() > self.limit {
            return Err(self.fail(TooLongPart::Line));
        }
        Ok(events)
    }

    /// The stream ended: an event not terminated by a blank line is still delivered.
    /// After a refused line or event this returns that error again.
    pub fn finish(&mut self) -> Result<Option<SseEvent>, FrameTooLong> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        if !self.buf.is_empty() {
            let buf = std::mem::take(&mut self.buf);
            self.scanned = 0;
            if let Some(event) = self.line(&String::from_utf8_lossy(&buf))? {
                return Ok(Some(event));
            }
        }
        if self.skipped.active {
            self.skipped.active = false;
            return Ok(self.skipped.has_data.then(|| SseEvent {
                event: Some(std::mem::take(&mut self.skipped.name)),
                data: std::mem::take(&mut self.skipped.data),
            }));
        }
        self.line("")
    }

    #[cfg(test)]
    fn count_examined(&mut self, bytes: usize) {
        self.examined += bytes;
    }

    #[cfg(not(test))]
    fn count_examined(&mut self, _bytes: usize) {}

    /// Refuse the rest of the stream, dropping what was buffered.
    fn fail(&mut self, what: TooLongPart) -> FrameTooLong {
        let error = FrameTooLong {
            what,
            limit: self.limit,
        };
        self.failed = Some(error);
        self.buf = Vec::new();
        self.scanned = 0;
        self.event = None;
        self.data = None;
        self.skipped = Skipped::default();
        error
    }

    fn line(&mut self, line: &str) -> Result<Option<SseEvent>, FrameTooLong> {
        if line.is_empty() && self.skipped.active {
            self.skipped.active = false;
            return Ok(None);
        }
        if line.is_empty() {
            let data = self.data.take();
            let event = self.event.take();
            return Ok(data.map(|data| SseEvent { event, data }));
        }
        if line.starts_with(':') {
            return Ok(None);
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" if self.skipped.active => {
                self.skipped.name.clear();
                self.skipped.name.push_str(value);
            }
            "event" if self.data.is_none() && self.pass_over.is_some_and(|pass| pass(value)) => {
                self.skipped.begin(value);
                self.event = None;
            }
            "event" => self.event = Some(value.to_owned()),
            "data" if self.skipped.active => {
                let skipped = &mut self.skipped;
                if skipped.has_data {
                    if skipped.data.len() + 1 + value.len() > self.limit {
                        return Err(self.fail(TooLongPart::Event));
                    }
                    skipped.data.push('\n');
                }
                skipped.data.push_str(value);
                skipped.has_data = true;
            }
            "data" => match &mut self.data {
                Some(data) if data.len() + 1 + value.len() > self.limit => {
                    return Err(self.fail(TooLongPart::Event));
                }
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
        Ok(None)
    }
}

/// The event an [`SseParser`] is passing over: its name and data lines, in buffers kept
/// from one such event to the next.
#[derive(Debug, Default)]
struct Skipped {
    active: bool,
    name: String,
    data: String,
    /// A `data:` line came (an event without one is no event).
    has_data: bool,
}

impl Skipped {
    fn begin(&mut self, name: &str) {
        self.active = true;
        self.name.clear();
        self.name.push_str(name);
        self.data.clear();
        self.has_data = false;
    }
}

/// Append one SSE event (`event:` line only when `event` is given).
pub fn write_sse(out: &mut Vec<u8>, event: Option<&str>, data: &str) {
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
    for line in data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
}

/// Append one SSE event whose data is `value` serialised as JSON: written straight into
/// `out` on one `data:` line (compact JSON escapes every line end), no text in between.
pub fn write_sse_json(out: &mut Vec<u8>, event: Option<&str>, value: &impl serde::Serialize) {
    if let Some(event) = event {
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(event.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b"data: ");
    serde_json::to_writer(&mut *out, value)
        .expect("event data serialises (string keys) into a Vec, which takes every write");
    out.extend_from_slice(b"\n\n");
}

/// Incremental splitter of newline-delimited records (blank lines skipped).
#[derive(Debug)]
pub struct LineSplitter {
    /// The unfinished line.
    buf: Vec<u8>,
    /// How much of `buf` has already been searched for `\n`.
    scanned: usize,
    limit: usize,
    failed: Option<FrameTooLong>,
}

impl Default for LineSplitter {
    fn default() -> Self {
        Self::with_limit(MAX_LINE_BYTES)
    }
}

impl LineSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// As [`LineSplitter::new`], refusing lines above `limit` bytes.
    pub fn with_limit(limit: usize) -> Self {
        LineSplitter {
            buf: Vec::new(),
            scanned: 0,
            limit,
            failed: None,
        }
    }

    /// Feed bytes; returns each complete non-blank line (without its line end), or the
    /// error that ends the stream when a line passes the limit.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, FrameTooLong> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        self.buf.extend_from_slice(bytes);
        let mut lines = Vec::new();
        let mut start = 0;
        let mut at = self.scanned;
        while let Some(offset) = self.buf[at..].iter().position(|b| *b == b'\n') {
            let end = at + offset;
            if end - start > self.limit {
                return Err(self.fail());
            }
            push_line(&mut lines, &self.buf[start..end]);
            start = end + 1;
            at = start;
        }
        let searched = self.buf.len();
        self.buf.drain(..start);
        self.scanned = searched - start;
        if self.buf.len() > self.limit {
            return Err(self.fail());
        }
        Ok(lines)
    }

    /// The stream ended: a last line without `\n`, if any. After a refused line this
    /// returns that error again.
    pub fn finish(&mut self) -> Result<Option<String>, FrameTooLong> {
        if let Some(error) = self.failed {
            return Err(error);
        }
        let mut lines = Vec::new();
        push_line(&mut lines, &std::mem::take(&mut self.buf));
        self.scanned = 0;
        Ok(lines.pop())
    }

    /// Refuse the rest of the stream, dropping what was buffered.
    fn fail(&mut self) -> FrameTooLong {
        let error = FrameTooLong {
            what: TooLongPart::Line,
            limit: self.limit,
        };
        self.failed = Some(error);
        self.buf = Vec::new();
        self.scanned = 0;
        error
    }
}

fn push_line(lines: &mut Vec<String>, raw: &[u8]) {
    let text = String::from_utf8_lossy(raw);
    let text = text.trim_end_matches('\r');
    if !text.trim().is_empty() {
        lines.push(text.to_owned());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_anywhere() {
        let wire = b"event: a\ndata: {\"x\":1}\n\n: comment\r\ndata: line1\r\ndata: line2\r\n\r\ndata: tail";
        for split in 0..wire.len() {
            let mut parser = SseParser::new();
            let mut events = parser.feed(&wire[..split]).expect("short lines");
            events.extend(parser.feed(&wire[split..]).expect("short lines"));
            events.extend(parser.finish().expect("short lines"));
            assert_eq!(
                events,
                vec![
                    SseEvent {
                        event: Some("a".into()),
                        data: "{\"x\":1}".into()
                    },
                    SseEvent {
                        event: None,
                        data: "line1\nline2".into()
                    },
                    SseEvent {
                        event: None,
                        data: "tail".into()
                    },
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn events_passed_over_are_not_returned_and_the_rest_are_whole() {
        let wire: &[u8] = b"event: skip\ndata: {\"big\":1}\ndata: more\n\nevent: keep\ndata: k\n\n\
            data: before\nevent: skip\n\nevent: skip\nevent: keep\ndata: gone\n\n\
            data: bad \xff\n\nevent: keep\r\ndata: x\r\n\r\n";
        for split in 0..wire.len() {
            let mut parser = SseParser::passing_over(|name| name == "skip");
            let mut events = parser.feed(&wire[..split]).expect("short lines");
            events.extend(parser.feed(&wire[split..]).expect("short lines"));
            events.extend(parser.finish().expect("short lines"));
            let event = |name: Option<&str>, data: &str| SseEvent {
                event: name.map(str::to_owned),
                data: data.to_owned(),
            };
            assert_eq!(
                events,
                vec![
                    event(Some("keep"), "k"),
                    // Named after its data: returned, for the reader to drop.
                    event(Some("skip"), "before"),
                    event(None, "bad \u{fffd}"),
                    event(Some("keep"), "x"),
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn a_stream_cut_inside_an_event_passed_over_returns_it_at_the_end() {
        for (wire, data) in [
            (&b"event: skip\ndata: {\"cut"[..], "{\"cut"),
            (b"event: skip\ndata: one\ndata: two\n", "one\ntwo"),
        ] {
            let mut parser = SseParser::passing_over(|name| name == "skip");
            assert_eq!(parser.feed(wire).expect("short"), vec![]);
            let last = parser.finish().expect("short");
            assert_eq!(
                last,
                Some(SseEvent {
                    event: Some("skip".into()),
                    data: data.into()
                })
            );
        }
    }

    #[test]
    fn a_json_event_is_written_as_its_text_would_be() {
        let value = serde_json::json!({"text": "two\nlines\r\u{2028} \"quoted\" é \u{1}", "n": [1, 2.5, null]});
        let mut direct = Vec::new();
        write_sse_json(&mut direct, Some("e"), &value);
        let mut through_text = Vec::new();
        write_sse(&mut through_text, Some("e"), &value.to_string());
        assert_eq!(
            String::from_utf8_lossy(&direct),
            String::from_utf8_lossy(&through_text)
        );
    }

    #[test]
    fn sse_writer_round_trips() {
        let mut out = Vec::new();
        write_sse(&mut out, Some("ping"), "a\nb");
        let mut parser = SseParser::new();
        assert_eq!(
            parser.feed(&out).expect("short lines"),
            vec![SseEvent {
                event: Some("ping".into()),
                data: "a\nb".into()
            }]
        );
    }

    #[test]
    fn lines_split_anywhere() {
        let wire = b"{\"a\":1}\n\n{\"b\":2}\r\n{\"c\":3}";
        let mut splitter = LineSplitter::new();
        let mut lines = splitter.feed(&wire[..5]).expect("short lines");
        lines.extend(splitter.feed(&wire[5..]).expect("short lines"));
        lines.extend(splitter.finish().expect("short lines"));
        assert_eq!(lines, vec!["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
    }

    /// A 6 MiB data line (under the limit) fed 1 KiB at a time: each byte is examined
    /// once, not once per feed (the old parser rescanned the buffer from 0: ~18 GB).
    #[test]
    fn a_long_line_in_small_chunks_is_scanned_once() {
        let payload = "x".repeat(6 << 20);
        let wire = format!("data: {payload}\n\n");
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for chunk in wire.as_bytes().chunks(1024) {
            events.extend(parser.feed(chunk).expect("under the limit"));
        }
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.len(), payload.len());
        assert!(
            parser.examined <= wire.len() + 2,
            "examined {} bytes of a {}-byte stream",
            parser.examined,
            wire.len()
        );
    }

    #[test]
    fn an_endless_sse_line_is_refused_at_the_limit_and_stays_refused() {
        let mut parser = SseParser::new();
        let chunk = vec![b'x'; 64 << 10];
        let mut fed = 0;
        let error = loop {
            match parser.feed(&chunk) {
                Ok(events) => assert!(events.is_empty()),
                Err(error) => break error,
            }
            fed += chunk.len();
            assert!(fed <= MAX_LINE_BYTES, "still buffering past the limit");
        };
        assert_eq!(
            error,
            FrameTooLong {
                what: TooLongPart::Line,
                limit: MAX_LINE_BYTES
            }
        );
        assert!(parser.buf.capacity() == 0, "the buffered line is released");
        assert_eq!(parser.feed(b"\n\ndata: 1\n\n"), Err(error));
        assert_eq!(parser.finish(), Err(error));
    }

    #[test]
    fn a_whole_overlong_line_in_one_chunk_is_refused_too() {
        let mut parser = SseParser::with_limit(16);
        let wire = format!("data: {}\n\n", "y".repeat(32));
        assert_eq!(
            parser.feed(wire.as_bytes()).map_err(|e| e.what),
            Err(TooLongPart::Line)
        );
    }

    #[test]
    fn an_event_of_many_short_data_lines_is_refused_at_the_limit() {
        // Passed over or not: a skipped event's data still counts toward the limit.
        let mut passing_over = SseParser::passing_over(|name| name == "skip");
        passing_over.limit = 64;
        passing_over.feed(b"event: skip\n").expect("short");
        for mut parser in [SseParser::with_limit(64), passing_over] {
            let mut result = Ok(Vec::new());
            for _ in 0..20 {
                result = parser.feed(b"data: 0123456789\n");
                if result.is_err() {
                    break;
                }
            }
            assert_eq!(result.map_err(|e| e.what), Err(TooLongPart::Event));
        }
    }

    #[test]
    fn an_endless_ndjson_line_is_refused_at_the_limit() {
        let mut splitter = LineSplitter::with_limit(1000);
        assert_eq!(
            splitter.feed(b"{\"a\":1}\n{\"b\":"),
            Ok(vec!["{\"a\":1}".to_owned()])
        );
        let mut result = Ok(Vec::new());
        for _ in 0..100 {
            result = splitter.feed(&[b'7'; 100]);
            if result.is_err() {
                break;
            }
        }
        let error = result.expect_err("refused");
        assert_eq!(error.limit, 1000);
        assert_eq!(splitter.feed(b"\n"), Err(error));
        assert_eq!(splitter.finish(), Err(error));
    }

    #[test]
    fn a_cr_split_from_its_lf_is_one_line_end() {
        let mut parser = SseParser::new();
        assert_eq!(parser.feed(b"data: a\r").expect("short"), vec![]);
        assert_eq!(
            parser.feed(b"\n\r\n").expect("short"),
            vec![SseEvent {
                event: None,
                data: "a".into()
            }]
        );
    }
}
