//! Whose credentials a backend's requests carry. A configured key wins. A cloud
//! backend whose configured key resolves to nothing (its `${VAR}` is unset, the normal
//! case for a CLI user logged in with a subscription) or that has none forwards the
//! client's own credentials — `x-api-key`, or the OAuth bearer with the
//! `anthropic-beta` values sent with it — but only from a client speaking that
//! vendor's dialect, so an OpenAI key never reaches Anthropic nor the reverse. A local
//! server never gets a client's credentials.

use glider_config::{BackendConfig, BackendKind, Unresolved};
use glider_ngl::Dialect;
use http::{HeaderMap, HeaderValue};

/// How a backend authenticates its requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credentials {
    /// The key from the config.
    Configured,
    /// A cloud backend without a key of its own: the client's credentials are
    /// forwarded. `unset` names the variable the configured key was waiting for.
    Client { unset: Option<String> },
    /// A local server without a key (it is never sent the client's).
    Keyless,
}

/// What a backend's `api_key` comes to: the mode and the key itself, or why the backend
/// cannot be used (a malformed value, or a local server's key variable that is unset).
pub(crate) fn resolve(config: &BackendConfig) -> Result<(Credentials, Option<String>), String> {
    let cloud = !config.is_local();
    match config.api_key.as_ref().map(|key| key.lookup()) {
        Some(Ok(key)) => Ok((Credentials::Configured, Some(key))),
        Some(Err(Unresolved::Unset(variable))) if cloud => Ok((
            Credentials::Client {
                unset: Some(variable),
            },
            None,
        )),
        Some(Err(why)) => Err(why.to_string()),
        None if cloud => Ok((Credentials::Client { unset: None }, None)),
        None => Ok((Credentials::Keyless, None)),
    }
}

/// Whether `config` forwards the client's own credentials (no usable key of its own).
pub fn forwards_client_credentials(config: &BackendConfig) -> bool {
    matches!(resolve(config), Ok((Credentials::Client { .. }, _)))
}

/// The mode `config` would run in, in words (for `glider serve` and `glider check`).
pub fn describe(config: &BackendConfig) -> String {
    match resolve(config) {
        Ok((Credentials::Configured, _)) => "configured key".to_owned(),
        Ok((Credentials::Client { unset }, _)) => {
            let why = match unset {
                Some(variable) => format!("{variable} is not set"),
                None => "no api_key configured".to_owned(),
            };
            format!(
                "the client's own credentials ({why}; an {}-dialect client's {} is forwarded)",
                vendor(config.kind),
                credential_headers(config.kind).join(" or ")
            )
        }
        Ok((Credentials::Keyless, _)) => "no key".to_owned(),
        Err(why) => format!("unusable: {why}"),
    }
}

/// The vendor whose clients' credentials a backend of `kind` may forward.
fn vendor(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Anthropic => "Anthropic",
        _ => "OpenAI",
    }
}

/// The client headers that carry a credential for a backend of `kind`.
fn credential_headers(kind: BackendKind) -> &'static [&'static str] {
    match kind {
        BackendKind::Anthropic => &["x-api-key", "authorization"],
        _ => &["authorization"],
    }
}

/// Whether a client speaking `front` holds credentials meant for a backend of `kind`.
fn same_vendor(kind: BackendKind, front: Dialect) -> bool {
    match kind {
        BackendKind::Anthropic => front == Dialect::Anthropic,
        BackendKind::Openai => matches!(front, Dialect::OpenAiChat | Dialect::OpenAiResponses),
        BackendKind::Ollama | BackendKind::Vllm => false,
    }
}

/// The credential headers (and, for Anthropic, the `anthropic-beta` values) of a
/// `front` client to send to a backend of `kind` authenticating with `mode`.
pub(crate) fn client_headers(
    mode: &Credentials,
    kind: BackendKind,
    front: Dialect,
    client: &HeaderMap,
) -> HeaderMap {
    let mut out = HeaderMap::new();
    let forwarded = matches!(mode, Credentials::Client { .. }) && same_vendor(kind, front);
    if forwarded {
        for name in credential_headers(kind) {
            for value in client.get_all(*name) {
                out.append(*name, value.clone());
            }
        }
    }
    if kind == BackendKind::Anthropic {
        // The OAuth beta goes with the client's bearer only: beside a configured key (or
        // the client's x-api-key) it would announce a token that is not there.
        let bearer = forwarded && out.contains_key(http::header::AUTHORIZATION);
        for value in client.get_all("anthropic-beta") {
            if let Some(value) = beta_values(value, bearer) {
                out.append("anthropic-beta", value);
            }
        }
    }
    out
}

/// One `anthropic-beta` header value, without its `oauth-*` entries unless a bearer
/// token goes with it; `None` when nothing is left.
fn beta_values(value: &HeaderValue, bearer: bool) -> Option<HeaderValue> {
    let Ok(text) = value.to_str() else {
        return Some(value.clone());
    };
    if bearer || !text.contains("oauth-") {
        return Some(value.clone());
    }
    let kept: Vec<&str> = text
        .split(',')
        .map(str::trim)
        .filter(|beta| !beta.is_empty() && !beta.starts_with("oauth-"))
        .collect();
    (!kept.is_empty())
        .then(|| HeaderValue::from_str(&kept.join(",")).ok())
        .flatten()
}

