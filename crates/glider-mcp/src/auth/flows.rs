//! The logins of `glider mcp login NAME`: the device flow (RFC 8628; GitHub's endpoints
//! are the `github` preset) and the authorization code with PKCE S256 (RFC 7636) and the
//! `resource` parameter (RFC 8707) over a loopback redirect. Endpoints come from the
//! config, then the preset, then discovery; a client without a `client_id` registers
//! itself (RFC 7591) where the authorization server offers it. The token is stored, and
//! what the user must do is handed to `say` (never a token).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine;
use glider_config::McpServerConfig;
use glider_config::mcp::McpOAuthConfig;
use serde::Deserialize;
use sha2::Digest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::discovery::{self, Discovered};
use super::store::{self, StoredToken, token_path};
use super::{AuthError, TokenReply, post_form};

/// How long the code flow waits for the browser's redirect.
const REDIRECT_WAIT: Duration = Duration::from_secs(600);
const DEVICE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";

/// GitHub's OAuth endpoints (the `github` preset).
const GITHUB_DEVICE: &str = "https://github.com/login/device/code";
const GITHUB_TOKEN: &str = "https://github.com/login/oauth/access_token";
const GITHUB_AUTHORIZE: &str = "https://github.com/login/oauth/authorize";

/// What one login uses, once the config, the preset and discovery are merged.
struct Plan {
    server: String,
    server_url: String,
    client_id: Option<String>,
    scopes: Vec<String>,
    authorization_endpoint: Option<String>,
    token_endpoint: String,
    device_endpoint: Option<String>,
    registration_endpoint: Option<String>,
    resource: Option<String>,
}

/// Log in to server `name` and store its token in `dir`; returns the file written.
pub async fn login(
    name: &str,
    server: &McpServerConfig,
    dir: &Path,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<PathBuf, AuthError> {
    let (Some(url), Some(oauth)) = (&server.url, &server.oauth) else {
        return Err(AuthError::Failed(format!(
            "mcp.servers.{name} has no url and oauth: it takes no OAuth login"
        )));
    };
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| AuthError::Failed(format!("cannot build the HTTP client: {e}")))?;
    let plan = plan(&http, name, url, oauth).await?;
    let (reply, client_id) = match oauth.flow() {
        "device" => device_flow(&http, &plan, say).await?,
        _ => code_flow(&http, &plan, oauth.redirect_port, say).await?,
    };
    let base = StoredToken {
        access_token: String::new(),
        refresh_token: None,
        expires_at: None,
        token_endpoint: plan.token_endpoint.clone(),
        client_id,
        resource: plan.resource.clone(),
        server_url: plan.server_url.clone(),
    };
    let token = StoredToken::granted(reply, base)?;
    let path = token_path(dir, name);
    store::save(&path, &token)?;
    Ok(path)
}

/// Endpoints from the config, else the preset, else discovery (only when one is missing).
async fn plan(
    http: &reqwest::Client,
    name: &str,
    url: &str,
    oauth: &McpOAuthConfig,
) -> Result<Plan, AuthError> {
    let github = oauth.provider.as_deref() == Some("github");
    let preset = |endpoint: &str| github.then(|| endpoint.to_owned());
    let mut authorization_endpoint = oauth
        .authorization_endpoint
        .clone()
        .or_else(|| preset(GITHUB_AUTHORIZE));
    let mut token_endpoint = oauth
        .token_endpoint
        .clone()
        .or_else(|| preset(GITHUB_TOKEN));
    let mut device_endpoint = oauth
        .device_authorization_endpoint
        .clone()
        .or_else(|| preset(GITHUB_DEVICE));
    let mut scopes = oauth.scopes.clone();
    let mut registration_endpoint = None;
    // GitHub's OAuth apps know no RFC 8707 resource; a spec server's token is bound to it.
    let mut resource = (!github).then(|| url.to_owned());
    let complete = token_endpoint.is_some()
        && match oauth.flow() {
            "device" => device_endpoint.is_some(),
            _ => authorization_endpoint.is_some(),
        };
    if !complete {
        let Discovered {
            resource: found_resource,
            scopes: found_scopes,
            server,
        } = discovery::discover(http, url).await?;
        if !server.code_challenge_methods_supported.is_empty()
            && !server
                .code_challenge_methods_supported
                .iter()
                .any(|m| m == "S256")
            && oauth.flow() == "code"
        {
            return Err(AuthError::Failed(format!(
                "the authorization server of {url} does not support PKCE S256"
            )));
        }
        authorization_endpoint = authorization_endpoint.or(server.authorization_endpoint);
        token_endpoint = token_endpoint.or(server.token_endpoint);
        device_endpoint = device_endpoint.or(server.device_authorization_endpoint);
        registration_endpoint = server.registration_endpoint;
        if scopes.is_empty() {
            scopes = found_scopes;
        }
        if found_resource.is_some() {
            resource = found_resource;
        }
    }
    let Some(token_endpoint) = token_endpoint else {
        return Err(AuthError::Failed(format!(
            "no token endpoint for {name}: set mcp.servers.{name}.oauth.token_endpoint"
        )));
    };
    Ok(Plan {
        server: name.to_owned(),
        server_url: url.to_owned(),
        client_id: oauth.client_id.clone(),
        scopes,
        authorization_endpoint,
        token_endpoint,
        device_endpoint,
        registration_endpoint,
        resource,
    })
}

