//! What the engine's black-box tests share: routing an Anthropic Messages body the way
//! a door does (decode, alias, estimate, decide), without sending it.

use glider_engine::{Engine, RouteDecision};
use glider_ngl::{ApiError, Dialect};
use http::HeaderMap;

/// The decision for `body`, or why the router refuses it.
pub fn route(engine: &Engine, body: &[u8]) -> Result<RouteDecision, ApiError> {
    let (request, model, tokens) = engine.prepare(Dialect::Anthropic, body)?;
    engine.decide(
        Dialect::Anthropic,
        &request,
        &HeaderMap::new(),
        &model,
        tokens,
        false,
    )
}
