//! docs/translation.md's parameter tables held to the codecs: for every row of every
//! front, the row's sample request is decoded in the front's dialect and, for each
//! backend type, checked against what its cell says — `honoured`/`forwarded`: the body
//! that backend is sent changes with the parameter; `dropped` (a hint) and `lossy` (an
//! open loss): it does not; `refused`:
//! `carry::carried` refuses it with a 400 naming the parameter; `glider`: done by
//! Glider itself, checked end to end elsewhere. And every field `carry` refuses is a
//! row refused in every other dialect's columns, so the two lists are one.

use glider_dialects::carry::{local_refusal, refused_fields, verdict};
use glider_dialects::codec;
use glider_ngl::{Dialect, ErrorKind, Request};
use serde_json::{Map, Value, json};

const DOC: &str = include_str!("../../../docs/translation.md");

/// The backend types of the columns, in order.
const TYPES: [&str; 4] = ["ollama", "vllm", "openai", "anthropic"];

/// The dialect Glider speaks to a backend of `kind` for a client of `front` (the rule of
/// `Backend::dialect_for` in glider-backend).
fn dialect_of(kind: &str, front: Dialect) -> Dialect {
    match kind {
        "ollama" => Dialect::Ollama,
        "vllm" => Dialect::OpenAiChat,
        "anthropic" => Dialect::Anthropic,
        _ if front == Dialect::OpenAiResponses => Dialect::OpenAiResponses,
        _ => Dialect::OpenAiChat,
    }
}

/// The smallest valid request of each front, that a row's sample is merged into.
fn base(front: Dialect) -> Value {
    match front {
        Dialect::Anthropic => json!({"model": "m", "max_tokens": 100,
                                     "messages": [{"role": "user", "content": "hi"}]}),
        Dialect::OpenAiResponses => json!({"model": "m", "input": "hi"}),
        Dialect::OpenAiChat | Dialect::Ollama => {
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        }
    }
}

struct Row {
    front: Dialect,
    parameter: String,
    sample: Map<String, Value>,
    cells: Vec<String>,
}

