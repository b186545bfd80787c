//! The stable-Rust twin of `fuzz/`: many seeded random and mutated inputs through every
//! decoder, asserting that none panics and that whatever decodes re-encodes to a value
//! that decodes the same.

use glider_cursorrpc::frame::{EndOfStream, FrameDecoder, encode_frame};
use glider_cursorrpc::messages::{
    AgentClientMessage, AgentRunRequest, AgentServerMessage, BidiAppendRequest, BidiRequestId,
    ConversationAction, InteractionUpdate, ModelDetails, hex_encode,
};
use glider_cursorrpc::wire::{Encode, Unknown};
use glider_cursorrpc::{Update, server_frame};
use glider_test_support::rng::Rng;

fn seeds() -> Vec<Vec<u8>> {
    let message = AgentClientMessage {
        run_request: Some(AgentRunRequest {
            action: Some(ConversationAction::user_text("hello there", "m-1")),
            model_details: Some(ModelDetails {
                model_id: "composer-1".into(),
                unknown: Unknown::default(),
            }),
            conversation_id: Some("c-1".into()),
            subagent_type_name: None,
            unknown: Unknown(vec![0x42, 0x02, b'h', b'i']),
        }),
        ..Default::default()
    };
    let append = BidiAppendRequest {
        data: hex_encode(&message.encode()),
        request_id: Some(BidiRequestId::new("r-1")),
        append_seqno: 2,
        unknown: Unknown::default(),
    };
    let mut stream = server_frame(Update::TextDelta("abc".into()));
    stream.extend(server_frame(Update::TurnEnded));
    stream.extend(encode_frame(
        0,
        &AgentServerMessage::update(Update::Heartbeat).encode(),
        true,
    ));
    stream.extend(EndOfStream::error("internal", "x").encode());
    vec![append.encode(), message.encode(), stream]
}

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..=rng.below(4) {
        match rng.below(5) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len());
                out[i] = rng.next_u64() as u8;
            }
            2 => {
                let cut = rng.below(out.len() + 1);
                out.truncate(cut);
            }
            3 => {
                let i = rng.below(out.len() + 1);
                out.insert(i, rng.next_u64() as u8);
            }
            _ => {
                let i = rng.below(out.len() + 1);
                let extra: Vec<u8> = (0..rng.below(8)).map(|_| rng.next_u64() as u8).collect();
                out.splice(i..i, extra);
            }
        }
    }
    out
}

/// Every decoder on `input`; successful decodes must re-encode consistently.
fn exercise(input: &[u8]) {
    if let Ok(append) = BidiAppendRequest::decode(input) {
        let again = BidiAppendRequest::decode(&append.encode()).expect("re-decode append");
        assert_eq!(again, append);
        if let Ok(message) = append.message() {
            let _ = message.kind();
        }
    }
    if let Ok(message) = AgentClientMessage::decode(input) {
        let again = AgentClientMessage::decode(&message.encode()).expect("re-decode message");
        assert_eq!(again.kind(), message.kind());
    }
    if let Ok(message) = AgentServerMessage::decode(input) {
        let again = AgentServerMessage::decode(&message.encode()).expect("re-decode server");
        assert_eq!(
            again.interaction_update.map(|u| u.update),
            message.interaction_update.map(|u| u.update)
        );
    }
    let _ = InteractionUpdate::decode(input);
    let _ = EndOfStream::parse(input);
    let _ = glider_cursorrpc::view::append(input);
    for gzip in [false, true] {
        let mut decoder = FrameDecoder::with_limit(gzip, 1 << 16);
        decoder.push(input);
        while let Ok(Some(frame)) = decoder.next_frame() {
            let _ = glider_cursorrpc::view::frame(&frame);
        }
    }
}

#[test]
fn random_and_mutated_inputs_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let seeds = seeds();
    for seed in &seeds {
        exercise(seed);
    }
    for _ in 0..20_000 {
        let base = &seeds[rng.below(seeds.len())];
        exercise(&mutate(&mut rng, base));
    }
    for _ in 0..5_000 {
        let len = rng.below(64);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        exercise(&bytes);
    }
}

#[test]
fn deep_nesting_is_refused_not_followed() {
    // 100 levels of field 1 wrapping field 1: a stack bomb for a naive decoder.
    let mut bytes = Vec::new();
    for _ in 0..100 {
        let mut outer = vec![0x0a];
        glider_cursorrpc::wire::put_varint(&mut outer, bytes.len() as u64);
        outer.extend_from_slice(&bytes);
        bytes = outer;
    }
    let _ = AgentClientMessage::decode(&bytes);
    let _ = AgentServerMessage::decode(&bytes);
}
