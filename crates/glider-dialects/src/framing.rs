//! Stream framing shared by the codecs: an incremental Server-Sent Events parser and
//! writer, and an incremental newline-delimited JSON splitter (Ollama).

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
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed bytes; returns the events completed by them.
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        let mut i = 0;
        while i < self.buf.len() {
            let b = self.buf[i];
            if b == b'\n' || b == b'\r' {
                // A lone `\r` at the very end may be the first half of `\r\n`: wait.
                if b == b'\r' && i + 1 == self.buf.len() {
                    break;
                }
                let line = String::from_utf8_lossy(&self.buf[start..i]).into_owned();
                if b == b'\r' && self.buf.get(i + 1) == Some(&b'\n') {
                    i += 1;
                }
                i += 1;
                start = i;
                if let Some(event) = self.line(&line) {
                    events.push(event);
                }
                continue;
            }
            i += 1;
        }
        self.buf.drain(..start);
        events
    }

    /// The stream ended: an event not terminated by a blank line is still delivered.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.buf.is_empty() {
            let line = String::from_utf8_lossy(&std::mem::take(&mut self.buf)).into_owned();
            if let Some(event) = self.line(&line) {
                return Some(event);
            }
        }
        self.line("")
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let data = self.data.take();
            let event = self.event.take();
            return data.map(|data| SseEvent { event, data });
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
        None
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

/// Append one SSE event whose data is `value` serialised as JSON.
pub fn write_sse_json(out: &mut Vec<u8>, event: Option<&str>, value: &serde_json::Value) {
    write_sse(out, event, &value.to_string());
}

/// Incremental splitter of newline-delimited records (blank lines skipped).
#[derive(Debug, Default)]
pub struct LineSplitter {
    buf: Vec<u8>,
}

impl LineSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed bytes; returns each complete non-blank line (without its line end).
    pub fn feed(&mut self, bytes: &[u8]) -> Vec<String> {
        self.buf.extend_from_slice(bytes);
        let mut lines = Vec::new();
        let mut start = 0;
        for i in 0..self.buf.len() {
            if self.buf[i] == b'\n' {
                push_line(&mut lines, &self.buf[start..i]);
                start = i + 1;
            }
        }
        self.buf.drain(..start);
        lines
    }

    /// The stream ended: a last line without `\n`, if any.
    pub fn finish(&mut self) -> Option<String> {
        let mut lines = Vec::new();
        push_line(&mut lines, &std::mem::take(&mut self.buf));
        lines.pop()
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
            let mut events = parser.feed(&wire[..split]);
            events.extend(parser.feed(&wire[split..]));
            events.extend(parser.finish());
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
    fn sse_writer_round_trips() {
        let mut out = Vec::new();
        write_sse(&mut out, Some("ping"), "a\nb");
        let mut parser = SseParser::new();
        assert_eq!(
            parser.feed(&out),
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
        let mut lines = splitter.feed(&wire[..5]);
        lines.extend(splitter.feed(&wire[5..]));
        lines.extend(splitter.finish());
        assert_eq!(lines, vec!["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"]);
    }
}
