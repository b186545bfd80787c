//! Typed readers of JSON body fields, shared by every dialect: a client's bad field is a
//! 400 [`ApiError`] naming its path, a backend's garbage is a `BadGateway`. Dialects word
//! their 400s differently, so each reads through its own [`FieldReader`] of texts.

use std::fmt::Display;

use glider_ngl::{ApiError, ErrorKind};
use serde_json::{Map, Value};

/// A JSON object.
pub(crate) type Object = Map<String, Value>;

/// `path.key`, or `key` at the top level.
pub(crate) fn join_path(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// A 400 naming the offending field.
pub(crate) fn invalid_at(path: &str, what: impl Display) -> ApiError {
    ApiError::invalid(format!("{path}: {what}")).with_param(path)
}

/// A 502: the backend answered something we cannot read.
pub(crate) fn bad_gateway(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorKind::BadGateway, message)
}

/// `key` of `value` as a string, if it is one (backend replies: absence is not an error).
pub(crate) fn str_field<'a>(value: &'a impl Fields, key: &str) -> Option<&'a str> {
    value.present(key).and_then(Value::as_str)
}

/// Remove `key`; an explicit `null` counts as absent.
pub(crate) fn take(map: &mut Object, key: &str) -> Option<Value> {
    match map.remove(key) {
        None | Some(Value::Null) => None,
        Some(value) => Some(value),
    }
}

/// Something with fields: an object, or any JSON value (a non-object has none).
pub(crate) trait Fields {
    /// `key`'s value; an explicit `null` counts as absent.
    fn present(&self, key: &str) -> Option<&Value>;
}

impl Fields for Object {
    fn present(&self, key: &str) -> Option<&Value> {
        self.get(key).filter(|v| !v.is_null())
    }
}

impl Fields for Value {
    fn present(&self, key: &str) -> Option<&Value> {
        self.get(key).filter(|v| !v.is_null())
    }
}

/// What a dialect's 400s say when a field is missing or has the wrong type. Anthropic
/// says `expected string`, Chat Completions `expected a string`, and clients and tests
/// match these texts, so each dialect keeps its own.
pub(crate) struct FieldReader {
    pub(crate) missing: &'static str,
    pub(crate) string: &'static str,
    pub(crate) number: &'static str,
    pub(crate) boolean: &'static str,
    pub(crate) object: &'static str,
    /// A value that is not a number, where an integer belongs.
    pub(crate) integer: &'static str,
    /// A number that is no `i64` (a fraction, or beyond `i64::MAX`), where an integer belongs.
    pub(crate) fraction: &'static str,
}

/// The 400 for an integer that does not fit a `u32` count.
const NON_NEGATIVE: &str = "expected a non-negative integer";

impl FieldReader {
    /// Anthropic Messages wording (pydantic's `Field required`).
    pub(crate) const ANTHROPIC: FieldReader = FieldReader {
        missing: "Field required",
        string: "expected string",
        number: "expected number",
        boolean: "expected boolean",
        object: "expected object",
        integer: NON_NEGATIVE,
        fraction: NON_NEGATIVE,
    };

    /// OpenAI Responses wording.
    pub(crate) const RESPONSES: FieldReader = FieldReader {
        missing: "required",
        string: "expected string",
        number: "expected number",
        boolean: "expected boolean",
        object: "expected object",
        integer: "expected integer",
        fraction: NON_NEGATIVE,
    };

    /// Chat Completions wording, which the Ollama codec shares.
    pub(crate) const CHAT: FieldReader = FieldReader {
        missing: "required",
        string: "expected a string",
        number: "expected a number",
        boolean: "expected a boolean",
        object: "expected an object",
        integer: "expected an integer",
        fraction: "expected an integer",
    };

    /// `value` converted, or the 400 `expected` at `path`; `None` stays `None`.
    fn read<'a, T>(
        value: Option<&'a Value>,
        path: &str,
        expected: &str,
        convert: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>, ApiError> {
        match value {
            None => Ok(None),
            Some(v) => convert(v)
                .map(Some)
                .ok_or_else(|| invalid_at(path, expected)),
        }
    }

