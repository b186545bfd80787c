//! A request as a door hands it to the pipeline, and which door that was.

use bytes::Bytes;
use glider_ngl::Dialect;
use glider_vocab::Door;
use http::HeaderMap;

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
