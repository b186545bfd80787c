//! Native Glider Language (spec package `ngl`): the one message format every vendor
//! dialect decodes into and encodes from. A request is a list of [`Turn`]s made of
//! [`Part`]s; a streamed reply is a sequence of [`StreamEvent`]s with a fixed grammar
//! (see [`stream`]); [`EditViews`] is the vendor-neutral view of the file edits a turn makes.

pub mod edits;
mod json_len;
pub mod stream;
mod tools;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use edits::{EditView, EditViews};
pub use json_len::json_len;
pub use stream::{ResponseBuilder, StreamEvent};
pub use tools::ToolList;

/// Who speaks a turn. System text keeps its position: Anthropic's top-level `system`
/// becomes leading `System` turns, and `role: "system"` entries inside `messages`
/// (Claude Code sends one after the user turn) stay where they were.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    /// OpenAI's `developer` role maps here too; it is re-emitted as `system` elsewhere.
    User,
    Assistant,
    /// A turn holding only [`Part::ToolResult`]s. Anthropic carries these inside a user
    /// message; its codec splits and merges them.
    Tool,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    pub role: Role,
    pub parts: Vec<Part>,
}

impl Turn {
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        Turn {
            role,
            parts: vec![Part::text(text)],
        }
    }

    /// The concatenated text parts of this turn (tool results and thinking excluded).
    pub fn plain_text(&self) -> String {
        let mut out = String::new();
        for part in &self.parts {
            if let Part::Text { text, .. } = part {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }
}

/// The texts of the text parts among `parts`, in order (thinking left out).
pub fn texts(parts: &[Part]) -> impl Iterator<Item = &str> {
    parts.iter().filter_map(|part| match part {
        Part::Text { text, .. } => Some(text.as_str()),
        _ => None,
    })
}

/// The tool calls among `parts` as (id, name, arguments), in order.
pub fn tool_calls(parts: &[Part]) -> impl Iterator<Item = (&str, &str, &Value)> {
    parts.iter().filter_map(|part| match part {
        Part::ToolCall {
            id,
            name,
            arguments,
        } => Some((id.as_str(), name.as_str(), arguments)),
        _ => None,
    })
}

/// Append a tool result to the conversation: consecutive results share one
/// [`Role::Tool`] turn, as every dialect's parallel tool calls expect.
pub fn push_tool_result(turns: &mut Vec<Turn>, result: Part) {
    match turns.last_mut() {
        Some(last) if last.role == Role::Tool => last.parts.push(result),
        _ => turns.push(Turn {
            role: Role::Tool,
            parts: vec![result],
        }),
    }
}

/// Where an image comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ImageSource {
    Base64 { media_type: String, data: String },
    Url { url: String },
}

/// One piece of a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
        /// Anthropic prompt-caching marker, kept so an Anthropic backend still sees it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_control: Option<Value>,
    },
    Image {
        source: ImageSource,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_control: Option<Value>,
    },
    /// A call the assistant makes. `arguments` is parsed JSON (OpenAI's string form is
    /// parsed on decode and re-serialised on encode). An argument string that is not
    /// JSON is kept as `Value::String` so nothing is lost.
    ToolCall {
        id: String,
        name: String,
        arguments: Value,
    },
    /// The result of a call, in a [`Role::Tool`] turn.
    ToolResult {
        call_id: String,
        /// The called tool's name when the dialect carries it (Ollama wants it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        content: Vec<Part>,
        #[serde(default)]
        is_error: bool,
    },
    /// A block of one dialect that ngl does not model (Anthropic `document`,
    /// `search_result`, `tool_reference`, server-tool results, ...). Kept verbatim so a
    /// backend of the same dialect still gets it; other dialects' encoders drop it.
    Native { dialect: Dialect, raw: Value },
    /// Model reasoning. `signature` is Anthropic's opaque integrity token; `redacted`
    /// holds Anthropic's `redacted_thinking` data (then `text` is empty).
    Thinking {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        redacted: Option<String>,
    },
}

impl Part {
    pub fn text(text: impl Into<String>) -> Self {
        Part::Text {
            text: text.into(),
            cache_control: None,
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDef {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    /// A tool that is not a plain function (Anthropic server tools such as
    /// `web_search_20250305`, OpenAI Responses `web_search`, Codex `namespace`): the raw
    /// definition in its dialect. Codecs of the same dialect re-emit it; other dialects
    /// drop it, since no local model can run a vendor's hosted tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<NativeTool>,
}

impl ToolDef {
    /// A function tool named `name` taking any object, with no description.
    pub fn plain(name: &str) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: None,
            parameters: serde_json::json!({"type": "object"}),
            native: None,
        }
    }
}

/// A vendor-specific tool definition kept verbatim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NativeTool {
    pub dialect: Dialect,
    pub raw: Value,
}

