//! Backend clients (spec package `backend`) and the resilient half of `orchestrator`:
//! [`client`] speaks HTTP to one backend (plain-HTTP generation requests without
//! reqwest's layers: `direct`), [`breaker`] is its circuit breaker,
//! [`cooldown`] holds back callers a 429 told to wait, [`credentials`] decides whose key
//! a request carries, [`embeddings`] asks one for vectors, [`foreground`] counts a backend's client requests (which background
//! work yields to), [`pool`] spreads sessions over a backend's replicas, [`health`] probes it (and [`capabilities`] reads what its models
//! can do), and [`executor`] runs the backup sequence over candidates.

pub mod breaker;
pub mod capabilities;
pub mod client;
pub mod cooldown;
pub mod credentials;
mod direct;
pub mod embeddings;
pub mod executor;
pub mod failure;
pub mod foreground;
pub mod health;
pub mod pool;

pub use breaker::{BreakerState, CircuitBreaker};
pub use capabilities::Capabilities;
pub use client::{Backend, BodyStream, UpstreamRequest, UpstreamResponse};
pub use credentials::Credentials;
pub use embeddings::Embedded;
pub use executor::{Candidate, Executed, execute, execute_prepared};
pub use failure::AttemptFailure;
pub use health::Health;
pub use pool::{SESSION_KEY_HEADER, session_key_digest};
