//! The door a request came in by, named as the request history, `/ws`, `/api` and the
//! context log show it.

use serde::{Serialize, Serializer};

/// The door a request came in by. Its name is what the request history, `/ws` and
/// `/api` show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Door {
    /// The base-URL HTTP door.
    Gateway,
    /// The CONNECT/TLS proxy door (and its transparent mode and Cursor plane).
    Mitm,
}

impl Door {
    /// Every door.
    pub const ALL: [Door; 2] = [Door::Gateway, Door::Mitm];

    pub fn as_str(self) -> &'static str {
        match self {
            Door::Gateway => "gateway",
            Door::Mitm => "mitm",
        }
    }
}

impl std::fmt::Display for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for Door {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}
