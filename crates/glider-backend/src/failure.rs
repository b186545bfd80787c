//! What one failed attempt at a backend looks like: the value the client, the health
//! probe and the executor all speak, kept apart from each so none depends on another.

use glider_ngl::ErrorKind;
use serde::Serialize;

/// Why one attempt did not produce a reply.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptFailure {
    pub backend: String,
    pub kind: ErrorKind,
    pub message: String,
    /// May another backend be tried after this failure?
    pub retryable: bool,
    /// The backend's HTTP status, if it answered.
    pub status: Option<u16>,
    /// The backend's error body, if it answered.
    #[serde(skip)]
    pub body: Option<bytes::Bytes>,
}

impl std::fmt::Display for AttemptFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.backend, self.message)
    }
}
