//! Cursor's Agent RPC plane: BidiAppend (the prompt) and RunSSE (the reply) paired by
//! request UUID through the [`hub::AgentFulfillHub`]; [`plane`] holds the handlers.

pub mod hub;
pub mod plane;

pub use plane::{AgentRpc, AgentRpcHandler, LocalTurn, Rpc, rpc};
