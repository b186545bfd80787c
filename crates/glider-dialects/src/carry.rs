//! What a backend that speaks another dialect can carry of a request: the parameters
//! a codec would drop on the way there, each either carried another way or refused.
//! Glider's rule (docs/translation.md, "The rule"): a request parameter is honoured,
//! forwarded to a backend that answers for itself, or refused with a typed 400 that
//! names it — never a 200 that quietly ignored it. The codecs themselves stay total
//! (encoding cannot fail); the pipeline asks [`carried`] once per candidate before it
//! encodes, so a refusal is the caller's 400 in its own dialect, and a candidate of the
//! client's own dialect (which gets the parameter verbatim) still answers.
//!
//! Carried another way: an Anthropic `document` whose source is text (`text`, or
//! `content` of text blocks) and a `search_result` become text parts, since every
//! dialect carries text. Refused: a `document` of any other source (a base64 or URL
//! PDF, a stored file) — no local or OpenAI-compatible backend reads PDFs through these
//! wires, and Glider does not extract them — and the fields one dialect alone can ask
//! for, when they ask for something ([`ONLY_IN`]: Chat Completions' `n` above 1,
//! `logprobs`, penalties, ...), since the backend would answer as if they were absent.
//! Fields that change nothing in the reply (`metadata`, `user`, `store`,
//! `service_tier`, `cache_control`, ...) are hints, dropped as documented.

use glider_ngl::{ApiError, Dialect, DialectExtra, Part, Request, Role, ToolChoice};
use serde_json::Value;

/// What `to` can be sent of `req`: `Ok(None)` when the codec carries it all as it is,
/// `Ok(Some(request))` when some parts had to be carried another way (the request to
/// encode instead), `Err` with the 400 naming the first parameter `to` cannot carry.
pub fn carried(req: &Request, to: Dialect) -> Result<Option<Request>, ApiError> {
    fields_carried(req, to)?;
    parts_carried(req, to)
}

/// The carry phase's verdict for a candidate speaking `to`, of the client's request
/// `req` in `front`: a local server of the client's own dialect is refused what only
/// the vendor's cloud serves ([`local_refusal`]); otherwise `req`'s fields are judged as
/// the client sent them and the parts of `asked` (the candidate's own adapted copy,
/// else `req`) are rewritten for `to`.
pub fn verdict(
    req: &Request,
    asked: Option<&Request>,
    to: Dialect,
    front: Dialect,
    local: bool,
) -> Result<Option<Request>, ApiError> {
    if local
        && to == front
        && let Some(refused) = local_refusal(req)
    {
        return Err(refused);
    }
    fields_carried(req, to)?;
    parts_carried(asked.unwrap_or(req), to)
}

/// The parameter half of [`carried`]: `Err` with the 400 naming the first top-level
/// field of `req` that `to` cannot carry (a dialect-only field that asks for
/// something, a forced tool choice to Ollama). The pipeline judges the client's own
/// request this way when a candidate has its own adapted copy, whose parts
/// [`parts_carried`] then lowers.
pub fn fields_carried(req: &Request, to: Dialect) -> Result<(), ApiError> {
    if let Some(extra) = &req.extra {
        dialect_only_fields(extra, to)?;
    }
    forced_tool_choice(req, to)
}

/// The parts half of [`carried`]: `req` with the parts `to` reads another way
/// rewritten (`None`: nothing to rewrite), or the 400 naming a part it cannot carry.
pub fn parts_carried(req: &Request, to: Dialect) -> Result<Option<Request>, ApiError> {
    let foreign = |part: &Part| matches!(part, Part::Native { dialect, .. } if *dialect != to);
    if !req.turns.iter().any(|turn| any_part(&turn.parts, &foreign)) {
        return Ok(None);
    }
    let mut lowered = req.clone();
    let leading_system = req
        .turns
        .iter()
        .take_while(|turn| turn.role == Role::System)
        .count();
    for (at, turn) in lowered.turns.iter_mut().enumerate() {
        let path = format!("messages[{}]", at.saturating_sub(leading_system));
        lower_parts(&mut turn.parts, &path, to)?;
    }
    Ok(Some(lowered))
}

/// Whether `parts`, or a tool result's content among them, has a part `is`.
fn any_part(parts: &[Part], is: &impl Fn(&Part) -> bool) -> bool {
    parts.iter().any(|part| match part {
        Part::ToolResult { content, .. } => any_part(content, is),
        part => is(part),
    })
}

