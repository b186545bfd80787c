//! The upstream request for one candidate: the client's bytes with the model replaced
//! when nothing else changes, else the ngl request re-encoded in the backend's
//! dialect; and the headers a backend should see (the client's it may have, and the
//! session key for a pool or an OpenAI-compatible server).

use bytes::Bytes;
use glider_backend::{Backend, Candidate, SESSION_KEY_HEADER, UpstreamRequest, session_key_digest};
use glider_dialects::scan::top_level_string;
use glider_dialects::{codec, json_bytes};
use glider_ngl::{Dialect, Request, Role, Turn};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::stops;

/// The request for `candidate`. `body` is the client's body (routing flag stripped),
/// absent when the request was built as ngl; `adapted` is the request as bounding and
/// the transform left it for this candidate, if they changed it; `session` is the
/// router's session key for the request.
pub(crate) fn for_candidate(
    front: Dialect,
    headers: &HeaderMap,
    body: Option<&Bytes>,
    request: &Request,
    adapted: Option<Request>,
    candidate: &Candidate,
    session: Option<&str>,
) -> UpstreamRequest {
    let backend = &candidate.backend;
    let dialect = backend.dialect_for(front);
    let glider_stops = stops::applied_by_glider(front, request, backend);
    // What this candidate's body asks: the adapted request's own choice (the tool loop
    // reads each reply whole while the client streams), else the client's.
    let stream = adapted.as_ref().map_or(request.stream, |a| a.stream) || glider_stops;
    let body = match (adapted, body) {
        (None, Some(body)) if dialect == front => {
            rewrite_model(body, &request.model, &candidate.model)
        }
        (adapted, _) => {
            let mut adapted = adapted.unwrap_or_else(|| request.clone());
            adapted.model = candidate.model.clone();
            if backend.is_local() {
                hoist_system_turns(&mut adapted.turns);
            }
            if glider_stops {
                // The backend would cut the sequence out unseen; Glider matches it on
                // the reply, streamed so that the request can end at the match.
                adapted.stop.clear();
                adapted.stream = true;
            }
            Bytes::from(json_bytes(&codec(dialect).encode_request(&adapted)))
        }
    };
    UpstreamRequest {
        dialect,
        body,
        stream,
        headers: with_session_key(
            forward_headers(front, headers, backend),
            backend,
            dialect,
            session,
        ),
    }
}

/// `headers` plus [`SESSION_KEY_HEADER`] for a backend that can use it: a replica pool
/// (it picks the session's replica by it) or an OpenAI-compatible server (a vLLM
/// Router in front of workers hashes it, vLLM itself ignores it). The Anthropic cloud
/// and Ollama are not sent it.
fn with_session_key(
    mut headers: HeaderMap,
    backend: &Backend,
    dialect: Dialect,
    session: Option<&str>,
) -> HeaderMap {
    let openai_compatible = matches!(dialect, Dialect::OpenAiChat | Dialect::OpenAiResponses);
    if let Some(session) = session
        && (openai_compatible || backend.pool.is_some())
        && let Ok(value) = HeaderValue::from_str(&session_key_digest(session))
    {
        headers.insert(HeaderName::from_static(SESSION_KEY_HEADER), value);
    }
    headers
}

/// Gather every system turn into one leading turn. Claude Code puts a system entry
/// after the user turn; many local chat templates refuse a system message anywhere but
/// first ("System message must be at the beginning").
pub(crate) fn hoist_system_turns(turns: &mut Vec<Turn>) {
    let later_system = turns.iter().skip(1).any(|t| t.role == Role::System);
    if !later_system {
        return;
    }
    let (system, rest): (Vec<Turn>, Vec<Turn>) = std::mem::take(turns)
        .into_iter()
        .partition(|t| t.role == Role::System);
    let parts = system.into_iter().flat_map(|t| t.parts).collect();
    turns.push(Turn {
        role: Role::System,
        parts,
    });
    turns.extend(rest);
}

/// Client headers a backend should see (its credentials rule: see
/// `glider_backend::credentials`).
pub(crate) fn forward_headers(front: Dialect, client: &HeaderMap, backend: &Backend) -> HeaderMap {
    backend.client_headers(front, client)
}

/// The body with its top-level `model` replaced; untouched bytes when it is unchanged.
/// The new name is spliced over the old one's bytes, so the rest of the body is the
/// client's own, byte for byte; a body the scan cannot place the model in (see
/// [`top_level_string`]) is parsed and re-serialised.
fn rewrite_model(body: &Bytes, from: &str, to: &str) -> Bytes {
    if from == to {
        return body.clone();
    }
    if let Some(span) = top_level_string(body, "model") {
        let name = serde_json::Value::from(to).to_string();
        let mut out = Vec::with_capacity(body.len() - span.len() + name.len());
        out.extend_from_slice(&body[..span.start]);
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&body[span.end..]);
        return Bytes::from(out);
    }
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(body) {
        Ok(mut map) => {
            map.insert("model".into(), to.into());
            serde_json::to_vec(&map)
                .map(Bytes::from)
                .unwrap_or_else(|_| body.clone())
        }
        Err(_) => body.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_turns_are_hoisted_in_order() {
        let mut turns = vec![
            Turn::text(Role::System, "a"),
            Turn::text(Role::User, "q"),
            Turn::text(Role::System, "b"),
        ];
        hoist_system_turns(&mut turns);
        assert_eq!(turns.len(), 2);
        assert_eq!(turns[0].role, Role::System);
        assert_eq!(turns[0].plain_text(), "a\nb");
        assert_eq!(turns[1].plain_text(), "q");
    }

    #[test]
    fn model_rewrite_keeps_untouched_bytes_when_unchanged() {
        let body = Bytes::from_static(b"{\"model\":\"a\",  \"x\":1}");
        assert_eq!(rewrite_model(&body, "a", "a"), body);
        let rewritten: serde_json::Value =
            serde_json::from_slice(&rewrite_model(&body, "a", "b")).expect("json");
        assert_eq!(rewritten, serde_json::json!({"model": "b", "x": 1}));
    }

    #[test]
    fn model_rewrite_changes_only_the_model_bytes() {
        let body = Bytes::from_static(b"{\"x\": 1.50, \"model\":\"a\",  \"y\":[\"model\"]}");
        assert_eq!(
            rewrite_model(&body, "a", "q\"wen"),
            Bytes::from_static(b"{\"x\": 1.50, \"model\":\"q\\\"wen\",  \"y\":[\"model\"]}")
        );
        // Twice at the top level: the full parse decides (the last one wins, as in decoding).
        let twice = Bytes::from_static(b"{\"model\":\"a\",\"model\":\"a\"}");
        let rewritten: serde_json::Value =
            serde_json::from_slice(&rewrite_model(&twice, "a", "b")).expect("json");
        assert_eq!(rewritten, serde_json::json!({"model": "b"}));
    }
}
