//! The text-size estimate every model shares when no tokenizer is known: one token per
//! 3.5 bytes of text. The engine's tokenizer builds its request estimates on it; the
//! context store sizes its continuity record and summaries with it, so both agree on
//! what fits.

/// Bytes per token assumed for models without a known tokenizer.
pub const BYTES_PER_TOKEN: f64 = 3.5;

/// The byte-ratio estimate for a piece of text.
pub fn estimate_text(text: &str) -> u64 {
    estimate_len(text.len())
}

/// The byte-ratio estimate for `bytes` bytes of text.
pub fn estimate_len(bytes: usize) -> u64 {
    (bytes as f64 / BYTES_PER_TOKEN).ceil() as u64
}
