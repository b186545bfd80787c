//! A server's OAuth token on disk (`GLIDER_HOME/mcp-auth/NAME.json`, 0600, written
//! atomically) and [`TokenSource`], which hands a connection the current bearer,
//! refreshing it with the refresh token before it expires or after the server rejected
//! it. Tokens never reach a log: [`StoredToken`]'s `Debug` redacts them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{AuthError, TokenReply, post_form, unix_now};

/// What a login leaves for a server.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredToken {
    pub access_token: String,
    pub refresh_token: Option<String>,
    /// Unix seconds when the access token expires (none: it does not say).
    pub expires_at: Option<u64>,
    /// Where it is refreshed, and as which client, for which resource (RFC 8707).
    pub token_endpoint: String,
    pub client_id: String,
    pub resource: Option<String>,
    /// The server URL it was obtained for: a token is not sent to another one.
    pub server_url: String,
}

impl std::fmt::Debug for StoredToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoredToken")
            .field("access_token", &"****")
            .field(
                "refresh_token",
                &self.refresh_token.as_ref().map(|_| "****"),
            )
            .field("expires_at", &self.expires_at)
            .field("token_endpoint", &self.token_endpoint)
            .field("client_id", &self.client_id)
            .field("resource", &self.resource)
            .field("server_url", &self.server_url)
            .finish()
    }
}

impl StoredToken {
    /// The token a token endpoint granted, over `base` (the endpoint, client and
    /// resource it was asked for); `base`'s refresh token stays when the answer brings
    /// no new one (refresh tokens need not rotate).
    pub(crate) fn granted(reply: TokenReply, base: StoredToken) -> Result<StoredToken, AuthError> {
        let Some(access_token) = reply.access_token.clone().filter(|t| !t.is_empty()) else {
            return Err(AuthError::Failed(format!(
                "the token endpoint {} granted no token ({})",
                base.token_endpoint,
                reply.why()
            )));
        };
        Ok(StoredToken {
            access_token,
            refresh_token: reply.refresh_token.or(base.refresh_token.clone()),
            expires_at: reply.expires_in.map(|secs| unix_now().saturating_add(secs)),
            ..base
        })
    }

    /// Whether it expires within `margin` of `now`.
    fn expires_within(&self, margin: Duration, now: u64) -> bool {
        self.expires_at
            .is_some_and(|at| at <= now.saturating_add(margin.as_secs()))
    }
}

/// Where the servers' tokens live under GLIDER_HOME.
pub fn token_dir(home: &Path) -> PathBuf {
    home.join("mcp-auth")
}

/// The token file of server `name`.
pub fn token_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json"))
}

