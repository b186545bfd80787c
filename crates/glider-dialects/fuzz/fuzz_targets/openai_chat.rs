//! The openai_chat codec's decoders on arbitrary bytes: `tests/exercise/mod.rs`.
#![no_main]
#[path = "../../tests/exercise/mod.rs"]
mod exercise;
libfuzzer_sys::fuzz_target!(|data: &[u8]| exercise::fuzz_one(glider_ngl::Dialect::OpenAiChat, data));
