//! OAuth for Streamable HTTP MCP servers (MCP authorization, revisions 2025-06-18 and
//! 2025-11-25): what `glider mcp login NAME` does and what a connection then sends.
//! Discovery follows a server's `401` (`WWW-Authenticate: Bearer resource_metadata=…`)
//! to its protected-resource metadata (RFC 9728) and its authorization server's metadata
//! (RFC 8414, falling back to OpenID discovery) ([`discovery`]); the login is the device
//! flow (RFC 8628, GitHub's preset) or the authorization code with PKCE (RFC 7636) and
//! the `resource` parameter (RFC 8707) over a loopback redirect ([`flows`]); the token is
//! kept per server under GLIDER_HOME, 0600 and written atomically ([`store`]), and sent
//! as the bearer, refreshed before it expires and after a `401` ([`client`]).

mod client;
pub mod discovery;
pub mod flows;
pub mod store;

pub use client::AuthorizedClient;
pub use flows::login;
pub use store::{StoredToken, TokenSource, token_dir, token_path};

use serde::Deserialize;

/// Why a server has no usable token, or a login failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// The user must log in (again): no token, a token for another URL, or one that
    /// expired and could not be refreshed.
    #[error("MCP server {server:?} {why}: run `glider mcp login {server}`")]
    NeedsLogin { server: String, why: String },
    /// Discovery, a flow or a token request failed.
    #[error("{0}")]
    Failed(String),
}

impl AuthError {
    pub(crate) fn needs_login(server: &str, why: impl Into<String>) -> AuthError {
        AuthError::NeedsLogin {
            server: server.to_owned(),
            why: why.into(),
        }
    }
}

/// A token endpoint's answer (RFC 6749 §5.1/§5.2, RFC 8628 §3.5): the token, or an
/// `error` code. GitHub answers its device-flow errors with 200, others with 400, so
/// both are read the same way.
#[derive(Deserialize, Default)]
pub(crate) struct TokenReply {
    pub(crate) access_token: Option<String>,
    pub(crate) refresh_token: Option<String>,
    pub(crate) expires_in: Option<u64>,
    pub(crate) error: Option<String>,
    pub(crate) error_description: Option<String>,
    /// RFC 8628 `slow_down`: GitHub sends the new interval with it.
    pub(crate) interval: Option<u64>,
}

impl TokenReply {
    /// `error (description)`, for messages.
    pub(crate) fn why(&self) -> String {
        match (&self.error, &self.error_description) {
            (Some(error), Some(description)) => format!("{error}: {description}"),
            (Some(error), None) => error.clone(),
            (None, _) => "no access_token in the answer".to_owned(),
        }
    }
}

/// POST `form` to a token (or device-authorization) endpoint and read its JSON answer
/// whatever the status. The body is never put in an error: it may hold a token.
pub(crate) async fn post_form<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    endpoint: &str,
    form: &[(&str, &str)],
) -> Result<T, AuthError> {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let reply = http
        .post(endpoint)
        // The MCP connection's client has no overall timeout (it carries SSE streams),
        // and a refresh holds the lock every request to the server waits on.
        .timeout(std::time::Duration::from_secs(30))
        .header(http::header::ACCEPT, "application/json")
        .header(
            http::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(body)
        .send()
        .await
        .map_err(|e| AuthError::Failed(format!("cannot reach {endpoint}: {e}")))?;
    let status = reply.status();
    let bytes = reply
        .bytes()
        .await
        .map_err(|e| AuthError::Failed(format!("{endpoint}: reading the answer failed: {e}")))?;
    serde_json::from_slice(&bytes).map_err(|_| {
        AuthError::Failed(format!(
            "{endpoint} answered {status} without the JSON an OAuth endpoint sends"
        ))
    })
}

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