/// Read a token file; `None` when there is none.
pub fn load(path: &Path) -> Result<Option<StoredToken>, AuthError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| AuthError::Failed(format!("{} is not a token file: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(AuthError::Failed(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

/// Write a token file: its directory 0700, the file 0600, atomically.
pub fn save(path: &Path, token: &StoredToken) -> Result<(), AuthError> {
    let failed =
        |e: std::io::Error| AuthError::Failed(format!("cannot write {}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        glider_sys::fileacl::private_dir(dir).map_err(failed)?;
    }
    let bytes = serde_json::to_vec_pretty(token)
        .map_err(|e| AuthError::Failed(format!("cannot encode the token: {e}")))?;
    glider_sys::atomicfile::write(path, &bytes, glider_sys::fileacl::PRIVATE_FILE).map_err(failed)
}

/// One server's bearer, for its connection.
pub struct TokenSource {
    server: String,
    server_url: String,
    path: PathBuf,
    refresh_before: Duration,
    http: reqwest::Client,
    current: tokio::sync::Mutex<Option<StoredToken>>,
}

impl TokenSource {
    /// The token of server `server` (at `server_url`) kept in `dir`.
    pub fn new(
        server: &str,
        server_url: &str,
        dir: &Path,
        refresh_before: Duration,
        http: reqwest::Client,
    ) -> TokenSource {
        TokenSource {
            server: server.to_owned(),
            server_url: server_url.to_owned(),
            path: token_path(dir, server),
            refresh_before,
            http,
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// The access token to send now, refreshed first when it expires within
    /// `refresh_before`.
    pub async fn bearer(&self) -> Result<String, AuthError> {
        let mut current = self.current.lock().await;
        let token = match current.take() {
            Some(token) => token,
            None => self.load()?,
        };
        let token = if token.expires_within(self.refresh_before, unix_now()) {
            self.refresh(token).await?
        } else {
            token
        };
        let bearer = token.access_token.clone();
        *current = Some(token);
        Ok(bearer)
    }

    /// The server rejected `sent`: a token a login wrote meanwhile, or a refreshed one.
    pub async fn rejected(&self, sent: &str) -> Result<String, AuthError> {
        let mut current = self.current.lock().await;
        let on_disk = self.load()?;
        if on_disk.access_token != sent {
            let bearer = on_disk.access_token.clone();
            *current = Some(on_disk);
            return Ok(bearer);
        }
        if on_disk.refresh_token.is_none() {
            return Err(AuthError::needs_login(
                &self.server,
                "rejected its token and there is no refresh token",
            ));
        }
        tracing::info!(server = %self.server, "the MCP server rejected its OAuth token; refreshing it");
        let token = self.refresh(on_disk).await?;
        let bearer = token.access_token.clone();
        *current = Some(token);
        Ok(bearer)
    }

    fn load(&self) -> Result<StoredToken, AuthError> {
        let token = load(&self.path)?
            .ok_or_else(|| AuthError::needs_login(&self.server, "has no OAuth token yet"))?;
        if token.server_url != self.server_url {
            return Err(AuthError::needs_login(
                &self.server,
                format!(
                    "has a token for {}, not for its url {}",
                    token.server_url, self.server_url
                ),
            ));
        }
        Ok(token)
    }

    /// Trade the refresh token for a new access token and store it.
    async fn refresh(&self, token: StoredToken) -> Result<StoredToken, AuthError> {
        let Some(refresh_token) = token.refresh_token.clone() else {
            if token.expires_within(Duration::ZERO, unix_now()) {
                return Err(AuthError::needs_login(
                    &self.server,
                    "has an expired token and no refresh token",
                ));
            }
            return Ok(token);
        };
        let mut form = vec![
            ("grant_type", "refresh_token"),
            ("refresh_token", refresh_token.as_str()),
            ("client_id", token.client_id.as_str()),
        ];
        if let Some(resource) = &token.resource {
            form.push(("resource", resource));
        }
        let reply: TokenReply = post_form(&self.http, &token.token_endpoint, &form)
            .await
            .map_err(|e| {
                AuthError::needs_login(&self.server, format!("could not refresh its token ({e})"))
            })?;
        let fresh = StoredToken::granted(reply, token).map_err(|e| {
            AuthError::needs_login(&self.server, format!("could not refresh its token ({e})"))
        })?;
        save(&self.path, &fresh)?;
        tracing::info!(server = %self.server, "refreshed the MCP server's OAuth token");
        Ok(fresh)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> StoredToken {
        StoredToken {
            access_token: "secret-access".into(),
            refresh_token: Some("secret-refresh".into()),
            expires_at: Some(1_000),
            token_endpoint: "http://127.0.0.1:1/token".into(),
            client_id: "glider".into(),
            resource: None,
            server_url: "http://127.0.0.1:1/mcp".into(),
        }
    }

    #[test]
    fn debug_redacts_both_tokens() {
        let shown = format!("{:?}", token());
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("client_id: \"glider\""), "{shown}");
    }

    #[test]
    fn expiry_margin() {
        let token = token();
        assert!(token.expires_within(Duration::from_secs(60), 950));
        assert!(!token.expires_within(Duration::from_secs(60), 900));
        let lasting = StoredToken {
            expires_at: None,
            ..token
        };
        assert!(!lasting.expires_within(Duration::from_secs(60), u64::MAX));
    }

    #[test]
    fn saved_private_and_read_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = token_path(&token_dir(dir.path()), "remote");
        assert_eq!(load(&path), Ok(None));
        save(&path, &token()).expect("saved");
        assert_eq!(load(&path), Ok(Some(token())));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("file").permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
