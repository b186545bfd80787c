//! Counts of the record's work, per thread, for the tests that check it is bounded
//! by the record's lists rather than by the session's length.

use std::cell::Cell;

thread_local! {
    static RENDERED: Cell<usize> = const { Cell::new(0) };
    static VISITED: Cell<usize> = const { Cell::new(0) };
}

pub(crate) fn rendered() {
    RENDERED.with(|c| c.set(c.get() + 1));
}

pub(crate) fn visited() {
    VISITED.with(|c| c.set(c.get() + 1));
}

/// (texts rendered, episodes visited) since the last call.
pub(crate) fn take() -> (usize, usize) {
    (
        RENDERED.with(|c| c.replace(0)),
        VISITED.with(|c| c.replace(0)),
    )
}
