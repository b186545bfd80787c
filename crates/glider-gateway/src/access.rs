//! Who may use the gateway. A web page the user opens must not be able to spend the
//! configured cloud keys or start a delegate CLI: a request that carries a browser
//! `Origin` other than the gateway's own is refused, and unless the gateway has a token
//! it answers only requests addressed to a loopback host name (DNS rebinding). Clients
//! that send no `Origin` — SDKs, CLIs, curl — are what the gateway is for.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::Response;
use glider_ngl::{ApiError, ErrorKind};
use glider_sys::webguard;

use crate::{error_response, front_for_path};

/// The header that carries `server.gateway_token`.
pub const TOKEN_HEADER: &str = "x-glider-token";

/// What the gateway checks on every request, fixed when its routes are built
/// (`server.*` needs a restart).
#[derive(Clone, Debug, Default)]
pub struct Access {
    /// `server.gateway_token`, resolved. With it every request must present it, and the
    /// `Host` may be any name; without it the `Host` must be a loopback name.
    pub token: Option<String>,
}

/// Refuses what fails the rules in the caller's own dialect, before anything else runs
/// (no pipeline, no delegation).
pub async fn guard(State(access): State<Access>, request: Request, next: Next) -> Response {
    match refusal(&access, &request) {
        Some(error) => error_response(front_for_path(request.uri().path()), &error),
        None => next.run(request).await,
    }
}

fn refusal(access: &Access, request: &Request) -> Option<ApiError> {
    let headers = request.headers();
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    // 1. A token, when configured, is required of everyone.
    if let Some(expected) = &access.token {
        let given = headers.get(TOKEN_HEADER).and_then(|v| v.to_str().ok());
        if !given.is_some_and(|given| webguard::tokens_equal(given, expected)) {
            return Some(ApiError::new(
                ErrorKind::Authentication,
                format!(
                    "this gateway needs its token: send {TOKEN_HEADER}: <server.gateway_token>"
                ),
            ));
        }
    // 2. Without one, only this machine's own names are answered.
    } else if host.is_some_and(|host| !webguard::is_loopback_host(host)) {
        return Some(ApiError::new(
            ErrorKind::Permission,
            "this gateway answers only to a loopback host name (127.0.0.1, localhost, [::1]); set server.gateway_token to reach it by another name",
        ));
    }
    // 3. A browser's request must come from the gateway's own origin.
    if let Some(origin) = headers.get(header::ORIGIN)
        && !origin
            .to_str()
            .is_ok_and(|origin| webguard::same_origin(origin, host))
    {
        return Some(ApiError::new(
            ErrorKind::Permission,
            "cross-origin request refused: a web page may not use this gateway (its Origin is not the gateway's own)",
        ));
    }
    None
}