/// How the model must use tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum ToolChoice {
    Auto,
    None,
    /// Must call some tool (Anthropic `any`, OpenAI `required`).
    Required,
    Tool {
        name: String,
    },
}

/// Extended thinking / reasoning request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ThinkingConfig {
    /// Anthropic `thinking.budget_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u32>,
    /// OpenAI `reasoning_effort` / `reasoning.effort` (`low`, `medium`, `high`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
}

/// Requested structured output: a JSON schema (OpenAI `response_format` /
/// `text.format`, Anthropic `output_format` / `output_config.format`, Ollama `format`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputSchema {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub schema: Value,
}

/// The four wire dialects Glider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    Anthropic,
    // Named as the docs and logs name them; history written before said `open_ai_*`.
    #[serde(rename = "openai_chat", alias = "open_ai_chat")]
    OpenAiChat,
    #[serde(rename = "openai_responses", alias = "open_ai_responses")]
    OpenAiResponses,
    Ollama,
}

impl Dialect {
    /// Every dialect.
    pub const ALL: [Dialect; 4] = [
        Dialect::Anthropic,
        Dialect::OpenAiChat,
        Dialect::OpenAiResponses,
        Dialect::Ollama,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Anthropic => "anthropic",
            Dialect::OpenAiChat => "openai_chat",
            Dialect::OpenAiResponses => "openai_responses",
            Dialect::Ollama => "ollama",
        }
    }
}

/// A completion request, whatever dialect it came in.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Request {
    pub model: String,
    pub turns: Vec<Turn>,
    #[serde(default)]
    pub tools: ToolList,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn (`None` = dialect default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Vec<String>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<OutputSchema>,
    /// Caller metadata (Anthropic `metadata`, OpenAI `user`/`metadata`): routing may
    /// read a session id from it; it is forwarded only to the dialect it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Fields of the source dialect that ngl does not model (for example Claude Code's
    /// `context_management`, Codex's `store`, `include`, `prompt_cache_key`). Kept with
    /// the dialect they came from; re-emitted only by that dialect's encoder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<DialectExtra>,
}

/// Unmodelled top-level fields of one dialect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DialectExtra {
    pub dialect: Dialect,
    pub fields: Map<String, Value>,
}

impl Request {
    /// The last turn that is not a system one: what the conversation ends with. Claude Code
    /// ends its messages with a `role: system` entry (its agent and skill listing), which
    /// says nothing of whose turn it is.
    pub fn last_turn(&self) -> Option<&Turn> {
        self.turns.iter().rev().find(|t| t.role != Role::System)
    }

    /// Text of the last user turn (what a router looks at).
    pub fn last_user_text(&self) -> Option<String> {
        self.turns
            .iter()
            .rev()
            .find(|t| t.role == Role::User)
            .map(Turn::plain_text)
    }

    /// Unmodelled fields, if they came from `dialect`.
    pub fn extra_for(&self, dialect: Dialect) -> Option<&Map<String, Value>> {
        self.extra
            .as_ref()
            .filter(|e| e.dialect == dialect)
            .map(|e| &e.fields)
    }
}

/// Why generation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    StopSequence,
    ToolUse,
    ContentFilter,
    /// Anthropic `refusal`.
    Refusal,
    /// Anthropic `pause_turn` (a long server-tool turn that the client should continue).
    PauseTurn,
}

impl StopReason {
    /// Every reason.
    pub const ALL: [StopReason; 7] = [
        StopReason::EndTurn,
        StopReason::MaxTokens,
        StopReason::StopSequence,
        StopReason::ToolUse,
        StopReason::ContentFilter,
        StopReason::Refusal,
        StopReason::PauseTurn,
    ];

    /// Its name as serialised (`end_turn`, `tool_use`, …), without building a JSON value.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxTokens => "max_tokens",
            StopReason::StopSequence => "stop_sequence",
            StopReason::ToolUse => "tool_use",
            StopReason::ContentFilter => "content_filter",
            StopReason::Refusal => "refusal",
            StopReason::PauseTurn => "pause_turn",
        }
    }
}

/// Token accounting, in Anthropic's sense: `input_tokens` EXCLUDES cached tokens, which
/// are counted in `cache_read_tokens` / `cache_write_tokens`. OpenAI's `prompt_tokens`
/// includes its `cached_tokens`: its codecs subtract on decode and add on encode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Reasoning tokens included in `output_tokens`, when the backend reports them.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Combine two partial reports (a stream often sends input and output separately):
    /// a later non-zero field wins.
    pub fn merge(&mut self, other: &Usage) {
        fn take(into: &mut u64, from: u64) {
            if from != 0 {
                *into = from;
            }
        }
        take(&mut self.input_tokens, other.input_tokens);
        take(&mut self.output_tokens, other.output_tokens);
        take(&mut self.cache_read_tokens, other.cache_read_tokens);
        take(&mut self.cache_write_tokens, other.cache_write_tokens);
        take(&mut self.reasoning_tokens, other.reasoning_tokens);
    }
}

