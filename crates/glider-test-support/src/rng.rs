//! A small seeded pseudo-random generator (xorshift64*) for the property tests that
//! throw many generated inputs at a parser or a path check: the same sequence on every
//! run, so a failure names its seed and round.

/// xorshift64* from a non-zero seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_the_seed_s_and_stays_in_range() {
        let (mut a, mut b) = (Rng(7), Rng(7));
        let first: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        assert_eq!(first, (0..4).map(|_| b.next_u64()).collect::<Vec<_>>());
        assert!(first.windows(2).all(|w| w[0] != w[1]));
        assert!((0..1000).all(|_| a.below(10) < 10));
        assert_eq!(a.below(0), 0);
    }
}