/// The configured client id, or one registered now (RFC 7591, a public client).
async fn client_id(
    http: &reqwest::Client,
    plan: &Plan,
    grant_types: &[&str],
    redirect_uri: Option<&str>,
) -> Result<String, AuthError> {
    if let Some(id) = &plan.client_id {
        return Ok(id.clone());
    }
    let Some(endpoint) = &plan.registration_endpoint else {
        return Err(AuthError::Failed(format!(
            "set mcp.servers.{}.oauth.client_id: the authorization server offers no client registration",
            plan.server
        )));
    };
    #[derive(Deserialize)]
    struct Registered {
        client_id: String,
    }
    let registration = serde_json::json!({
        "client_name": "Glider",
        "redirect_uris": redirect_uri.map(|u| vec![u]).unwrap_or_default(),
        "grant_types": grant_types,
        "response_types": if redirect_uri.is_some() { vec!["code"] } else { vec![] },
        "token_endpoint_auth_method": "none",
    });
    let reply = http
        .post(endpoint)
        .json(&registration)
        .send()
        .await
        .map_err(|e| AuthError::Failed(format!("cannot reach {endpoint}: {e}")))?;
    if !reply.status().is_success() {
        return Err(AuthError::Failed(format!(
            "client registration at {endpoint} answered {}",
            reply.status()
        )));
    }
    let registered: Registered = reply
        .json()
        .await
        .map_err(|e| AuthError::Failed(format!("client registration at {endpoint}: {e}")))?;
    Ok(registered.client_id)
}

#[derive(Deserialize)]
struct DeviceCode {
    device_code: String,
    user_code: String,
    #[serde(alias = "verification_url")]
    verification_uri: String,
    verification_uri_complete: Option<String>,
    expires_in: u64,
    interval: Option<u64>,
}