/// A top-level field of one dialect that changes what comes back and that no other
/// dialect can ask for, with the values that ask for it (a default value asks nothing:
/// `n: 1`, a zero penalty, `logprobs: false`).
struct OnlyIn {
    dialect: Dialect,
    field: &'static str,
    asks: fn(&Value) -> bool,
    /// What the field asks for, as a refusal says it.
    what: &'static str,
    /// Only the vendor's own cloud serves it: a local server speaking the same dialect
    /// (llama-server's `/v1/messages`) is refused it too ([`local_refusal`]).
    cloud_only: bool,
}

/// Every [`OnlyIn`] field: docs/translation.md's table says `refused` for each in every
/// other dialect's column (a test reads the table against this list).
const ONLY_IN: &[OnlyIn] = &[
    OnlyIn {
        dialect: Dialect::OpenAiChat,
        field: "n",
        asks: |v| v.as_u64().is_some_and(|n| n > 1),
        what: "asks for several choices, and the backend answers with one (ask once per choice)",
        cloud_only: false,
    },
    OnlyIn {
        dialect: Dialect::OpenAiChat,
        field: "logprobs",
        asks: |v| v.as_bool() == Some(true),
        what: "asks for log probabilities, which the backend does not return",
        cloud_only: false,
    },
    OnlyIn {
        dialect: Dialect::OpenAiChat,
        field: "top_logprobs",
        asks: |v| !v.is_null(),
        what: "asks for log probabilities, which the backend does not return",
        cloud_only: false,
    },
    OnlyIn {
        dialect: Dialect::OpenAiChat,
        field: "frequency_penalty",
        asks: nonzero,
        what: "sets a sampling penalty the backend's wire has no field for",
        cloud_only: false,
    },
    OnlyIn {
        dialect: Dialect::OpenAiChat,
        field: "presence_penalty",
        asks: nonzero,
        what: "sets a sampling penalty the backend's wire has no field for",
        cloud_only: false,
    },
    OnlyIn {
        dialect: Dialect::OpenAiChat,
        field: "logit_bias",
        asks: |v| v.as_object().is_some_and(|bias| !bias.is_empty()),
        what: "biases tokens by id, which the backend's wire cannot carry",
        cloud_only: false,
    },
    OnlyIn {
        dialect: Dialect::OpenAiChat,
        field: "audio",
        asks: |v| !v.is_null(),
        what: "asks for audio output, which the backend does not make",
        cloud_only: true,
    },
    OnlyIn {
        dialect: Dialect::OpenAiChat,
        field: "modalities",
        asks: |v| {
            v.as_array()
                .is_some_and(|m| m.iter().any(|m| m.as_str() != Some("text")))
        },
        what: "asks for output other than text, which the backend does not make",
        cloud_only: true,
    },
    OnlyIn {
        dialect: Dialect::OpenAiChat,
        field: "web_search_options",
        asks: |v| !v.is_null(),
        what: "asks for OpenAI's hosted web search, which the backend does not run",
        cloud_only: true,
    },
    OnlyIn {
        dialect: Dialect::OpenAiResponses,
        field: "top_logprobs",
        asks: nonzero,
        what: "asks for log probabilities, which the backend does not return",
        cloud_only: false,
    },
    OnlyIn {
        dialect: Dialect::OpenAiResponses,
        field: "background",
        asks: |v| v.as_bool() == Some(true),
        what: "asks for a background response, which only the Responses API keeps",
        cloud_only: true,
    },
    OnlyIn {
        dialect: Dialect::Anthropic,
        field: "mcp_servers",
        asks: |v| v.as_array().is_some_and(|servers| !servers.is_empty()),
        what: "asks Anthropic's MCP connector to call servers, which the backend does not run",
        cloud_only: true,
    },
    OnlyIn {
        dialect: Dialect::Anthropic,
        field: "container",
        asks: |v| !v.is_null(),
        what: "names an Anthropic code-execution container, which the backend does not have",
        cloud_only: true,
    },
];

/// A number other than zero.
fn nonzero(value: &Value) -> bool {
    value.as_f64().is_some_and(|n| n != 0.0)
}

