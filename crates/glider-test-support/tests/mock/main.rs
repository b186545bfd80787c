//! Integration tests of the mock vendor servers: every route streaming and not, each
//! refusal, each failure mode, the tool-call script per dialect, and the binary.

mod anthropic;
mod binary;
mod common;
mod failures;
mod ollama;
mod openai_chat;
mod openai_responses;
