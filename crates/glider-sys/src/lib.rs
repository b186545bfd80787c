//! Small operating-system helpers shared by Glider's crates (spec packages `atomicfile`,
//! `fileacl`, `procinfo`, `procutil`, `runstate` and `safego`): write a file completely or not at
//! all, keep secret files private to their owner, find a connection's process, run a
//! child as a whole process group, remember whether the previous run stopped cleanly,
//! the browser rules (Host, Origin) every HTTP door applies, and how those doors
//! serve connections (client timeouts, the drain at shutdown), long-lived tasks a panic
//! does not stop, a supervised stdio JSON-RPC child, the minimal environment every
//! child Glider starts gets, and the one scanner that keeps API keys out of stored text.

pub mod atomicfile;
pub mod childenv;
pub mod fileacl;
pub mod listen;
pub mod procinfo;
pub mod procutil;
pub mod runstate;
pub mod safego;
pub mod secrets;
pub mod stdio_rpc;
pub mod threadprio;
pub mod webguard;
