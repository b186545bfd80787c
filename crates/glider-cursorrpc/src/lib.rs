//! Cursor's Agent RPC wire (spec package `cursorrpc`, Cursor only): Connect framing
//! ([`frame`]), the protobuf wire primitives ([`wire`]), the field numbers Glider relies
//! on ([`fields`], one place, each with its source), the typed messages built on them
//! ([`messages`]) and a reply Glider writes itself, from ngl events ([`reply`]). Pure
//! codecs: no I/O; malformed input is a typed [`Error`], never a panic.

pub mod fields;
pub mod frame;
pub mod messages;
pub mod reply;
pub mod view;
pub mod wire;

pub use frame::{EndOfStream, EndOfStreamError, Frame, FrameDecoder, encode_frame, message_frame};
pub use messages::{
    AgentClientMessage, AgentRunRequest, AgentServerMessage, AppendKind, BidiAppendRequest,
    BidiRequestId, ConversationAction, InteractionUpdate, ToolCallUpdate, Update, UserMessage,
    server_frame,
};
pub use reply::FrameEncoder;

/// Why bytes could not be read as Cursor's wire format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input ended inside a frame header, a frame, a varint or a field.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A varint longer than ten bytes (or overflowing 64 bits).
    #[error("malformed varint")]
    Varint,
    /// A wire type protobuf does not define (3, 4: groups; 6, 7).
    #[error("unsupported protobuf wire type {wire_type} for field {field}")]
    WireType { field: u64, wire_type: u8 },
    /// Field number 0, or one above 2^29 - 1.
    #[error("invalid protobuf field number {0}")]
    FieldNumber(u64),
    /// A known field arrived with a wire type its schema does not allow.
    #[error("field {field} of {message}: wire type {wire_type} where {expected} was expected")]
    FieldType {
        message: &'static str,
        field: u32,
        wire_type: u8,
        expected: u8,
    },
    /// A string field that is not UTF-8.
    #[error("field {field} of {message} is not UTF-8")]
    Utf8 { message: &'static str, field: u32 },
    /// A frame longer than the decoder's limit.
    #[error("Connect frame of {len} bytes exceeds the limit of {limit}")]
    FrameTooLarge { len: usize, limit: usize },
    /// A compressed frame that does not gunzip, or a stream that did not declare gzip.
    #[error("compressed frame: {0}")]
    Compression(String),
    /// An end-of-stream frame whose payload is not the JSON Connect defines.
    #[error("end-of-stream frame: {0}")]
    EndOfStream(String),
    /// `BidiAppendRequest.data` that is not hex.
    #[error("BidiAppend data is not hex")]
    Hex,
    /// Messages nested deeper than the decoder allows.
    #[error("messages nested too deep")]
    TooDeep,
}
