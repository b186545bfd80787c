//! Finding a server's authorization server (MCP authorization): an unauthenticated
//! `initialize` POST whose `401` names the protected-resource metadata in
//! `WWW-Authenticate: Bearer resource_metadata="…"` (else the RFC 9728 well-known URL
//! beside the server), that metadata's first authorization server, and its RFC 8414
//! metadata (`/.well-known/oauth-authorization-server`, falling back to
//! `/.well-known/openid-configuration`).

use serde::Deserialize;

use super::AuthError;

/// What discovery found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Discovered {
    /// The protected resource's identifier (sent as RFC 8707 `resource`).
    pub resource: Option<String>,
    pub scopes: Vec<String>,
    pub server: ServerMetadata,
}

/// An authorization server's metadata (the fields Glider uses).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default)]
pub struct ServerMetadata {
    pub issuer: Option<String>,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub device_authorization_endpoint: Option<String>,
    pub registration_endpoint: Option<String>,
    pub code_challenge_methods_supported: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ResourceMetadata {
    resource: Option<String>,
    authorization_servers: Vec<String>,
    scopes_supported: Vec<String>,
}

/// Discover the authorization server of the MCP server at `server_url`.
pub async fn discover(http: &reqwest::Client, server_url: &str) -> Result<Discovered, AuthError> {
    let url = reqwest::Url::parse(server_url)
        .map_err(|e| AuthError::Failed(format!("{server_url} is not a URL: {e}")))?;
    let challenge = probe(http, server_url).await?;
    let candidates = match challenge.as_deref().and_then(resource_metadata_param) {
        Some(named) => vec![named],
        None => well_known(&url, "oauth-protected-resource"),
    };
    let resource: ResourceMetadata = first_json(http, &candidates).await.map_err(|why| {
        AuthError::Failed(format!(
            "{server_url} has no OAuth protected-resource metadata ({why})"
        ))
    })?;
    let Some(issuer) = resource.authorization_servers.first() else {
        return Err(AuthError::Failed(format!(
            "{server_url}'s protected-resource metadata names no authorization server"
        )));
    };
    let issuer_url = reqwest::Url::parse(issuer)
        .map_err(|e| AuthError::Failed(format!("authorization server {issuer:?}: {e}")))?;
    let mut candidates = well_known(&issuer_url, "oauth-authorization-server");
    candidates.extend(well_known(&issuer_url, "openid-configuration"));
    candidates.push(format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    ));
    candidates.dedup();
    let server: ServerMetadata = first_json(http, &candidates).await.map_err(|why| {
        AuthError::Failed(format!(
            "authorization server {issuer} has no metadata ({why})"
        ))
    })?;
    Ok(Discovered {
        resource: resource.resource,
        scopes: resource.scopes_supported,
        server,
    })
}

/// POST an `initialize` without credentials; the `WWW-Authenticate` of a 401, if any.
async fn probe(http: &reqwest::Client, server_url: &str) -> Result<Option<String>, AuthError> {
    let initialize = serde_json::json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "glider", "version": env!("CARGO_PKG_VERSION")}}
    });
    let reply = http
        .post(server_url)
        .header(http::header::ACCEPT, "application/json, text/event-stream")
        .json(&initialize)
        .send()
        .await
        .map_err(|e| AuthError::Failed(format!("cannot reach {server_url}: {e}")))?;
    if reply.status() != http::StatusCode::UNAUTHORIZED {
        return Ok(None);
    }
    Ok(reply
        .headers()
        .get(http::header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned))
}

/// The `resource_metadata` parameter of a `Bearer` challenge (quoted or not).
pub fn resource_metadata_param(challenge: &str) -> Option<String> {
    let at = challenge.find("resource_metadata=")? + "resource_metadata=".len();
    let rest = &challenge[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split([',', ' ']).next().unwrap_or_default(),
    };
    (!value.is_empty()).then(|| value.to_owned())
}

/// RFC 8414 §3 / RFC 9728 §3: the well-known suffix goes between the origin and the
/// path (`https://h/.well-known/NAME/path`), then at the origin alone.
pub fn well_known(url: &reqwest::Url, name: &str) -> Vec<String> {
    let origin = url.origin().ascii_serialization();
    let path = url.path().trim_end_matches('/');
    let mut urls = Vec::new();
    if !path.is_empty() {
        urls.push(format!("{origin}/.well-known/{name}{path}"));
    }
    urls.push(format!("{origin}/.well-known/{name}"));
    urls
}

/// The first of `urls` that answers 200 with JSON of type `T`.
async fn first_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    urls: &[String],
) -> Result<T, String> {
    let mut tried = Vec::new();
    for url in urls {
        let outcome = match http
            .get(url)
            .header(http::header::ACCEPT, "application/json")
            .send()
            .await
        {
            Ok(reply) if reply.status().is_success() => match reply.json::<T>().await {
                Ok(found) => return Ok(found),
                Err(e) => format!("not metadata: {e}"),
            },
            Ok(reply) => reply.status().to_string(),
            Err(e) => e.to_string(),
        };
        tried.push(format!("{url}: {outcome}"));
    }
    Err(tried.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenge_parameter() {
        assert_eq!(
            resource_metadata_param(
                r#"Bearer error="invalid_token", resource_metadata="https://h/.well-known/oauth-protected-resource/mcp""#
            )
            .as_deref(),
            Some("https://h/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            resource_metadata_param("Bearer resource_metadata=https://h/m, scope=x").as_deref(),
            Some("https://h/m")
        );
        assert_eq!(resource_metadata_param("Bearer realm=\"x\""), None);
    }

    #[test]
    fn well_known_urls_insert_before_the_path() {
        let url = reqwest::Url::parse("https://h:8443/tenant/mcp/").expect("url");
        assert_eq!(
            well_known(&url, "oauth-authorization-server"),
            [
                "https://h:8443/.well-known/oauth-authorization-server/tenant/mcp",
                "https://h:8443/.well-known/oauth-authorization-server"
            ]
        );
        let root = reqwest::Url::parse("https://h").expect("url");
        assert_eq!(
            well_known(&root, "openid-configuration"),
            ["https://h/.well-known/openid-configuration"]
        );
    }
}
