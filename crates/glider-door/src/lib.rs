//! The door kit (spec packages `api` and `mitm` share it): what every door does with a
//! model request between accepting it and writing its reply, which a door asks for in
//! one call ([`respond`]). It owns the door sequence ([`sequence`]: the body read under
//! `server.max_body_bytes`, delegation first, the pipeline, the
//! `mitm.origin_on_local_error` rule), the rendering of a completion, a delegation or an
//! error in the caller's dialect ([`render`]), the one body wrapper that watches a
//! reply's bytes and finishes its record at the end ([`observed`]), and stored
//! Responses ([`stateful`]). The doors keep only their transport: routes for the
//! gateway, CONNECT/TLS/forwarding for the MITM.

pub mod observed;
pub mod render;
pub mod respond;
pub mod sequence;
pub mod stateful;

pub use observed::{ObservedBody, Observer};
pub use render::error_response;
pub use respond::{ForOrigin, Responded, Visit, respond};
pub use sequence::{
    BodyError, Door, Outcome, ToOrigin, after_local_error, answer, carry_out, read_limited,
    read_within,
};
