//! The codec conformance matrix: one named test per (dialect × case), e.g.
//! `anthropic::tools_parallel`, expanded by [`codec_matrix!`] from the shared case list
//! in `glider_test_support::conformance`. Each test builds the case's ngl values, sends
//! them through the dialect (request encode → decode, reply encode → decode both whole
//! and as a stream, error encode → decode) and compares what comes back with what the
//! support table says the dialect carries: unchanged, or changed by exactly the declared
//! loss. A declared loss that no longer happens fails too, so the table stays true.

use glider_dialects::{Codec, codec};
use glider_ngl::stream::events_of;
use glider_ngl::{Dialect, Request, Response, ResponseBuilder, StreamEvent};
use glider_test_support::conformance::{Case, Sample, Support, support};

/// Expands to `mod <dialect> { #[test] fn <case>() ... }` for every dialect and case.
macro_rules! codec_matrix {
    ([$($module:ident => $dialect:ident),* $(,)?] $cases:tt) => {
        $( codec_matrix!(@dialect $module $dialect $cases); )*
    };
    (@dialect $module:ident $dialect:ident [$($case:ident => $variant:ident),* $(,)?]) => {
        mod $module {
            $(
                #[test]
                fn $case() {
                    super::check(
                        glider_ngl::Dialect::$dialect,
                        glider_test_support::conformance::Case::$variant,
                    );
                }
            )*
        }
    };
}

glider_test_support::conformance_cases!(codec_matrix! {
    [
        anthropic => Anthropic,
        openai_chat => OpenAiChat,
        openai_responses => OpenAiResponses,
        ollama => Ollama,
    ]
});

/// Send `case`'s sample through `dialect` and hold the result to the support table.
fn check(dialect: Dialect, case: Case) {
    let codec = codec(dialect);
    let sample = case.sample();
    let got = round_trip(codec, case, &sample);
    let declared = support(dialect, case);
    let expected = declared.expected(&sample);
    assert_eq!(
        got,
        expected,
        "{} × {}: declared {declared:?}",
        dialect.as_str(),
        case.name()
    );
    if !matches!(declared, Support::Full) {
        assert_ne!(
            got,
            sample,
            "{} × {}: declared {declared:?} but nothing was lost; make it Full",
            dialect.as_str(),
            case.name()
        );
    }
}

/// What comes back of every value in `sample` after a trip through `codec`.
fn round_trip(codec: &dyn Codec, case: Case, sample: &Sample) -> Sample {
    let requests = sample
        .requests
        .iter()
        .map(|req| request_round_trip(codec, req))
        .collect();
    let responses = sample
        .responses
        .iter()
        .map(|resp| {
            let whole = response_round_trip(codec, resp);
            let streamed = stream_round_trip(codec, resp);
            assert_eq!(
                streamed,
                whole,
                "{}: a streamed reply must carry what a whole one does",
                codec.dialect().as_str()
            );
            whole
        })
        .collect();
    let errors = sample
        .errors
        .iter()
        .map(|err| {
            let body = to_bytes(&codec.encode_error(err));
            codec.decode_error(err.kind.status(), &body)
        })
        .collect();
    let silent_cuts = match case {
        Case::StreamCutBeforeTerminator => sample
            .responses
            .iter()
            .flat_map(|resp| silent_cuts(codec, resp))
            .collect(),
        _ => Vec::new(),
    };
    if case == Case::StreamSplitAnywhere {
        for resp in &sample.responses {
            assert_every_split_decodes_alike(codec, resp);
        }
    }
    Sample {
        requests,
        responses,
        errors,
        silent_cuts,
    }
}

fn to_bytes(value: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_else(|e| panic!("a JSON value serialises: {e}"))
}

/// Encode then decode a request. `extra` is dropped from the result: it is the
/// dialect's own pass-through (Responses always adds one), not part of the ngl value.
fn request_round_trip(codec: &dyn Codec, req: &Request) -> Request {
    let body = to_bytes(&codec.encode_request(req));
    let mut back = codec.decode_request(&body).unwrap_or_else(|e| {
        panic!(
            "{}: own request does not decode: {e}\n{}",
            codec.dialect().as_str(),
            String::from_utf8_lossy(&body)
        )
    });
    back.extra = None;
    back
}

