//! The anthropic codec's decoders on arbitrary bytes (see `tests/exercise/mod.rs`): the
//! first 8 bytes seed the stream's split points, the rest is the input.
#![no_main]

#[path = "../../tests/exercise/mod.rs"]
mod exercise;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (seed, input) = data.split_at(data.len().min(8));
    let mut seed_bytes = [0u8; 8];
    seed_bytes[..seed.len()].copy_from_slice(seed);
    let mut rng = exercise::Rng(u64::from_le_bytes(seed_bytes) | 1);
    exercise::exercise(glider_ngl::Dialect::Anthropic, input, &mut rng);
});
