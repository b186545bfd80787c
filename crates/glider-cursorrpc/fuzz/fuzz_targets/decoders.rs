//! Every Cursor RPC decoder on arbitrary bytes: none may panic, and what decodes must
//! re-encode to something that decodes the same.
#![no_main]

use glider_cursorrpc::frame::{EndOfStream, FrameDecoder};
use glider_cursorrpc::messages::{AgentClientMessage, AgentServerMessage, BidiAppendRequest};
use glider_cursorrpc::wire::Encode;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(append) = BidiAppendRequest::decode(data) {
        assert_eq!(BidiAppendRequest::decode(&append.encode()).ok(), Some(append.clone()));
        if let Ok(message) = append.message() {
            let _ = message.kind();
        }
    }
    if let Ok(message) = AgentClientMessage::decode(data) {
        let again = AgentClientMessage::decode(&message.encode()).ok();
        assert_eq!(again.map(|m| m.kind()), Some(message.kind()));
    }
    if let Ok(message) = AgentServerMessage::decode(data) {
        assert!(AgentServerMessage::decode(&message.encode()).is_ok());
    }
    let _ = EndOfStream::parse(data);
    for gzip in [false, true] {
        let mut decoder = FrameDecoder::with_limit(gzip, 1 << 16);
        decoder.push(data);
        while let Ok(Some(frame)) = decoder.next_frame() {
            let _ = glider_cursorrpc::view::frame(&frame);
        }
    }
});
