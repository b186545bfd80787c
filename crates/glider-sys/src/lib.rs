//! Small operating-system helpers shared by Glider's crates (spec packages `atomicfile`,
//! `fileacl` and `runstate`): write a file completely or not at all, keep secret files
//! private to their owner, remember whether the previous run stopped cleanly, and the
//! browser rules (Host, Origin) every HTTP door applies.

pub mod atomicfile;
pub mod fileacl;
pub mod procinfo;
pub mod runstate;
pub mod webguard;
