//! What the no-panic test (`tests/no_panic.rs`) and the cargo-fuzz targets (`fuzz/`) run
//! on each input, shared so both check the same things: every decoder of a dialect on
//! the bytes (request, response, error, stream fed in random splits), none may panic,
//! and what decodes must encode in every dialect without panicking and re-decode in its
//! own. A stream that is fed without error ends in exactly one terminal event.

use glider_dialects::codec;
use glider_ngl::{Dialect, StreamEvent};

pub const DIALECTS: [Dialect; 4] = Dialect::ALL;

/// The seeded generator the property tests share (a failure names its seed and round).
pub use glider_test_support::rng::Rng;

/// One fuzz input: its first 8 bytes seed the stream's split points, the rest is the
/// input to [`exercise`].
pub fn fuzz_one(dialect: Dialect, data: &[u8]) {
    let (seed, input) = data.split_at(data.len().min(8));
    let mut seed_bytes = [0u8; 8];
    seed_bytes[..seed.len()].copy_from_slice(seed);
    // xorshift never leaves 0.
    let mut rng = Rng(u64::from_le_bytes(seed_bytes) | 1);
    exercise(dialect, input, &mut rng);
}

/// Every decoder of `dialect` on `input`; the stream decoder gets it in chunks whose
/// sizes `rng` picks (1 to 64 bytes, or all at once).
pub fn exercise(dialect: Dialect, input: &[u8], rng: &mut Rng) {
    let own = codec(dialect);
    if let Ok(request) = own.decode_request(input) {
        for other in DIALECTS {
            let _ = codec(other).encode_request(&request);
        }
    }
    if let Ok(response) = own.decode_response(input) {
        for other in DIALECTS {
            let _ = codec(other).encode_response(&response);
        }
        let again = own.encode_response(&response).to_string();
        if let Err(error) = own.decode_response(again.as_bytes()) {
            panic!("{dialect:?}: a decoded response does not re-decode: {error}\n{again}");
        }
    }
    // The text reading (a scan that does not validate what it skips) reads, where the
    // decode reads the same reply, what the decode reads.
    if let Some(read) = own.reply_text(input)
        && let Ok(response) = own.decode_response(input)
    {
        let text: String = glider_ngl::texts(&response.parts).collect();
        assert_eq!(
            (read.text.as_ref(), read.stop_reason, read.usage),
            (text.as_str(), response.stop_reason, response.usage),
            "{dialect:?}: {}",
            String::from_utf8_lossy(input)
        );
    }
    let error = own.decode_error(502, input);
    for other in DIALECTS {
        let _ = codec(other).encode_error(&error);
    }
    stream(dialect, input, rng);
}

fn stream(dialect: Dialect, input: &[u8], rng: &mut Rng) {
    let mut decoder = codec(dialect).stream_decoder();
    let mut events = Vec::new();
    let whole = rng.below(4) == 0;
    let mut rest = input;
    let mut refused = false;
    while !rest.is_empty() {
        let cut = if whole {
            rest.len()
        } else {
            (1 + rng.below(64)).min(rest.len())
        };
        let (chunk, tail) = rest.split_at(cut);
        rest = tail;
        match decoder.feed(chunk) {
            Ok(more) => events.extend(more),
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    if !refused {
        events.extend(decoder.finish());
        let terminal =
            |e: &StreamEvent| matches!(e, StreamEvent::Finish { .. } | StreamEvent::Error { .. });
        let terminals = events.iter().filter(|e| terminal(e)).count();
        assert!(
            terminals == 1 && events.last().is_some_and(terminal),
            "{dialect:?}: a stream must end in exactly one Finish or Error: {events:?}"
        );
    }
    for other in DIALECTS {
        let mut encoder = codec(other).stream_encoder();
        let mut out = Vec::new();
        for event in &events {
            encoder.encode(event, &mut out);
        }
    }
}