/// RFC 8628: show the code, poll at the interval, slow down when told.
async fn device_flow(
    http: &reqwest::Client,
    plan: &Plan,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<(TokenReply, String), AuthError> {
    let Some(endpoint) = &plan.device_endpoint else {
        return Err(AuthError::Failed(format!(
            "no device authorization endpoint for {0}: set mcp.servers.{0}.oauth.device_authorization_endpoint, or flow: code",
            plan.server
        )));
    };
    let client_id = client_id(http, plan, &[DEVICE_GRANT, "refresh_token"], None).await?;
    let scope = plan.scopes.join(" ");
    let mut form = vec![("client_id", client_id.as_str())];
    if !scope.is_empty() {
        form.push(("scope", &scope));
    }
    if let Some(resource) = &plan.resource {
        form.push(("resource", resource));
    }
    // An endpoint that refuses (GitHub: `device_flow_disabled`) says why in `error`.
    let reply: serde_json::Value = post_form(http, endpoint, &form).await?;
    if let Ok(refused) = TokenReply::deserialize(&reply)
        && refused.error.is_some()
    {
        return Err(AuthError::Failed(format!(
            "{endpoint} refused the device authorization: {}",
            refused.why()
        )));
    }
    let code: DeviceCode = serde_json::from_value(reply)
        .map_err(|e| AuthError::Failed(format!("{endpoint} sent no device code: {e}")))?;
    say(&format!(
        "open {} and enter the code {}",
        code.verification_uri, code.user_code
    ));
    if let Some(complete) = &code.verification_uri_complete {
        say(&format!("(or open {complete})"));
    }
    let deadline = Instant::now() + Duration::from_secs(code.expires_in);
    let mut interval = Duration::from_secs(code.interval.unwrap_or(5));
    let poll = [
        ("grant_type", DEVICE_GRANT),
        ("device_code", code.device_code.as_str()),
        ("client_id", client_id.as_str()),
    ];
    loop {
        tokio::time::sleep(interval).await;
        if Instant::now() >= deadline {
            return Err(AuthError::Failed(
                "the device code expired before it was entered; log in again".into(),
            ));
        }
        let reply: TokenReply = post_form(http, &plan.token_endpoint, &poll).await?;
        if reply.access_token.is_some() {
            return Ok((reply, client_id));
        }
        match reply.error.as_deref() {
            Some("authorization_pending") => {}
            Some("slow_down") => {
                interval = reply
                    .interval
                    .map(Duration::from_secs)
                    .unwrap_or(interval + Duration::from_secs(5));
            }
            Some("expired_token") => {
                return Err(AuthError::Failed(
                    "the device code expired before it was entered; log in again".into(),
                ));
            }
            Some("access_denied") => {
                return Err(AuthError::Failed("the authorization was denied".into()));
            }
            _ => {
                return Err(AuthError::Failed(format!(
                    "the device flow failed: {}",
                    reply.why()
                )));
            }
        }
    }
}

/// Authorization code with PKCE: print the URL, take the redirect on loopback, trade
/// the code (with the verifier and the resource) for the token.
async fn code_flow(
    http: &reqwest::Client,
    plan: &Plan,
    redirect_port: u16,
    say: &mut (dyn FnMut(&str) + Send),
) -> Result<(TokenReply, String), AuthError> {
    let Some(authorize) = &plan.authorization_endpoint else {
        return Err(AuthError::Failed(format!(
            "no authorization endpoint for {0}: set mcp.servers.{0}.oauth.authorization_endpoint, or flow: device",
            plan.server
        )));
    };
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", redirect_port))
        .await
        .map_err(|e| {
            AuthError::Failed(format!(
                "cannot listen for the redirect on 127.0.0.1:{redirect_port}: {e}"
            ))
        })?;
    let port = listener
        .local_addr()
        .map_err(|e| AuthError::Failed(e.to_string()))?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let client_id = client_id(
        http,
        plan,
        &["authorization_code", "refresh_token"],
        Some(&redirect_uri),
    )
    .await?;
    let verifier = random_urlsafe(32);
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()));
    let state = random_urlsafe(16);
    let mut url = reqwest::Url::parse(authorize)
        .map_err(|e| AuthError::Failed(format!("authorization endpoint {authorize:?}: {e}")))?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", &client_id)
            .append_pair("redirect_uri", &redirect_uri)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state);
        if !plan.scopes.is_empty() {
            query.append_pair("scope", &plan.scopes.join(" "));
        }
        if let Some(resource) = &plan.resource {
            query.append_pair("resource", resource);
        }
    }
    say(&format!(
        "open this URL in a browser to authorize Glider: {url}"
    ));
    let code = tokio::time::timeout(REDIRECT_WAIT, redirected_code(&listener, &state))
        .await
        .map_err(|_| {
            AuthError::Failed(format!(
                "no redirect came back within {} s",
                REDIRECT_WAIT.as_secs()
            ))
        })??;
    let mut form = vec![
        ("grant_type", "authorization_code"),
        ("code", code.as_str()),
        ("redirect_uri", redirect_uri.as_str()),
        ("client_id", client_id.as_str()),
        ("code_verifier", verifier.as_str()),
    ];
    if let Some(resource) = &plan.resource {
        form.push(("resource", resource));
    }
    let reply: TokenReply = post_form(http, &plan.token_endpoint, &form).await?;
    Ok((reply, client_id))
}

/// Accept redirects until one carries our `state`; answer the browser, return its code.
async fn redirected_code(
    listener: &tokio::net::TcpListener,
    state: &str,
) -> Result<String, AuthError> {
    loop {
        let (mut stream, _) = listener
            .accept()
            .await
            .map_err(|e| AuthError::Failed(format!("the redirect listener failed: {e}")))?;
        let mut head = Vec::new();
        let mut buf = [0u8; 2048];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        let line = String::from_utf8_lossy(&head);
        let target = line
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or_default()
            .to_owned();
        let query = reqwest::Url::parse(&format!("http://127.0.0.1{target}"))
            .map(|u| u.query_pairs().into_owned().collect::<Vec<_>>())
            .unwrap_or_default();
        let param = |key: &str| query.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        let outcome = if param("state").as_deref() != Some(state) {
            None
        } else if let Some(error) = param("error") {
            Some(Err(AuthError::Failed(format!(
                "the authorization server refused: {error}"
            ))))
        } else {
            param("code").map(Ok)
        };
        let text = match &outcome {
            Some(Ok(_)) => "Glider is authorized. You can close this tab.",
            Some(Err(_)) => "Glider was not authorized. You can close this tab.",
            None => "Not the redirect Glider waits for.",
        };
        let reply = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
            text.len()
        );
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
        if let Some(outcome) = outcome {
            return outcome;
        }
    }
}

/// `bytes` random bytes, base64url without padding (a PKCE verifier is 43 of these
/// characters for 32 bytes, inside RFC 7636's 43..128).
fn random_urlsafe(bytes: usize) -> String {
    let random: Vec<u8> = (0..bytes).map(|_| rand::random::<u8>()).collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pkce_verifier_shape() {
        let verifier = random_urlsafe(32);
        assert_eq!(verifier.len(), 43);
        assert!(
            verifier
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_ne!(verifier, random_urlsafe(32));
    }

    #[test]
    fn s256_matches_rfc_7636_appendix_b() {
        let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(
            sha2::Sha256::digest(b"dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"),
        );
        assert_eq!(challenge, "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM");
    }
}