/// Whether `headers` (as [`client_headers`] left them) carry a credential for `kind`.
pub(crate) fn carries_credential(kind: BackendKind, headers: &HeaderMap) -> bool {
    credential_headers(kind)
        .iter()
        .any(|name| headers.contains_key(*name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(kind: &str, api_key: Option<&str>) -> BackendConfig {
        let key = api_key
            .map(|k| format!(", api_key: '{k}'"))
            .unwrap_or_default();
        let yaml = format!(
            "backends:\n  - {{name: b, type: {kind}, base_url: 'http://x', models: [m]{key}}}\n"
        );
        let mut parsed = glider_config::Config::parse(&yaml, "test").expect("valid");
        parsed.backends.remove(0)
    }

    fn client() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("sk-ant-client"));
        headers.insert(
            "authorization",
            HeaderValue::from_static("Bearer sk-ant-oat-client"),
        );
        headers.insert(
            "anthropic-beta",
            HeaderValue::from_static("oauth-2025-04-20,claude-code-20250219"),
        );
        headers
    }

    #[test]
    fn an_unset_cloud_key_means_the_clients_credentials_and_a_local_one_stays_an_error() {
        let unset = "${GLIDER_TEST_SURELY_UNSET_VAR}";
        assert_eq!(
            resolve(&config("anthropic", Some(unset))).map(|r| r.0),
            Ok(Credentials::Client {
                unset: Some("GLIDER_TEST_SURELY_UNSET_VAR".into())
            })
        );
        assert_eq!(
            resolve(&config("openai", None)).map(|r| r.0),
            Ok(Credentials::Client { unset: None })
        );
        assert_eq!(
            resolve(&config("openai", Some("k"))),
            Ok((Credentials::Configured, Some("k".into())))
        );
        assert_eq!(
            resolve(&config("vllm", None)).map(|r| r.0),
            Ok(Credentials::Keyless)
        );
        assert!(resolve(&config("vllm", Some(unset))).is_err());
        assert!(resolve(&config("anthropic", Some("${broken"))).is_err());
        assert!(describe(&config("anthropic", Some(unset))).contains("is not set"));
    }

    #[test]
    fn a_local_anthropic_wire_server_is_keyless_and_gets_no_client_credentials() {
        let mut local = config("anthropic", None);
        local.local = true;
        let (mode, key) = resolve(&local).expect("resolves");
        assert_eq!((&mode, key), (&Credentials::Keyless, None));
        let out = client_headers(&mode, BackendKind::Anthropic, Dialect::Anthropic, &client());
        assert!(!carries_credential(BackendKind::Anthropic, &out), "{out:?}");
        // Its key variable unset is the same error as any local server's.
        local.api_key = Some(glider_config::Secret(
            "${GLIDER_TEST_SURELY_UNSET_VAR}".into(),
        ));
        assert!(resolve(&local).is_err());
    }

    #[test]
    fn credentials_go_only_to_a_cloud_backend_of_the_clients_own_vendor() {
        let passthrough = Credentials::Client { unset: None };
        let to_anthropic = client_headers(
            &passthrough,
            BackendKind::Anthropic,
            Dialect::Anthropic,
            &client(),
        );
        assert_eq!(to_anthropic["x-api-key"], "sk-ant-client");
        assert_eq!(to_anthropic["authorization"], "Bearer sk-ant-oat-client");
        assert_eq!(
            to_anthropic["anthropic-beta"],
            "oauth-2025-04-20,claude-code-20250219"
        );
        // An Anthropic client's bearer never reaches OpenAI, nor an OpenAI client's
        // Anthropic; a local server never gets any.
        for (kind, front) in [
            (BackendKind::Openai, Dialect::Anthropic),
            (BackendKind::Anthropic, Dialect::OpenAiChat),
            (BackendKind::Vllm, Dialect::OpenAiChat),
            (BackendKind::Ollama, Dialect::Ollama),
        ] {
            let out = client_headers(&passthrough, kind, front, &client());
            assert!(!carries_credential(kind, &out), "{kind:?} from {front:?}");
            assert!(!out.contains_key("x-api-key") && !out.contains_key("authorization"));
        }
    }

    #[test]
    fn a_configured_key_drops_the_clients_credentials_and_oauth_beta() {
        let out = client_headers(
            &Credentials::Configured,
            BackendKind::Anthropic,
            Dialect::Anthropic,
            &client(),
        );
        assert!(!carries_credential(BackendKind::Anthropic, &out));
        assert_eq!(out["anthropic-beta"], "claude-code-20250219");
        let mut only_oauth = HeaderMap::new();
        only_oauth.insert(
            "anthropic-beta",
            HeaderValue::from_static("oauth-2025-04-20"),
        );
        let out = client_headers(
            &Credentials::Configured,
            BackendKind::Anthropic,
            Dialect::Anthropic,
            &only_oauth,
        );
        assert!(out.is_empty());
    }
}
