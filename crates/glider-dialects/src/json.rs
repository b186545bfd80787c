//! Typed readers of JSON body fields shared by every dialect: a client's bad field is a 400
//! [`ApiError`] naming its path, a backend's garbage is a `BadGateway`.

use glider_ngl::{ApiError, ErrorKind};
use serde_json::{Map, Value};

/// `path.key`, or `key` at the top level.
pub(crate) fn join_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A 400 naming the offending field.
pub(crate) fn invalid_at(path: &str, what: &str) -> ApiError {
    ApiError::invalid(format!("{path}: {what}")).with_param(path)
}

/// A 502: the backend answered something we cannot read.
pub(crate) fn bad_gateway(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::BadGateway, message)
}

/// Remove `key`; an explicit `null` counts as absent.
pub(crate) fn take(map: &mut Map<String, Value>, key: &str) -> Option<Value> {
    match map.remove(key) {
        None | Some(Value::Null) => None,
        Some(value) => Some(value),
    }
}

/// The value must be an object.
pub(crate) fn expect_object(value: Value, path: &str) -> Result<Map<String, Value>, ApiError> {
    match value {
        Value::Object(map) => Ok(map),
        _ => Err(invalid_at(path, "expected an object")),
    }
}

/// Take `key` and convert it, or say which type was expected.
fn take_as<T>(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
    expected: &str,
    convert: impl FnOnce(Value) -> Option<T>,
) -> Result<Option<T>, ApiError> {
    match take(map, key) {
        None => Ok(None),
        Some(value) => convert(value)
            .map(Some)
            .ok_or_else(|| invalid_at(&join_path(path, key), &format!("expected {expected}"))),
    }
}

pub(crate) fn take_string(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, ApiError> {
    take_as(map, key, path, "a string", |v| match v {
        Value::String(s) => Some(s),
        _ => None,
    })
}

pub(crate) fn take_number(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<f64>, ApiError> {
    take_as(map, key, path, "a number", |v| v.as_f64())
}

pub(crate) fn take_i64(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<i64>, ApiError> {
    take_as(map, key, path, "an integer", |v| v.as_i64())
}

/// A non-negative integer that fits `u32`.
pub(crate) fn take_u32(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<u32>, ApiError> {
    match take_i64(map, key, path)? {
        None => Ok(None),
        Some(i) => u32::try_from(i)
            .map(Some)
            .map_err(|_| invalid_at(&join_path(path, key), "expected a non-negative integer")),
    }
}

pub(crate) fn take_bool(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<bool>, ApiError> {
    take_as(map, key, path, "a boolean", |v| v.as_bool())
}

/// Stop sequences: a string or an array of strings.
pub(crate) fn take_stop(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Vec<String>, ApiError> {
    let here = join_path(path, key);
    match take(map, key) {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s]),
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(s) => Ok(s),
                _ => Err(invalid_at(&format!("{here}.{i}"), "expected a string")),
            })
            .collect(),
        Some(_) => Err(invalid_at(
            &here,
            "expected a string or an array of strings",
        )),
    }
}

/// `top_k`: vLLM and llama.cpp use `-1`/`0` for "disabled", which is ngl's `None`.
pub(crate) fn take_top_k(
    map: &mut Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<u32>, ApiError> {
    match take_i64(map, key, path)? {
        Some(k) if k > 0 => Ok(Some(u32::try_from(k).unwrap_or(u32::MAX))),
        _ => Ok(None),
    }
}