/// Encode then decode a whole reply. The reply id is taken from the sample: each
/// dialect shapes ids its own way (`msg_`, `resp_`, none for Ollama) by design.
fn response_round_trip(codec: &dyn Codec, resp: &Response) -> Response {
    let body = to_bytes(&codec.encode_response(resp));
    let back = codec.decode_response(&body).unwrap_or_else(|e| {
        panic!(
            "{}: own reply does not decode: {e}\n{}",
            codec.dialect().as_str(),
            String::from_utf8_lossy(&body)
        )
    });
    with_id(back, resp)
}

fn with_id(mut back: Response, like: &Response) -> Response {
    back.id = like.id.clone();
    back
}

/// `resp` streamed by the dialect's encoder, as wire bytes.
fn stream_bytes(codec: &dyn Codec, events: &[StreamEvent]) -> Vec<u8> {
    let mut encoder = codec.stream_encoder();
    let mut out = Vec::new();
    for event in events {
        encoder.encode(event, &mut out);
    }
    out
}

/// Decode `bytes` fed in `chunks`; `Err` when the decoder refused a chunk.
fn decode_stream<'a>(
    codec: &dyn Codec,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<Vec<StreamEvent>, glider_ngl::ApiError> {
    let mut decoder = codec.stream_decoder();
    let mut events = Vec::new();
    for chunk in chunks {
        events.extend(decoder.feed(chunk)?);
    }
    events.extend(decoder.finish());
    Ok(events)
}

fn build(events: &[StreamEvent]) -> Result<Response, glider_ngl::ApiError> {
    let mut builder = ResponseBuilder::new();
    for event in events {
        builder.push(event);
    }
    builder.finish()
}

/// Stream a reply with the dialect's encoder and rebuild it with its decoder.
fn stream_round_trip(codec: &dyn Codec, resp: &Response) -> Response {
    let bytes = stream_bytes(codec, &events_of(resp));
    let rebuilt = decode_stream(codec, [bytes.as_slice()])
        .and_then(|events| build(&events))
        .unwrap_or_else(|e| {
            panic!(
                "{}: own stream does not decode: {e}\n{}",
                codec.dialect().as_str(),
                String::from_utf8_lossy(&bytes)
            )
        });
    with_id(rebuilt, resp)
}

/// Feeding the stream one byte at a time, in two pieces split at every byte, and in
/// chunks of a few odd sizes gives the same events as feeding it whole.
fn assert_every_split_decodes_alike(codec: &dyn Codec, resp: &Response) {
    let dialect = codec.dialect().as_str();
    let bytes = stream_bytes(codec, &events_of(resp));
    let whole = decode_stream(codec, [bytes.as_slice()])
        .unwrap_or_else(|e| panic!("{dialect}: own stream does not decode: {e}"));
    let one_byte_at_a_time = decode_stream(codec, bytes.chunks(1));
    assert_eq!(
        one_byte_at_a_time.as_ref(),
        Ok(&whole),
        "{dialect}: fed one byte at a time"
    );
    for size in [2, 3, 5, 7, 13, 64] {
        assert_eq!(
            decode_stream(codec, bytes.chunks(size)).as_ref(),
            Ok(&whole),
            "{dialect}: fed in chunks of {size}"
        );
    }
    for at in 0..=bytes.len() {
        let (head, tail) = bytes.split_at(at);
        assert_eq!(
            decode_stream(codec, [head, tail]).as_ref(),
            Ok(&whole),
            "{dialect}: split at byte {at}"
        );
    }
}

/// The byte lengths at which the stream of `resp`, cut before its terminator, decodes
/// as a complete reply, or ends without the decoder reporting a `StreamEvent::Error`
/// (a decoder that refuses a chunk outright has reported the failure too).
fn silent_cuts(codec: &dyn Codec, resp: &Response) -> Vec<usize> {
    let events = events_of(resp);
    let unfinished = &events[..events.len() - 1];
    let bytes = stream_bytes(codec, unfinished);
    (0..=bytes.len())
        .filter(|&at| match decode_stream(codec, [&bytes[..at]]) {
            Err(_) => false,
            Ok(events) => {
                build(&events).is_ok()
                    || !events
                        .iter()
                        .any(|event| matches!(event, StreamEvent::Error { .. }))
            }
        })
        .collect()
}