/// Every table row under "### Parameters, front by front".
fn rows() -> Vec<Row> {
    let section = DOC
        .split("### Parameters, front by front")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("docs/translation.md has the parameter tables");
    let mut front = None;
    let mut rows = Vec::new();
    for line in section.lines() {
        if let Some(heading) = line.strip_prefix("#### ") {
            // A front's table is under a heading naming its dialect; the prose after
            // the tables ("Content that is not a field") names none.
            front = Dialect::ALL
                .into_iter()
                .find(|d| heading.contains(&format!("(`{}`", d.as_str())));
            continue;
        }
        if !line.starts_with("| `") {
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // ["", parameter, sample, 4 types, note, ""]
        assert_eq!(cells.len(), 9, "{line}");
        let unquote = |cell: &str| cell.trim_matches('`').to_owned();
        let sample: Value = serde_json::from_str(&unquote(cells[2]))
            .unwrap_or_else(|e| panic!("sample of {line}: {e}"));
        rows.push(Row {
            front: front.expect("a table under a front heading"),
            parameter: unquote(cells[1]),
            sample: sample.as_object().cloned().expect("a sample object"),
            cells: cells[3..7].iter().map(|c| (*c).to_owned()).collect(),
        });
    }
    rows
}

/// The request `body` as the front decodes it.
fn decoded(front: Dialect, body: &Value) -> Request {
    codec(front)
        .decode_request(body.to_string().as_bytes())
        .unwrap_or_else(|e| panic!("{front:?} decodes {body}: {e}"))
}

/// Whether every backend of `kind` runs on the user's machine (`BackendKind::is_local`;
/// an `anthropic` or `openai` one is local only with `local: true`, noted in the table).
fn local(kind: &str) -> bool {
    matches!(kind, "ollama" | "vllm")
}

/// The body a backend speaking `to` is sent for `request` (by the pipeline's carry
/// phase: a local server of the client's own dialect is refused what only the
/// vendor's cloud serves).
fn sent(request: &Request, to: Dialect, local: bool) -> Result<Value, glider_ngl::ApiError> {
    let front = request.extra.as_ref().map_or(to, |extra| extra.dialect);
    let carried = verdict(request, None, to, front, local)?;
    Ok(codec(to).encode_request(carried.as_ref().unwrap_or(request)))
}

/// The top-level key a parameter lives in (`options.top_k` lives in `options`).
fn key_of(parameter: &str) -> &str {
    parameter.split('.').next().unwrap_or(parameter)
}

#[test]
fn every_parameter_cell_is_what_the_codecs_do() {
    let rows = rows();
    assert!(rows.len() > 60, "{} rows", rows.len());
    let mut wrong = Vec::new();
    for row in &rows {
        let mut with = base(row.front);
        let mut without = base(row.front);
        for (key, value) in &row.sample {
            with[key] = value.clone();
            if key != key_of(&row.parameter) {
                without[key] = value.clone();
            }
        }
        let (with, without) = (decoded(row.front, &with), decoded(row.front, &without));
        for (kind, cell) in TYPES.iter().zip(&row.cells) {
            let to = dialect_of(kind, row.front);
            let place = format!("{} front, `{}`, {kind}", row.front.as_str(), row.parameter);
            let (got, base) = (
                sent(&with, to, local(kind)),
                sent(&without, to, local(kind)),
            );
            let ok = match cell.as_str() {
                "honoured" | "forwarded" => matches!((&got, &base), (Ok(a), Ok(b)) if a != b),
                "dropped" | "lossy" => matches!((&got, &base), (Ok(a), Ok(b)) if a == b),
                "refused" => matches!(&got, Err(e)
                    if e.kind == ErrorKind::InvalidRequest
                        && e.param.as_deref() == Some(row.parameter.as_str())
                        && e.message.starts_with(&row.parameter)),
                "glider" => true,
                other => panic!("{place}: unknown cell {other:?}"),
            };
            // `forwarded` is for the client's own dialect, `honoured` for another.
            let word_fits = match cell.as_str() {
                "forwarded" => to == row.front,
                "honoured" => to != row.front,
                _ => true,
            };
            if !ok || !word_fits {
                wrong.push(format!(
                    "{place}: the table says {cell}, but the body sent is {}",
                    match (&got, &base) {
                        (Err(e), _) => format!("refused: {}", e.message),
                        (Ok(a), Ok(b)) if a == b => "the same without it".to_owned(),
                        (Ok(a), _) => format!("{a}"),
                    }
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn every_field_carry_refuses_is_in_the_table() {
    let rows = rows();
    for front in Dialect::ALL {
        for field in refused_fields(front) {
            let row = rows
                .iter()
                .find(|r| r.front == front && r.parameter == field)
                .unwrap_or_else(|| panic!("{front:?} `{field}` has no row"));
            // Refused to a local server of its own dialect too when only the
            // vendor's cloud serves it.
            let mut body = base(front);
            for (key, value) in &row.sample {
                body[key] = value.clone();
            }
            let cloud_only = local_refusal(&decoded(front, &body)).is_some();
            for (kind, cell) in TYPES.iter().zip(&row.cells) {
                let own = dialect_of(kind, front) == front;
                let expected = if own && !(local(kind) && cloud_only) {
                    "forwarded"
                } else {
                    "refused"
                };
                assert_eq!(cell, expected, "{front:?} `{field}` for {kind}");
            }
        }
    }
}

#[test]
fn a_wrong_cell_is_caught() {
    // The check above can fail: `n` forwarded to Ollama is not what the codecs do.
    let request = decoded(
        Dialect::OpenAiChat,
        &json!({"model": "m", "n": 2, "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert!(sent(&request, Dialect::Ollama, true).is_err());
    // And a dropped hint really is the same body.
    let hinted = decoded(
        Dialect::OpenAiChat,
        &json!({"model": "m", "user": "u", "messages": [{"role": "user", "content": "hi"}]}),
    );
    let plain = decoded(Dialect::OpenAiChat, &base(Dialect::OpenAiChat));
    assert_eq!(
        sent(&hinted, Dialect::Ollama, true).ok(),
        sent(&plain, Dialect::Ollama, true).ok()
    );
}