/// The fields the request's dialect alone can ask for that it asks for, refused when
/// `to` is another dialect.
fn dialect_only_fields(extra: &DialectExtra, to: Dialect) -> Result<(), ApiError> {
    if extra.dialect == to {
        return Ok(());
    }
    match asked(extra, |_| true) {
        Some((only, value)) => Err(refuse(
            only.field,
            format!(
                "{value} {}; this model is served by {}. Leave {} out, or route the \
                 request to a model served by {}",
                only.what,
                backend_name(to),
                only.field,
                backend_name(extra.dialect),
            ),
        )),
        None => Ok(()),
    }
}

/// The first field of `extra`'s dialect that `which` keeps and the request asks for,
/// with its value.
fn asked(
    extra: &DialectExtra,
    which: impl Fn(&OnlyIn) -> bool,
) -> Option<(&'static OnlyIn, &Value)> {
    ONLY_IN
        .iter()
        .filter(|only| only.dialect == extra.dialect && which(only))
        .find_map(|only| {
            let value = extra.fields.get(only.field)?;
            (only.asks)(value).then_some((only, value))
        })
}

/// A forced tool choice (Anthropic `any`, OpenAI `required`, a named tool) to an
/// Ollama backend: Ollama's API has no tool choice, so the model would be free not to
/// call a tool and the client would get a 200 that ignored the parameter. Refused
/// (another candidate, a cloud backup, may still answer); `auto` and `none` are
/// honoured (`none` by sending no tools).
fn forced_tool_choice(req: &Request, to: Dialect) -> Result<(), ApiError> {
    let forced = match &req.tool_choice {
        Some(ToolChoice::Required) => "asks that a tool be called".to_owned(),
        Some(ToolChoice::Tool { name }) => format!("asks that the tool {name} be called"),
        Some(ToolChoice::Auto | ToolChoice::None) | None => return Ok(()),
    };
    if to != Dialect::Ollama || req.tools.is_empty() {
        return Ok(());
    }
    Err(refuse(
        "tool_choice",
        format!(
            "{forced}; this model is served by an Ollama backend, whose API has no tool \
             choice, so the call could not be enforced. Leave tool_choice at auto, or route \
             the request to a model served by an OpenAI-compatible or Anthropic backend"
        ),
    ))
}

/// What a local server speaking the client's own dialect cannot be sent of `req`: the
/// fields only that vendor's cloud serves (Anthropic's `container` and `mcp_servers`
/// to llama-server's `/v1/messages`, ...), refused with the 400 naming the first.
pub fn local_refusal(req: &Request) -> Option<ApiError> {
    let extra = req.extra.as_ref()?;
    let (only, value) = asked(extra, |only| only.cloud_only)?;
    Some(refuse(
        only.field,
        format!(
            "{value} {}; this model is served by a local server, which cannot do \
             that. Leave {} out, or route the request to {}'s own API",
            only.what,
            only.field,
            backend_name(extra.dialect)
        ),
    ))
}

/// The fields of `dialect` that [`carried`] refuses to every other dialect.
pub fn refused_fields(dialect: Dialect) -> impl Iterator<Item = &'static str> {
    ONLY_IN
        .iter()
        .filter(move |only| only.dialect == dialect)
        .map(|only| only.field)
}

