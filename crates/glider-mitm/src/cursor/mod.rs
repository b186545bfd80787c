//! Cursor's Agent RPC plane: BidiAppend (the prompt, [`decide`]) and RunSSE (the
//! reply, [`answer`]) paired by request UUID through the [`hub::AgentFulfillHub`];
//! [`plane`] holds the handler, [`watch`] the reply watcher, [`connect`] the Connect
//! envelope.

mod answer;
mod connect;
mod decide;
pub mod hub;
pub mod plane;
mod watch;

pub use decide::LocalTurn;
pub use plane::{AgentRpc, AgentRpcHandler, Rpc, rpc};
