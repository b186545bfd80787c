//! The conformance case list shared by the codec matrix (`glider-dialects`'
//! `tests/conformance.rs`) and the end-to-end matrix (`glider`'s `tests/conformance.rs`):
//! each [`Case`]'s name, the ngl values it is checked with ([`Case::sample`]), and the
//! one table ([`support`]) that says what each dialect can carry of it. A loss is
//! declared there with the exact change it makes to the sample, so a test asserts the
//! loss itself instead of skipping the case.
//!
//! One file, past 600 lines, on purpose: a case's sample and every dialect's declared
//! support of it are read together, so adding a case or a dialect is one edit here.

use glider_ngl::{
    ApiError, Dialect, ErrorKind, ImageSource, Part, Request, Response, Role, StopReason,
    ThinkingConfig, ToolChoice, ToolDef, Turn, Usage,
};
use serde_json::json;

/// Calls `$callback! { $($args)* [snake_name => Variant, ...] }` with every case, so a
/// test file can expand one named `#[test]` per case (and per dialect) from this list.
#[macro_export]
macro_rules! conformance_cases {
    ($callback:ident ! { $($args:tt)* }) => {
        $callback! { $($args)* [
            text => Text,
            system_leading => SystemLeading,
            system_mid_conversation => SystemMidConversation,
            images => Images,
            tools_and_choice => ToolsAndChoice,
            tools_parallel => ToolsParallel,
            thinking => Thinking,
            thinking_switch => ThinkingSwitch,
            stop_reasons => StopReasons,
            stop_sequences => StopSequences,
            usage_with_cache => UsageWithCache,
            error_bodies => ErrorBodies,
            stream_split_anywhere => StreamSplitAnywhere,
            stream_cut_before_terminator => StreamCutBeforeTerminator,
        ] }
    };
}

macro_rules! define_case_enum {
    ([$($name:ident => $variant:ident),* $(,)?]) => {
        /// One behaviour every dialect is checked for.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Case {
            $($variant),*
        }

        impl Case {
            /// Every case, in list order.
            pub const ALL: &'static [Case] = &[$(Case::$variant),*];

            /// The snake_case name the generated tests carry.
            pub fn name(self) -> &'static str {
                match self {
                    $(Case::$variant => stringify!($name)),*
                }
            }
        }
    };
}

conformance_cases!(define_case_enum! {});

/// The four dialects, in the order the matrices list them.
pub const DIALECTS: [Dialect; 4] = Dialect::ALL;

/// The ngl values a case is checked with, and (after a round trip) what came back.
/// A check builds one from [`Case::sample`], sends every value through a dialect and
/// collects the results in the same shape, so the two compare field by field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    pub requests: Vec<Request>,
    pub responses: Vec<Response>,
    pub errors: Vec<ApiError>,
    /// Byte lengths at which a stream cut before its terminator still decoded as a
    /// complete reply (the stream-cut case; always expected empty).
    pub silent_cuts: Vec<usize>,
}