    pub(crate) fn str<'a>(
        &self,
        value: Option<&'a Value>,
        path: &str,
    ) -> Result<Option<&'a str>, ApiError> {
        Self::read(value, path, self.string, Value::as_str)
    }

    pub(crate) fn f64(&self, value: Option<&Value>, path: &str) -> Result<Option<f64>, ApiError> {
        Self::read(value, path, self.number, Value::as_f64)
    }

    pub(crate) fn bool(&self, value: Option<&Value>, path: &str) -> Result<Option<bool>, ApiError> {
        Self::read(value, path, self.boolean, Value::as_bool)
    }

    pub(crate) fn i64(&self, value: Option<&Value>, path: &str) -> Result<Option<i64>, ApiError> {
        Self::read(value, path, self.integer, Value::as_i64)
    }

    /// A non-negative integer that fits `u32`.
    pub(crate) fn u32(&self, value: Option<&Value>, path: &str) -> Result<Option<u32>, ApiError> {
        let Some(value) = value else { return Ok(None) };
        let Value::Number(n) = value else {
            return Err(invalid_at(path, self.integer));
        };
        let Some(i) = n.as_i64() else {
            return Err(invalid_at(path, self.fraction));
        };
        u32::try_from(i)
            .map(Some)
            .map_err(|_| invalid_at(path, NON_NEGATIVE))
    }

    /// `value` as an object.
    pub(crate) fn object<'a>(&self, value: &'a Value, path: &str) -> Result<&'a Object, ApiError> {
        value
            .as_object()
            .ok_or_else(|| invalid_at(path, self.object))
    }

    /// An owned `value` as an object.
    pub(crate) fn owned_object(&self, value: Value, path: &str) -> Result<Object, ApiError> {
        match value {
            Value::Object(map) => Ok(map),
            _ => Err(invalid_at(path, self.object)),
        }
    }

    // Borrowing readers of `obj.key` (at `path.key`), for dialects that read a body in place.

    pub(crate) fn required<'a>(
        &self,
        obj: &'a impl Fields,
        key: &str,
        path: &str,
    ) -> Result<&'a Value, ApiError> {
        obj.present(key)
            .ok_or_else(|| invalid_at(&join_path(path, key), self.missing))
    }

    pub(crate) fn required_str<'a>(
        &self,
        obj: &'a impl Fields,
        key: &str,
        path: &str,
    ) -> Result<&'a str, ApiError> {
        let value = self.required(obj, key, path)?;
        value
            .as_str()
            .ok_or_else(|| invalid_at(&join_path(path, key), self.string))
    }

    pub(crate) fn optional_str<'a>(
        &self,
        obj: &'a impl Fields,
        key: &str,
        path: &str,
    ) -> Result<Option<&'a str>, ApiError> {
        self.str(obj.present(key), &join_path(path, key))
    }

    pub(crate) fn optional_f64(
        &self,
        obj: &impl Fields,
        key: &str,
        path: &str,
    ) -> Result<Option<f64>, ApiError> {
        self.f64(obj.present(key), &join_path(path, key))
    }

    pub(crate) fn optional_bool(
        &self,
        obj: &impl Fields,
        key: &str,
        path: &str,
    ) -> Result<Option<bool>, ApiError> {
        self.bool(obj.present(key), &join_path(path, key))
    }

    pub(crate) fn optional_u32(
        &self,
        obj: &impl Fields,
        key: &str,
        path: &str,
    ) -> Result<Option<u32>, ApiError> {
        self.u32(obj.present(key), &join_path(path, key))
    }

    // Taking readers of `map.key` (at `path.key`): what is taken is not left for `extra`.

    pub(crate) fn take_string(
        &self,
        map: &mut Object,
        key: &str,
        path: &str,
    ) -> Result<Option<String>, ApiError> {
        match take(map, key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(invalid_at(&join_path(path, key), self.string)),
        }
    }

    pub(crate) fn take_number(
        &self,
        map: &mut Object,
        key: &str,
        path: &str,
    ) -> Result<Option<f64>, ApiError> {
        self.f64(take(map, key).as_ref(), &join_path(path, key))
    }

    pub(crate) fn take_i64(
        &self,
        map: &mut Object,
        key: &str,
        path: &str,
    ) -> Result<Option<i64>, ApiError> {
        self.i64(take(map, key).as_ref(), &join_path(path, key))
    }

    pub(crate) fn take_u32(
        &self,
        map: &mut Object,
        key: &str,
        path: &str,
    ) -> Result<Option<u32>, ApiError> {
        self.u32(take(map, key).as_ref(), &join_path(path, key))
    }

    pub(crate) fn take_bool(
        &self,
        map: &mut Object,
        key: &str,
        path: &str,
    ) -> Result<Option<bool>, ApiError> {
        self.bool(take(map, key).as_ref(), &join_path(path, key))
    }
}
