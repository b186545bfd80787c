//! The end-to-end conformance matrix, over real HTTP through the gateway to faithful mock
//! vendors: one named test per (front dialect × case), e.g. `ollama_front::tools_parallel`,
//! expanded by [`e2e_matrix!`]; each test loops over every backend and both stream
//! modes. The cases come from the shared list in `glider_test_support::conformance` (the
//! ones that make sense end to end: the error-body and stream-framing cases are codec
//! properties, checked by `glider-dialects`' codec matrix). What must reach the backend is
//! the case's sample after the front's and then the backend's declared losses, both read
//! from the one support table.

mod common;

use common::*;
use glider_dialects::codec;
use glider_ngl::{Dialect, Part, Request, Response, Role, StopReason, ThinkingConfig, Turn};
use glider_test_support::MockConfig;
use glider_test_support::conformance::{
    Case, MID_SYSTEM_TEXT, SYSTEM_TEXT, Sample, result, support,
};
use serde_json::json;

/// Expands to `mod <front>_front { #[tokio::test] async fn <case>() ... }` for every
/// front and case.
macro_rules! e2e_matrix {
    ([$($module:ident => $front:ident),* $(,)?] $cases:tt) => {
        $( e2e_matrix!(@front $module $front $cases); )*
    };
    (@front $module:ident $front:ident [$($case:ident => $variant:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test]
                async fn $case() {
                    super::run(
                        glider_ngl::Dialect::$front,
                        glider_test_support::conformance::Case::$variant,
                    )
                    .await;
                }
            )*
        }
    };
}

e2e_matrix! {
    [
        anthropic_front => Anthropic,
        openai_chat_front => OpenAiChat,
        openai_responses_front => OpenAiResponses,
        ollama_front => Ollama,
    ]
    [
        text => Text,
        system_leading => SystemLeading,
        system_mid_conversation => SystemMidConversation,
        tools_and_choice => ToolsAndChoice,
        tools_parallel => ToolsParallel,
        thinking => Thinking,
        stop_sequences => StopSequences,
        usage_with_cache => UsageWithCache,
    ]
}

/// The text of every thinking block the mock writes.
const MOCK_THINKING: &str = "thinking about it";

/// One backend and stream mode of a (front × case) test.
struct Leg<'a> {
    front: Dialect,
    model: &'a str,
    stream: bool,
    gateway: &'a Gateway,
    mock: &'a glider_test_support::MockVendor,
}

