//! Cursor's Agent RPC plane: BidiAppend (the prompt) and RunSSE (the reply) paired by
//! request UUID through the [`hub::AgentFulfillHub`].

pub mod hub;