/// Replace each foreign native part of `parts` (at `path`) that `to` can read another
/// way; refuse one it cannot.
fn lower_parts(parts: &mut [Part], path: &str, to: Dialect) -> Result<(), ApiError> {
    for (at, part) in parts.iter_mut().enumerate() {
        let here = format!("{path}.content[{at}]");
        match part {
            Part::ToolResult { content, .. } => lower_parts(content, &here, to)?,
            Part::Native {
                dialect: Dialect::Anthropic,
                raw,
            } if to != Dialect::Anthropic => {
                if let Some(text) = anthropic_block_text(raw, &here, to)? {
                    *part = Part::text(text);
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The text an Anthropic `document` or `search_result` block stands for (`None` for a
/// block of another type, which the codecs drop as documented); a document that is not
/// text is refused.
fn anthropic_block_text(raw: &Value, path: &str, to: Dialect) -> Result<Option<String>, ApiError> {
    let kind = raw.get("type").and_then(Value::as_str).unwrap_or_default();
    let title = raw.get("title").and_then(Value::as_str);
    let labelled = |label: &str, body: String| match title {
        Some(title) if !title.is_empty() => format!("{label} \"{title}\":\n{body}"),
        _ => body,
    };
    match kind {
        "document" => {
            let source = &raw["source"];
            let source_type = source["type"].as_str().unwrap_or_default();
            let text = match source_type {
                "text" => source["data"].as_str().map(str::to_owned),
                "content" => content_text(&source["content"]),
                _ => None,
            };
            match text {
                Some(text) => {
                    let text = match raw.get("context").and_then(Value::as_str) {
                        Some(context) if !context.is_empty() => format!("{context}\n\n{text}"),
                        _ => text,
                    };
                    Ok(Some(labelled("Document", text)))
                }
                None => {
                    let media = source["media_type"].as_str().unwrap_or("no media type");
                    Err(refuse(
                        path,
                        format!(
                            "a document block with a {source_type} source ({media}) cannot be \
                             read by {}: Glider extracts only text documents. Send the \
                             document's text as a text block, or route this request to an \
                             Anthropic backend",
                            backend_name(to)
                        ),
                    ))
                }
            }
        }
        "search_result" => {
            let text = content_text(&raw["content"]).unwrap_or_default();
            let text = match raw.get("source").and_then(Value::as_str) {
                Some(source) => format!("{source}\n{text}"),
                None => text,
            };
            Ok(Some(labelled("Search result", text)))
        }
        _ => Ok(None),
    }
}

/// The text of a content list of text blocks (or a plain string); `None` when it holds
/// anything but text.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => blocks
            .iter()
            .map(|block| match block["type"].as_str() {
                Some("text") => block["text"].as_str(),
                _ => None,
            })
            .collect::<Option<Vec<&str>>>()
            .map(|texts| texts.join("\n")),
        _ => None,
    }
}

/// A 400 naming `param`.
fn refuse(param: &str, message: String) -> ApiError {
    ApiError::invalid(format!("{param}: {message}")).with_param(param)
}

/// How a refusal names the backend kind a dialect stands for.
fn backend_name(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Anthropic => "an Anthropic backend",
        Dialect::OpenAiChat => "an OpenAI-compatible backend",
        Dialect::OpenAiResponses => "an OpenAI Responses backend",
        Dialect::Ollama => "an Ollama backend",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec;
    use glider_ngl::ErrorKind;
    use serde_json::json;

    fn decoded(dialect: Dialect, body: Value) -> Request {
        codec(dialect)
            .decode_request(body.to_string().as_bytes())
            .expect("a valid request")
    }

    fn chat(extra: Value) -> Request {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        for (key, value) in extra.as_object().expect("an object") {
            body[key] = value.clone();
        }
        decoded(Dialect::OpenAiChat, body)
    }

    #[test]
    fn a_forced_tool_choice_is_refused_to_ollama_and_carried_elsewhere() {
        let tools = json!([{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}]);
        for (choice, forced) in [
            (json!("required"), true),
            (json!({"type": "function", "function": {"name": "t"}}), true),
            (json!("auto"), false),
            (json!("none"), false),
        ] {
            let req = chat(json!({"tools": tools, "tool_choice": choice}));
            let refused = carried(&req, Dialect::Ollama).err();
            assert_eq!(refused.is_some(), forced, "{choice} to Ollama");
            if let Some(error) = refused {
                assert_eq!(error.kind, ErrorKind::InvalidRequest);
                assert_eq!(error.param.as_deref(), Some("tool_choice"));
            }
            assert!(
                carried(&req, Dialect::Anthropic).is_ok(),
                "{choice} to Anthropic"
            );
        }
        // With no tools there is nothing to force.
        let req = chat(json!({"tool_choice": "required"}));
        assert!(carried(&req, Dialect::Ollama).is_ok());
    }

    #[test]
    fn cloud_only_fields_are_refused_to_a_local_server_of_the_same_dialect() {
        let req = decoded(
            Dialect::Anthropic,
            json!({"model": "m", "max_tokens": 10, "container": "c1",
                   "messages": [{"role": "user", "content": "hi"}]}),
        );
        let error = local_refusal(&req).expect("refused");
        assert_eq!(error.param.as_deref(), Some("container"));
        // vLLM serves n itself: not a cloud-only field.
        assert_eq!(local_refusal(&chat(json!({"n": 2}))), None);
        assert_eq!(local_refusal(&chat(json!({}))), None);
    }

    #[test]
    fn chat_only_parameters_are_refused_elsewhere_and_forwarded_to_chat() {
        for (extra, param) in [
            (json!({"n": 2}), "n"),
            (json!({"logprobs": true}), "logprobs"),
            (
                json!({"logprobs": false, "top_logprobs": 3}),
                "top_logprobs",
            ),
        ] {
            let req = chat(extra.clone());
            for to in [
                Dialect::Ollama,
                Dialect::Anthropic,
                Dialect::OpenAiResponses,
            ] {
                let error = carried(&req, to).expect_err("refused");
                assert_eq!(error.kind, ErrorKind::InvalidRequest, "{extra} to {to:?}");
                assert_eq!(error.param.as_deref(), Some(param), "{extra} to {to:?}");
                assert!(error.message.starts_with(param), "{}", error.message);
            }
            // A Chat backend gets the field verbatim and answers for itself.
            assert_eq!(carried(&req, Dialect::OpenAiChat), Ok(None), "{extra}");
            let body = codec(Dialect::OpenAiChat).encode_request(&req);
            assert_eq!(body[param], extra[param]);
        }
        for harmless in [json!({"n": 1}), json!({"logprobs": false}), json!({})] {
            assert_eq!(carried(&chat(harmless.clone()), Dialect::Ollama), Ok(None));
        }
    }

    fn anthropic_with(block: Value) -> Request {
        decoded(
            Dialect::Anthropic,
            json!({"model": "m", "max_tokens": 10, "system": "be brief", "messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": [block, {"type": "text", "text": "summarise"}]},
            ]}),
        )
    }

    #[test]
    fn text_documents_reach_every_dialect_as_text() {
        let cases = [
            (
                json!({"type": "document", "title": "notes",
                       "source": {"type": "text", "media_type": "text/plain", "data": "the sky is green"}}),
                "Document \"notes\":\nthe sky is green",
            ),
            (
                json!({"type": "document", "context": "from the wiki",
                       "source": {"type": "content", "content": [
                           {"type": "text", "text": "line one"}, {"type": "text", "text": "line two"}]}}),
                "from the wiki\n\nline one\nline two",
            ),
            (
                json!({"type": "search_result", "title": "Docs", "source": "https://x.test/a",
                       "content": [{"type": "text", "text": "found it"}]}),
                "Search result \"Docs\":\nhttps://x.test/a\nfound it",
            ),
        ];
        for (block, text) in cases {
            let req = anthropic_with(block.clone());
            for to in [
                Dialect::Ollama,
                Dialect::OpenAiChat,
                Dialect::OpenAiResponses,
            ] {
                let lowered = carried(&req, to)
                    .expect("carried")
                    .expect("changed: the block became text");
                assert_eq!(lowered.turns[3].parts[0], Part::text(text), "{to:?}");
                // And the backend's body holds it.
                let body = codec(to).encode_request(&lowered).to_string();
                assert!(body.contains(&text.replace('\n', "\\n").replace('"', "\\\"")));
            }
            // An Anthropic backend gets the block itself.
            assert_eq!(carried(&req, Dialect::Anthropic), Ok(None));
        }
    }

    #[test]
    fn documents_that_are_not_text_are_refused_naming_the_block() {
        for source in [
            json!({"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}),
            json!({"type": "url", "url": "https://x.test/a.pdf"}),
            json!({"type": "file", "file_id": "file_1"}),
            json!({"type": "content", "content": [{"type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}}]}),
        ] {
            let req = anthropic_with(json!({"type": "document", "source": source}));
            for to in [
                Dialect::Ollama,
                Dialect::OpenAiChat,
                Dialect::OpenAiResponses,
            ] {
                let error = carried(&req, to).expect_err("refused");
                assert_eq!(error.kind, ErrorKind::InvalidRequest);
                assert_eq!(
                    error.param.as_deref(),
                    Some("messages[2].content[0]"),
                    "{source}"
                );
                assert!(error.message.contains("document"), "{}", error.message);
            }
            assert_eq!(carried(&req, Dialect::Anthropic), Ok(None));
        }
    }

    #[test]
    fn a_document_in_a_tool_result_is_carried_too() {
        let req = decoded(
            Dialect::Anthropic,
            json!({"model": "m", "max_tokens": 10, "messages": [
                {"role": "user", "content": "read it"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                    {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "body"}}]}]},
            ]}),
        );
        let lowered = carried(&req, Dialect::Ollama)
            .expect("carried")
            .expect("changed");
        let Part::ToolResult { content, .. } = &lowered.turns[2].parts[0] else {
            panic!("{:?}", lowered.turns[2]);
        };
        assert_eq!(content, &vec![Part::text("body")]);
    }
}