impl Leg<'_> {
    fn name(&self) -> String {
        format!(
            "{} → {}, stream={}",
            self.front.as_str(),
            self.model,
            self.stream
        )
    }

    /// The dialect the gateway speaks to this leg's backend.
    fn backend(&self) -> Dialect {
        match self.model {
            "m-ollama" => Dialect::Ollama,
            "m-anthropic" => Dialect::Anthropic,
            // OpenAI serves a Responses client on /v1/responses, everyone else on chat.
            "m-openai" if self.front == Dialect::OpenAiResponses => Dialect::OpenAiResponses,
            _ => Dialect::OpenAiChat,
        }
    }

    /// Whether the pipeline gathers every system turn into one leading turn for this
    /// backend (local chat templates refuse a system message anywhere but first): it
    /// does for a local backend whose request it re-encodes, not for one it forwards
    /// the client's body to untouched (same dialect).
    fn hoists_system_turns(&self) -> bool {
        matches!(self.model, "m-ollama" | "m-vllm") && self.backend() != self.front
    }

    /// `request` (from a case sample) aimed at this leg's backend and stream mode.
    fn aim(&self, request: &Request) -> Request {
        Request {
            model: self.model.into(),
            stream: self.stream,
            ..request.clone()
        }
    }

    /// Send `request` in the front dialect and decode the 200 reply.
    async fn send(&self, request: &Request) -> Response {
        self.mock.clear_requests();
        let reply = post_json(
            &self.gateway.base,
            front_path(self.front),
            &wire(self.front, &self.aim(request)),
        )
        .await;
        let leg = self.name();
        assert_eq!(reply.status, 200, "{leg}: {}", reply.text());
        let route = reply.route();
        assert!(
            route.contains(&format!("model={}", self.model)),
            "{leg}: route header {route:?}"
        );
        reply
            .decode(self.front, self.stream)
            .unwrap_or_else(|e| panic!("{leg}: {e}\n{}", reply.text()))
    }

    /// The one request the backend received, decoded in its dialect.
    fn backend_request(&self) -> Request {
        let leg = self.name();
        let seen = self.mock.requests();
        assert_eq!(seen.len(), 1, "{leg}: backend requests");
        let expected_path = match self.backend() {
            Dialect::OpenAiResponses => "/v1/responses",
            _ => BACKENDS
                .iter()
                .find(|(model, _)| *model == self.model)
                .map(|(_, path)| *path)
                .unwrap_or_else(|| panic!("{leg}: unknown backend")),
        };
        assert_eq!(seen[0].path, expected_path, "{leg}");
        assert_eq!(seen[0].body["model"], self.model, "{leg}");
        codec(self.backend())
            .decode_request(&seen[0].raw_body)
            .unwrap_or_else(|e| panic!("{leg}: backend request does not decode: {e}"))
    }

    /// The thinking request the backend must get for the thinking case. A front that
    /// carries thinking only as a switch (Ollama's `think`) turns it into the
    /// thinking-switch case, so that case's row of the table applies at the backend.
    fn carried_thinking(&self) -> Option<ThinkingConfig> {
        let through_front = support(self.front, Case::Thinking).expected(&Case::Thinking.sample());
        let asked = through_front
            .requests
            .first()
            .and_then(|r| r.thinking.clone());
        let case = if asked == Some(ThinkingConfig::default()) {
            Case::ThinkingSwitch
        } else {
            Case::Thinking
        };
        let mut sample = case.sample();
        for req in &mut sample.requests {
            req.thinking = asked.clone();
        }
        support(self.backend(), case)
            .expected(&sample)
            .requests
            .first()
            .and_then(|r| r.thinking.clone())
    }

    /// What of `case`'s first sample request survives the front's and then the
    /// backend's declared losses: what the backend must be asked.
    fn carried_request(&self, case: Case) -> Request {
        let sample = case.sample();
        let through_front = support(self.front, case).expected(&sample);
        let through_both = support(self.backend(), case).expected(&Sample {
            requests: through_front.requests,
            ..Sample::default()
        });
        through_both
            .requests
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{}: case has no request", case.name()))
    }
}

/// Run `case` from `front` against every backend, streamed and not.
async fn run(front: Dialect, case: Case) {
    let config = MockConfig {
        // Naming models turns the mock's model check on: list every backend's.
        models: BACKENDS
            .iter()
            .map(|(model, _)| model.to_string())
            .collect(),
        thinking_models: vec!["m-ollama".into()],
        ..MockConfig::default()
    };
    let (mock, yaml) = mock_and_config_with(config, "").await;
    // The pipeline sends Ollama `think` only to a model declared thinking-capable.
    let thinking_ollama = "models: [{name: m-ollama, thinking: true}]";
    let yaml = yaml.replace("models: [m-ollama]", thinking_ollama);
    assert!(yaml.contains(thinking_ollama), "{yaml}");
    let gateway = gateway(&yaml).await;
    for (model, _) in BACKENDS {
        for stream in [false, true] {
            let leg = Leg {
                front,
                model,
                stream,
                gateway: &gateway,
                mock: &mock,
            };
            match case {
                Case::Text => text_turn(&leg).await,
                Case::UsageWithCache => usage(&leg).await,
                Case::SystemLeading | Case::SystemMidConversation => {
                    system_placement(&leg, case).await
                }
                Case::ToolsAndChoice => tool_round_trip(&leg).await,
                Case::ToolsParallel => parallel_tool_round_trip(&leg).await,
                Case::Thinking => thinking(&leg).await,
                Case::StopSequences => stop_sequences(&leg).await,
                other => panic!("{} is not an end-to-end case", other.name()),
            }
        }
    }
}

