//! A request as a door hands it to the pipeline, and which door that was.

use bytes::Bytes;
use glider_ngl::Dialect;
use http::HeaderMap;
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

/// A request as a door received it.
#[derive(Debug, Clone)]
pub struct CompletionRequest {
    pub front: Dialect,
    pub body: Bytes,
    pub headers: HeaderMap,
    /// Which door took it, for the record.
    pub door: Door,
    /// MITM only: a request that is not for a local backend is not executed; the
    /// pipeline answers [`CompleteError::OriginPassthrough`](super::CompleteError) and
    /// the door forwards the original request to the CLI's origin with its credentials
    /// unchanged. Cloud fallback is the origin's job then, so only local candidates
    /// are tried.
    pub origin_passthrough: bool,
}

impl CompletionRequest {
    /// A gateway request.
    pub fn gateway(front: Dialect, body: Bytes, headers: HeaderMap) -> Self {
        CompletionRequest {
            front,
            body,
            headers,
            door: Door::Gateway,
            origin_passthrough: false,
        }
    }

    /// A MITM request; see [`CompletionRequest::origin_passthrough`].
    pub fn mitm(front: Dialect, body: Bytes, headers: HeaderMap, origin_passthrough: bool) -> Self {
        CompletionRequest {
            front,
            body,
            headers,
            door: Door::Mitm,
            origin_passthrough,
        }
    }
}