/// What a dialect can carry of a case. Every variant but `Full` names the reason and
/// the exact change a round trip makes to the [`Sample`].
#[derive(Debug, Clone, Copy)]
pub enum Support {
    /// The round trip gives back the sample unchanged.
    Full,
    /// Part of the sample has no field in the dialect; `Adjust` turns the sample into
    /// what comes back.
    Lossy(&'static str, Adjust),
    /// A codec bug: the reason names the function and the fix; `Adjust` describes
    /// today's (wrong) result so the test pins it until the fix lands.
    Bug(&'static str, Adjust),
}

/// The change a declared loss makes to a sample.
pub type Adjust = fn(&mut Sample);

impl Support {
    /// The sample a round trip through this dialect must give back.
    pub fn expected(self, sample: &Sample) -> Sample {
        let mut expected = sample.clone();
        if let Support::Lossy(_, adjust) | Support::Bug(_, adjust) = self {
            adjust(&mut expected);
        }
        expected
    }
}

/// The model name every sample uses.
pub const MODEL: &str = "conformance-model";
/// The system text the system cases place.
pub const SYSTEM_TEXT: &str = "be brief";
/// The system text placed after the first user turn.
pub const MID_SYSTEM_TEXT: &str = "the user prefers metric units";
/// The stop sequences of the stop-sequence case.
pub const STOP_SEQUENCES: [&str; 2] = ["END", "###"];
/// A 1x1 transparent PNG (base64), so media-type sniffing sees a real PNG header.
pub const PNG_BASE64: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

/// A function tool taking one `city` argument.
fn city_tool(name: &str, description: &str) -> ToolDef {
    ToolDef {
        name: name.into(),
        description: Some(description.into()),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
        native: None,
    }
}

/// A get_weather function tool.
pub fn weather_tool() -> ToolDef {
    city_tool("get_weather", "Weather for a city")
}

/// A get_time function tool (a second tool, so choices have something to pick from).
pub fn time_tool() -> ToolDef {
    city_tool("get_time", "Local time in a city")
}

/// A request of `turns` with the fields every dialect carries set.
pub fn request(turns: Vec<Turn>) -> Request {
    Request {
        model: MODEL.into(),
        turns,
        max_tokens: Some(256),
        ..Request::default()
    }
}

/// A reply of `parts` with plain usage.
pub fn response(parts: Vec<Part>, stop_reason: StopReason) -> Response {
    Response {
        id: "resp_conformance".into(),
        model: MODEL.into(),
        parts,
        stop_reason,
        stop_sequence: None,
        usage: Usage {
            input_tokens: 12,
            output_tokens: 7,
            ..Usage::default()
        },
    }
}

/// A tool call part.
pub fn call(id: &str, name: &str, city: &str) -> Part {
    Part::ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: json!({"city": city}),
    }
}

/// A tool result part for the call `call_id` of tool `name`.
pub fn result(call_id: &str, name: &str, text: &str) -> Part {
    Part::ToolResult {
        call_id: call_id.into(),
        name: Some(name.into()),
        content: vec![Part::text(text)],
        is_error: false,
    }
}

/// Two calls in one assistant turn, and their results in one tool turn.
pub fn parallel_calls() -> [Part; 2] {
    [
        call("call_paris", "get_weather", "Paris"),
        call("call_rome", "get_time", "Rome"),
    ]
}

/// A signed thinking part (the signature is what Anthropic round trips need).
pub fn thinking_part() -> Part {
    Part::Thinking {
        text: "the user wants the weather".into(),
        signature: Some("sig-conformance".into()),
        redacted: None,
    }
}

/// The stop reasons a reply can end with, each on a reply that makes sense for it.
pub fn stop_reason_replies() -> Vec<Response> {
    use StopReason::*;
    [
        EndTurn,
        MaxTokens,
        StopSequence,
        ToolUse,
        ContentFilter,
        Refusal,
        PauseTurn,
    ]
    .into_iter()
    .map(|stop| {
        let parts = if stop == ToolUse {
            vec![call("call_1", "get_weather", "Paris")]
        } else {
            vec![Part::text(format!("stopped: {stop:?}"))]
        };
        response(parts, stop)
    })
    .collect()
}

/// One error of every kind, each with a message naming its kind.
pub fn every_error() -> Vec<ApiError> {
    ErrorKind::ALL
        .into_iter()
        .map(|kind| ApiError::new(kind, format!("conformance: {kind:?} went wrong")))
        .collect()
}

/// The reply the stream cases encode: every streamable part kind, two tool calls and
/// full usage.
pub fn rich_response() -> Response {
    let [paris, rome] = parallel_calls();
    Response {
        usage: Usage {
            input_tokens: 40,
            output_tokens: 25,
            ..Usage::default()
        },
        ..response(
            vec![
                thinking_part(),
                Part::text("checking both — ünïcode too"),
                paris,
                rome,
            ],
            StopReason::ToolUse,
        )
    }
}

impl Case {
    /// The ngl values this case is checked with.
    pub fn sample(self) -> Sample {
        let user = |text: &str| Turn::text(Role::User, text);
        match self {
            Case::Text => Sample {
                requests: vec![request(vec![user("hello there")])],
                responses: vec![response(vec![Part::text("hi!")], StopReason::EndTurn)],
                ..Sample::default()
            },
            Case::SystemLeading => Sample {
                requests: vec![request(vec![
                    Turn::text(Role::System, SYSTEM_TEXT),
                    user("hello there"),
                ])],
                ..Sample::default()
            },
            Case::SystemMidConversation => Sample {
                requests: vec![request(vec![
                    Turn::text(Role::System, SYSTEM_TEXT),
                    user("how warm is it?"),
                    Turn::text(Role::Assistant, "where?"),
                    Turn::text(Role::System, MID_SYSTEM_TEXT),
                    user("in Paris"),
                ])],
                ..Sample::default()
            },
            Case::Images => Sample {
                requests: vec![request(vec![Turn {
                    role: Role::User,
                    parts: vec![
                        Part::text("what is in these?"),
                        Part::Image {
                            source: ImageSource::Base64 {
                                media_type: "image/png".into(),
                                data: PNG_BASE64.into(),
                            },
                            cache_control: None,
                        },
                        Part::Image {
                            source: ImageSource::Url {
                                url: "https://example.com/cat.png".into(),
                            },
                            cache_control: None,
                        },
                    ],
                }])],
                ..Sample::default()
            },
            Case::ToolsAndChoice => Sample {
                requests: [
                    ToolChoice::Auto,
                    ToolChoice::Required,
                    ToolChoice::Tool {
                        name: "get_time".into(),
                    },
                    ToolChoice::None,
                ]
                .into_iter()
                .map(|choice| Request {
                    tools: vec![weather_tool(), time_tool()].into(),
                    tool_choice: Some(choice),
                    ..request(vec![user("weather in Paris?")])
                })
                .collect(),
                ..Sample::default()
            },
            Case::ToolsParallel => {
                let [paris, rome] = parallel_calls();
                Sample {
                    requests: vec![Request {
                        tools: vec![weather_tool(), time_tool()].into(),
                        ..request(vec![
                            user("weather in Paris and time in Rome?"),
                            Turn {
                                role: Role::Assistant,
                                parts: vec![paris.clone(), rome.clone()],
                            },
                            Turn {
                                role: Role::Tool,
                                parts: vec![
                                    result("call_paris", "get_weather", "18C and sunny"),
                                    result("call_rome", "get_time", "14:05"),
                                ],
                            },
                        ])
                    }],
                    responses: vec![response(vec![paris, rome], StopReason::ToolUse)],
                    ..Sample::default()
                }
            }
            Case::Thinking => Sample {
                requests: vec![
                    Request {
                        thinking: Some(ThinkingConfig {
                            budget_tokens: Some(2048),
                            effort: None,
                        }),
                        max_tokens: Some(8192),
                        ..request(vec![
                            user("think first"),
                            Turn {
                                role: Role::Assistant,
                                parts: vec![thinking_part(), Part::text("done thinking")],
                            },
                            user("again"),
                        ])
                    },
                    // What an OpenAI client asks: an effort, no budget.
                    Request {
                        thinking: Some(ThinkingConfig {
                            budget_tokens: None,
                            effort: Some("low".into()),
                        }),
                        max_tokens: Some(8192),
                        ..request(vec![user("think first")])
                    },
                ],
                responses: vec![response(
                    vec![thinking_part(), Part::text("the answer")],
                    StopReason::EndTurn,
                )],
                ..Sample::default()
            },
            Case::ThinkingSwitch => Sample {
                requests: vec![Request {
                    thinking: Some(ThinkingConfig::default()),
                    max_tokens: Some(8192),
                    ..request(vec![user("think first")])
                }],
                ..Sample::default()
            },
            Case::StopReasons => Sample {
                responses: stop_reason_replies(),
                ..Sample::default()
            },
            Case::StopSequences => Sample {
                requests: vec![Request {
                    stop: STOP_SEQUENCES.map(String::from).to_vec(),
                    ..request(vec![user("count to ten")])
                }],
                responses: vec![response(
                    vec![Part::text("1 2 3")],
                    StopReason::StopSequence,
                )],
                ..Sample::default()
            },
            Case::UsageWithCache => Sample {
                responses: vec![Response {
                    usage: Usage {
                        input_tokens: 100,
                        output_tokens: 20,
                        cache_read_tokens: 30,
                        cache_write_tokens: 10,
                        reasoning_tokens: 5,
                    },
                    ..response(vec![Part::text("cached")], StopReason::EndTurn)
                }],
                ..Sample::default()
            },
            Case::ErrorBodies => Sample {
                errors: every_error(),
                ..Sample::default()
            },
            Case::StreamSplitAnywhere => Sample {
                responses: vec![rich_response()],
                ..Sample::default()
            },
            Case::StreamCutBeforeTerminator => Sample {
                responses: vec![rich_response()],
                ..Sample::default()
            },
        }
    }
}

/// What `dialect` can carry of `case`: the one table of declared losses, found by
/// reading each codec's module doc and by running the codec matrix. A pair missing here
/// is `Full`.
pub fn support(dialect: Dialect, case: Case) -> Support {
    use Dialect::*;
    match (dialect, case) {
        (_, Case::ErrorBodies) => error_support(dialect),
        (OpenAiChat | Ollama, Case::StopSequences) => Support::Lossy(
            "a reply's stop-sequence stop has no finish reason of its own: it reads as end_turn",
            |s| stop_reads_as(s, StopReason::StopSequence, StopReason::EndTurn),
        ),
        (OpenAiResponses, Case::StopSequences) => Support::Lossy(
            "Responses has no stop field (the request's sequences are dropped) and a \
             stop-sequence stop reads as end_turn",
            |s| {
                for req in &mut s.requests {
                    req.stop.clear();
                }
                stop_reads_as(s, StopReason::StopSequence, StopReason::EndTurn);
            },
        ),
        (_, Case::StopReasons) => stop_reason_support(dialect),
        (Anthropic, Case::UsageWithCache) => {
            Support::Lossy("Anthropic usage has no reasoning-token count", |s| {
                for_each_usage(s, |u| u.reasoning_tokens = 0)
            })
        }
        (OpenAiChat, Case::UsageWithCache) => Support::Lossy(
            "prompt_tokens counts cache writes, but only cache reads have a field \
             (cached_tokens): writes read back as plain input",
            |s| {
                for_each_usage(s, |u| {
                    u.input_tokens += u.cache_write_tokens;
                    u.cache_write_tokens = 0;
                })
            },
        ),
        (Ollama, Case::UsageWithCache) => Support::Lossy(
            "prompt_eval_count is the whole prompt and there is no cache or reasoning count",
            |s| {
                for_each_usage(s, |u| {
                    u.input_tokens += u.cache_read_tokens + u.cache_write_tokens;
                    u.cache_read_tokens = 0;
                    u.cache_write_tokens = 0;
                    u.reasoning_tokens = 0;
                })
            },
        ),
        (OpenAiChat, Case::ToolsParallel) => Support::Lossy(
            "tool messages carry tool_call_id only: a result's tool name is not sent",
            |s| {
                for_each_request_part(s, |part| {
                    if let Part::ToolResult { name, .. } = part {
                        *name = None;
                    }
                })
            },
        ),
        (Ollama, Case::Images) => Support::Lossy(
            "Ollama takes base64 images only: URL images are dropped",
            |s| {
                for_each_request_turn(s, |turn| {
                    turn.parts.retain(|part| {
                        !matches!(
                            part,
                            Part::Image {
                                source: ImageSource::Url { .. },
                                ..
                            }
                        )
                    })
                })
            },
        ),
        (Ollama, Case::ToolsAndChoice) => Support::Lossy(
            "Ollama has no tool_choice: `none` is honoured by sending no tools, the rest is dropped",
            |s| {
                for req in &mut s.requests {
                    if req.tool_choice == Some(ToolChoice::None) {
                        req.tools.clear();
                    }
                    req.tool_choice = None;
                }
            },
        ),
        (Anthropic, Case::Thinking) => Support::Lossy(
            "thinking is a budget: an effort is sent as one (low 2048, medium 8192, high \
             24576 when max_tokens allows)",
            |s| {
                for req in &mut s.requests {
                    if let Some(thinking) = &mut req.thinking
                        && thinking.effort.as_deref() == Some("low")
                    {
                        thinking.effort = None;
                        thinking.budget_tokens = Some(2048);
                    }
                }
            },
        ),
        (OpenAiChat, Case::Thinking) => Support::Lossy(
            "thinking in history is not sent, a budget is sent as an effort (2048 → low), \
             and reasoning_content has no signature",
            |s| {
                drop_history_thinking(s);
                thinking_budget_becomes_effort(s, "low");
                drop_reply_signatures(s);
            },
        ),
        (OpenAiResponses, Case::Thinking) => Support::Lossy(
            "thinking in history is sent back only to a request that came in this dialect, \
             and a budget is sent as an effort (2048 → low); replies keep the signature \
             as encrypted_content",
            |s| {
                drop_history_thinking(s);
                thinking_budget_becomes_effort(s, "low");
            },
        ),
        (Ollama, Case::Thinking) => Support::Lossy(
            "Ollama's think is a switch (no budget) and its thinking text has no signature",
            |s| {
                for req in &mut s.requests {
                    req.thinking = Some(ThinkingConfig::default());
                }
                for_each_request_part(s, drop_signature);
                drop_reply_signatures(s);
            },
        ),
        (OpenAiChat, Case::ThinkingSwitch) => Support::Lossy(
            "Chat has no thinking switch: a ThinkingConfig with neither effort nor budget \
             (Ollama's `think: true`) is sent as reasoning_effort medium",
            |s| {
                for req in &mut s.requests {
                    req.thinking = Some(ThinkingConfig {
                        budget_tokens: None,
                        effort: Some("medium".into()),
                    });
                }
            },
        ),
        (OpenAiChat | Ollama, Case::StreamSplitAnywhere | Case::StreamCutBeforeTerminator) => {
            Support::Lossy(
                "the dialect's thinking text has no signature",
                drop_reply_signatures,
            )
        }
        _ => Support::Full,
    }
}

/// Error kinds: a 500 reads back as `BadGateway` in every dialect (a backend's own
/// failure is a bad gateway to Glider, `ErrorKind::from_status`), and Anthropic's error
/// types are coarser than ngl's kinds.
fn error_support(dialect: Dialect) -> Support {
    match dialect {
        Dialect::Anthropic => Support::Lossy(
            "api_error covers Internal and Timeout (it reads back as BadGateway, whatever \
             the status); overloaded_error covers Unavailable (it reads back as Overloaded)",
            |s| {
                error_reads_as(s, ErrorKind::Internal, ErrorKind::BadGateway);
                error_reads_as(s, ErrorKind::Timeout, ErrorKind::BadGateway);
                error_reads_as(s, ErrorKind::Unavailable, ErrorKind::Overloaded);
            },
        ),
        _ => Support::Lossy("an Internal error's 500 reads back as BadGateway", |s| {
            error_reads_as(s, ErrorKind::Internal, ErrorKind::BadGateway)
        }),
    }
}

/// Stop reasons each dialect has no word for, and what they read back as.
fn stop_reason_support(dialect: Dialect) -> Support {
    use StopReason::*;
    match dialect {
        Dialect::Anthropic => Support::Lossy("content_filter is sent as refusal", |s| {
            stop_reads_as(s, ContentFilter, Refusal)
        }),
        Dialect::OpenAiChat => Support::Lossy(
            "finish_reason has no stop_sequence nor pause_turn (both are `stop`) and \
             refusal is `content_filter`",
            |s| {
                stop_reads_as(s, StopSequence, EndTurn);
                stop_reads_as(s, PauseTurn, EndTurn);
                stop_reads_as(s, Refusal, ContentFilter);
            },
        ),
        Dialect::OpenAiResponses => Support::Lossy(
            "a response is completed or incomplete: stop_sequence, refusal and pause_turn \
             end as completed (end_turn)",
            |s| {
                stop_reads_as(s, StopSequence, EndTurn);
                stop_reads_as(s, PauseTurn, EndTurn);
                stop_reads_as(s, Refusal, EndTurn);
            },
        ),
        Dialect::Ollama => Support::Lossy(
            "done_reason knows only stop and length: every other reason is `stop`",
            |s| {
                for reason in [StopSequence, ContentFilter, Refusal, PauseTurn] {
                    stop_reads_as(s, reason, EndTurn);
                }
            },
        ),
    }
}

fn stop_reads_as(sample: &mut Sample, from: StopReason, to: StopReason) {
    for resp in &mut sample.responses {
        if resp.stop_reason == from {
            resp.stop_reason = to;
        }
    }
}

fn error_reads_as(sample: &mut Sample, from: ErrorKind, to: ErrorKind) {
    for err in &mut sample.errors {
        if err.kind == from {
            err.kind = to;
        }
    }
}

fn for_each_usage(sample: &mut Sample, mut change: impl FnMut(&mut Usage)) {
    for resp in &mut sample.responses {
        change(&mut resp.usage);
    }
}

fn for_each_request_turn(sample: &mut Sample, mut change: impl FnMut(&mut Turn)) {
    for turn in sample.requests.iter_mut().flat_map(|r| r.turns.iter_mut()) {
        change(turn);
    }
}

fn for_each_request_part(sample: &mut Sample, mut change: impl FnMut(&mut Part)) {
    for_each_request_turn(sample, |turn| turn.parts.iter_mut().for_each(&mut change));
}

fn drop_signature(part: &mut Part) {
    if let Part::Thinking { signature, .. } = part {
        *signature = None;
    }
}

fn drop_reply_signatures(sample: &mut Sample) {
    for part in sample.responses.iter_mut().flat_map(|r| r.parts.iter_mut()) {
        drop_signature(part);
    }
}

fn drop_history_thinking(sample: &mut Sample) {
    for_each_request_turn(sample, |turn| {
        turn.parts
            .retain(|part| !matches!(part, Part::Thinking { .. }))
    });
}

fn thinking_budget_becomes_effort(sample: &mut Sample, effort: &str) {
    for req in &mut sample.requests {
        if let Some(thinking) = &mut req.thinking
            && thinking.budget_tokens.take().is_some()
        {
            thinking.effort = Some(effort.into());
        }
    }
}