/// The sample's text turn reaches the backend as sent, is echoed and ends the turn.
async fn text_turn(leg: &Leg<'_>) {
    let request = Case::Text.sample().requests.remove(0);
    let response = leg.send(&request).await;
    let name = leg.name();
    let asked = request.last_user_text().unwrap_or_default();
    assert!(
        response.plain_text().contains(&format!("echo: {asked}")),
        "{name}: {response:?}"
    );
    assert_eq!(response.stop_reason, StopReason::EndTurn, "{name}");
    let seen = leg.backend_request();
    assert_eq!(seen.turns, leg.carried_request(Case::Text).turns, "{name}");
}

/// The backend's token counts reach the client unchanged (the mock counts a quarter of
/// the request bytes in, a quarter of the reply characters out, and no cache).
async fn usage(leg: &Leg<'_>) {
    let request = Case::Text.sample().requests.remove(0);
    let response = leg.send(&request).await;
    let name = leg.name();
    let seen = leg.mock.requests();
    let body_len = seen.first().map_or(0, |r| r.raw_body.len());
    let reply_chars = response.plain_text().chars().count();
    let expected = glider_ngl::Usage {
        input_tokens: (body_len / 4) as u64,
        output_tokens: (reply_chars / 4).max(1) as u64,
        ..glider_ngl::Usage::default()
    };
    assert_eq!(response.usage, expected, "{name}");
}

/// System text reaches the backend where it was placed.
async fn system_placement(leg: &Leg<'_>, case: Case) {
    let request = case.sample().requests.remove(0);
    let response = leg.send(&request).await;
    let name = leg.name();
    assert!(
        response.plain_text().contains("echo: "),
        "{name}: {response:?}"
    );
    let seen = leg.backend_request();
    let system_texts = system_positions(&seen.turns);
    let expected = system_positions(&leg.carried_request(case).turns);
    if case == Case::SystemMidConversation {
        assert!(
            expected
                .iter()
                .any(|(at, text)| *at > 0 && text == MID_SYSTEM_TEXT),
            "{name}: {expected:?}"
        );
    }
    let expected = if leg.hoists_system_turns() {
        let all: Vec<String> = expected.into_iter().map(|(_, text)| text).collect();
        vec![(0, all.join("\n"))]
    } else {
        expected
    };
    assert_eq!(system_texts, expected, "{name}: {:?}", seen.turns);
    assert!(expected[0].1.starts_with(SYSTEM_TEXT), "{name}");
}

/// Each system turn's position in `turns` and its text.
fn system_positions(turns: &[Turn]) -> Vec<(usize, String)> {
    turns
        .iter()
        .enumerate()
        .filter(|(_, turn)| turn.role == Role::System)
        .map(|(at, turn)| (at, turn.plain_text()))
        .collect()
}

