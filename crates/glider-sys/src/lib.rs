//! Small operating-system helpers shared by Glider's crates (spec packages `atomicfile`,
//! `fileacl`, `procinfo`, `procutil` and `runstate`): write a file completely or not at
//! all, keep secret files private to their owner, find a connection's process, run a
//! child as a whole process group, remember whether the previous run stopped cleanly,
//! and the browser rules (Host, Origin) every HTTP door applies.

pub mod atomicfile;
pub mod fileacl;
pub mod procinfo;
pub mod procutil;
pub mod runstate;
pub mod webguard;
