//! Every dialect's stream decoder refuses a backend line that never ends: the error is a
//! bad gateway naming the limit, raised once the limit is passed (not after buffering the
//! whole stream), and every later feed is refused at once.

use glider_dialects::codec;
use glider_dialects::framing::MAX_LINE_BYTES;
use glider_ngl::{Dialect, ErrorKind, StreamEvent};

#[test]
fn every_stream_decoder_refuses_an_endless_line() {
    for dialect in [
        Dialect::Anthropic,
        Dialect::OpenAiChat,
        Dialect::OpenAiResponses,
        Dialect::Ollama,
    ] {
        let mut decoder = codec(dialect).stream_decoder();
        let opening: &[u8] = if dialect == Dialect::Ollama {
            b"{\"model\":\"m\",\"message\":{\"content\":\""
        } else {
            b"data: {\"x\":\""
        };
        decoder.feed(opening).expect("a line just begun");
        let chunk = vec![b'x'; 64 << 10];
        let mut fed = opening.len();
        let error = loop {
            match decoder.feed(&chunk) {
                Ok(events) => assert!(events.is_empty(), "{dialect:?}: {events:?}"),
                Err(error) => break error,
            }
            fed += chunk.len();
            assert!(fed <= MAX_LINE_BYTES, "{dialect:?} buffers past the limit");
        };
        assert_eq!(error.kind, ErrorKind::BadGateway, "{dialect:?}");
        assert!(
            error.message.contains(&MAX_LINE_BYTES.to_string()),
            "{dialect:?}: {}",
            error.message
        );
        assert!(decoder.feed(b"\n\n").is_err(), "{dialect:?} recovered");
        let tail = decoder.finish();
        assert!(
            tail.iter().all(|e| matches!(e, StreamEvent::Error { .. })),
            "{dialect:?}: {tail:?}"
        );
    }
}