/// The user text that makes the mock call each `(tool, city)` in order.
fn calling(calls: &[(&str, &str)]) -> String {
    calls
        .iter()
        .map(|(tool, city)| format!("[[call:{tool} {}]]", json!({"city": city})))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `request` whose last user turn is `text`.
fn asking(mut request: Request, text: &str) -> Request {
    if let Some(turn) = request
        .turns
        .iter_mut()
        .rev()
        .find(|t| t.role == Role::User)
    {
        *turn = Turn::text(Role::User, text);
    }
    request
}

/// Ask for `calls`, check the model makes exactly them, send `results` back (one per
/// call, in order) and check the model answers from all of them.
async fn call_and_answer(leg: &Leg<'_>, base: Request, calls: &[(&str, &str)], results: &[&str]) {
    let name = leg.name();
    let first = asking(base, &calling(calls));
    let response = leg.send(&first).await;
    assert_eq!(
        response.stop_reason,
        StopReason::ToolUse,
        "{name}: {response:?}"
    );
    let made = tool_calls(&response);
    let made_names: Vec<(&str, serde_json::Value)> = made
        .iter()
        .map(|(_, tool, arguments)| (tool.as_str(), arguments.clone()))
        .collect();
    let asked: Vec<(&str, serde_json::Value)> = calls
        .iter()
        .map(|(tool, city)| (*tool, json!({"city": city})))
        .collect();
    assert_eq!(made_names, asked, "{name}: {response:?}");
    let mut ids: Vec<&str> = made.iter().map(|(id, ..)| id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        calls.len(),
        "{name}: call ids distinct, non-empty"
    );
    assert!(ids.iter().all(|id| !id.is_empty()), "{name}: {ids:?}");

    let mut second = first;
    second.turns.push(Turn {
        role: Role::Assistant,
        parts: response
            .parts
            .iter()
            .filter(|p| matches!(p, Part::ToolCall { .. }))
            .cloned()
            .collect(),
    });
    second.turns.push(Turn {
        role: Role::Tool,
        parts: made
            .iter()
            .zip(results)
            .map(|((id, tool, _), text)| result(id, tool, text))
            .collect(),
    });
    let answer = leg.send(&second).await;
    let expected = format!("tool result: {}", results.join("\n"));
    assert!(
        answer.plain_text().contains(&expected),
        "{name}: {answer:?}"
    );
}

/// The case's tools and choice reach the model, which calls one and reads its result.
async fn tool_round_trip(leg: &Leg<'_>) {
    let base = Case::ToolsAndChoice.sample().requests.remove(0);
    let seen_tools = {
        let expected = leg.carried_request(Case::ToolsAndChoice);
        (expected.tools, expected.tool_choice)
    };
    call_and_answer(leg, base, &[("get_weather", "Paris")], &["18C and sunny"]).await;
    let seen = leg.backend_request();
    assert_eq!((seen.tools, seen.tool_choice), seen_tools, "{}", leg.name());
}

/// Two calls in one turn, and both results in one tool turn.
async fn parallel_tool_round_trip(leg: &Leg<'_>) {
    let mut base = Case::ToolsParallel.sample().requests.remove(0);
    // Keep the tools and the first user question; the mock's calls replace the rest.
    base.turns.truncate(1);
    call_and_answer(
        leg,
        base,
        &[("get_weather", "Paris"), ("get_time", "Rome")],
        &["18C and sunny", "14:05"],
    )
    .await;
}

/// Asking for thinking reaches the backend as far as both dialects carry it, and when
/// it does, the backend's thinking comes back to the client ahead of the answer.
async fn thinking(leg: &Leg<'_>) {
    let mut request = Case::Thinking.sample().requests.remove(0);
    request.turns.truncate(1);
    let response = leg.send(&request).await;
    let name = leg.name();
    let seen = leg.backend_request();
    let expected = leg.carried_thinking();
    assert_eq!(seen.thinking, expected, "{name}");
    let thought = response.parts.iter().find_map(|p| match p {
        Part::Thinking { text, .. } => Some(text.as_str()),
        _ => None,
    });
    let thinks = expected.is_some().then_some(MOCK_THINKING);
    assert_eq!(thought, thinks, "{name}: {response:?}");
    assert!(
        matches!(response.parts.last(), Some(Part::Text { .. })),
        "{name}: {response:?}"
    );
}

/// Stop sequences reach the backend as far as both dialects carry them.
async fn stop_sequences(leg: &Leg<'_>) {
    let request = Case::StopSequences.sample().requests.remove(0);
    let response = leg.send(&request).await;
    let name = leg.name();
    assert_eq!(response.stop_reason, StopReason::EndTurn, "{name}");
    let seen = leg.backend_request();
    assert_eq!(
        seen.stop,
        leg.carried_request(Case::StopSequences).stop,
        "{name}"
    );
}

#[tokio::test]
async fn same_dialect_forwards_the_body_bytes() {
    let (mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    // Odd spacing and key order: a re-encoding would change them.
    let body = r#"{"max_tokens": 50,   "model":"m-anthropic","messages":[{"role":"user","content":"hi"}], "context_management": {"edits": []}}"#;
    let reply = post(
        &gw.base,
        "/v1/messages?beta=true",
        body,
        &[("anthropic-beta", "x-test-beta")],
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = mock.requests();
    assert_eq!(
        seen[0].raw_body,
        body.as_bytes(),
        "body forwarded untouched"
    );
    assert_eq!(seen[0].header("anthropic-beta"), Some("x-test-beta"));
    assert_eq!(seen[0].header("x-api-key"), Some("k-anthropic"));
}