/// A complete (non-streamed) reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub id: String,
    pub model: String,
    /// Assistant parts in order: thinking, text, tool calls.
    pub parts: Vec<Part>,
    pub stop_reason: StopReason,
    /// The client's stop sequence the reply ended on, when `stop_reason` is
    /// `StopSequence` and it is known (Anthropic `stop_sequence`, vLLM `stop_reason`, or
    /// Glider's own match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

impl Response {
    pub fn plain_text(&self) -> String {
        Turn {
            role: Role::Assistant,
            parts: self.parts.clone(),
        }
        .plain_text()
    }
}

/// Which side an error is on, so every dialect renders the right status and type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// 400: malformed or invalid request.
    InvalidRequest,
    /// 401: missing or bad credentials.
    Authentication,
    /// 403
    Permission,
    /// 404: unknown model or route.
    NotFound,
    /// 413: body over the configured limit.
    RequestTooLarge,
    /// 429
    RateLimit,
    /// 500: a bug or unexpected state inside Glider.
    Internal,
    /// 502: every backend failed, or a backend answered garbage.
    BadGateway,
    /// 503: nothing is configured or reachable for this request.
    Unavailable,
    /// 504: a backend timed out.
    Timeout,
    /// 529: a backend is overloaded.
    Overloaded,
}

impl ErrorKind {
    /// Every kind, in status order (for tests that must cover each one).
    pub const ALL: [ErrorKind; 11] = [
        ErrorKind::InvalidRequest,
        ErrorKind::Authentication,
        ErrorKind::Permission,
        ErrorKind::NotFound,
        ErrorKind::RequestTooLarge,
        ErrorKind::RateLimit,
        ErrorKind::Internal,
        ErrorKind::BadGateway,
        ErrorKind::Unavailable,
        ErrorKind::Timeout,
        ErrorKind::Overloaded,
    ];

    /// The HTTP status of this kind, decided in one place.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::InvalidRequest => 400,
            ErrorKind::Authentication => 401,
            ErrorKind::Permission => 403,
            ErrorKind::NotFound => 404,
            ErrorKind::RequestTooLarge => 413,
            ErrorKind::RateLimit => 429,
            ErrorKind::Internal => 500,
            ErrorKind::BadGateway => 502,
            ErrorKind::Unavailable => 503,
            ErrorKind::Timeout => 504,
            ErrorKind::Overloaded => 529,
        }
    }

    /// The Connect protocol's code for this kind (Cursor's Agent RPC: a unary error's
    /// `code`, a stream's end-of-stream error), decided here beside
    /// [`ErrorKind::status`] so a new kind must be given both. A body over the limit is
    /// `resource_exhausted`, as Connect's own servers say it.
    pub fn connect_code(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::NotFound => "invalid_argument",
            ErrorKind::Authentication => "unauthenticated",
            ErrorKind::Permission => "permission_denied",
            ErrorKind::RequestTooLarge | ErrorKind::RateLimit => "resource_exhausted",
            ErrorKind::Internal | ErrorKind::BadGateway => "internal",
            ErrorKind::Unavailable | ErrorKind::Overloaded => "unavailable",
            ErrorKind::Timeout => "deadline_exceeded",
        }
    }

    /// Inverse of [`ErrorKind::status`] for statuses a backend returns.
    pub fn from_status(status: u16) -> ErrorKind {
        match status {
            400 | 422 => ErrorKind::InvalidRequest,
            401 => ErrorKind::Authentication,
            403 => ErrorKind::Permission,
            404 => ErrorKind::NotFound,
            413 => ErrorKind::RequestTooLarge,
            429 => ErrorKind::RateLimit,
            504 | 408 => ErrorKind::Timeout,
            529 => ErrorKind::Overloaded,
            503 => ErrorKind::Unavailable,
            500..=599 => ErrorKind::BadGateway,
            _ => ErrorKind::InvalidRequest,
        }
    }
}

/// An error to show a client, in whatever dialect it speaks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    /// The offending parameter, when known (OpenAI's `param`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// Seconds the client should wait before trying again (an upstream's `retry-after`,
    /// sent back as the same header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_secs: Option<u64>,
    /// How the request was routed before it failed (`x-glider-route`), when it was.
    #[serde(skip)]
    pub route: Option<String>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
            param: None,
            retry_after_secs: None,
            route: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(ErrorKind::InvalidRequest, message)
    }

    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_retry_after(mut self, secs: Option<u64>) -> Self {
        self.retry_after_secs = secs;
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl std::error::Error for ApiError {}
