//! Who may use the dashboard. Bound to loopback, it answers only requests addressed to a
//! loopback host name (so a DNS-rebinding page cannot reach it); with a token (required
//! off loopback) every request must carry it. State-changing requests and `/ws` must
//! come from the dashboard's own origin, or from a client that sends no `Origin`; so must
//! the reads that cost work (paging the history files), so another page cannot make the
//! dashboard do it.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use glider_sys::webguard;

use crate::Shared;

/// GET routes that read from disk per call: guarded like the state-changing requests.
const COSTLY_READS: &[&str] = &["/api/requests"];

/// The context log's routes read its database per call.
const CONTEXT_READS: &str = "/api/context/";

/// The cookie `?token=` sets, so the page's assets, API calls and socket carry it.
pub const COOKIE: &str = "glider_dashboard_token";

pub async fn guard(State(shared): State<Arc<Shared>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let token = shared.options.token.as_deref();

    // 1. Without a token the dashboard trusts this machine only: the Host must name it.
    if token.is_none()
        && let Some(host) = &host
        && !webguard::is_loopback_host(host)
    {
        return refuse(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this dashboard answers only to a loopback host name (127.0.0.1, localhost, [::1]); set server.dashboard_token to reach it by another name",
        );
    }

    // 2. With a token, the request must carry it.
    let mut set_cookie = None;
    if let Some(expected) = token {
        match presented_token(&request) {
            Some((given, via_query)) if webguard::tokens_equal(&given, expected) => {
                if via_query {
                    set_cookie = cookie_header(expected);
                }
            }
            Some(_) => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "wrong dashboard token",
                );
            }
            None => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "unauthorized",
                    "this dashboard needs its token: open it as /?token=TOKEN, or send Authorization: Bearer TOKEN",
                );
            }
        }
    }

    // 3. Only the dashboard's own pages may change state, open the live socket or make
    // it read the history.
    let changes_state = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    let path = request.uri().path();
    let is_socket = path == "/ws";
    let costs_work = COSTLY_READS.contains(&path) || path.starts_with(CONTEXT_READS);
    if (changes_state || is_socket || costs_work)
        && !origin_allowed(request.headers(), host.as_deref())
    {
        return refuse(
            StatusCode::FORBIDDEN,
            "forbidden",
            "cross-origin request refused: Origin must be this dashboard's own",
        );
    }

    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    if let Some(cookie) = set_cookie {
        headers.append(header::SET_COOKIE, cookie);
    }
    // No framing (its buttons act), no MIME guessing, no token leaking via Referer, and
    // nothing loaded from anywhere but here.
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    response
}

/// An absent `Origin` (curl, scripts) is fine; a browser's must be `http(s)://<Host>`.
fn origin_allowed(headers: &HeaderMap, host: Option<&str>) -> bool {
    match headers.get(header::ORIGIN) {
        None => true,
        Some(origin) => origin
            .to_str()
            .is_ok_and(|origin| webguard::same_origin(origin, host)),
    }
}

/// The token from `Authorization: Bearer`, the cookie, or `?token=` (then `true`).
fn presented_token(request: &Request) -> Option<(String, bool)> {
    let headers = request.headers();
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some((bearer.trim().to_owned(), false));
    }
    if let Ok(query) =
        axum::extract::Query::<std::collections::HashMap<String, String>>::try_from_uri(
            request.uri(),
        )
        && let Some(token) = query.0.get("token")
    {
        return Some((token.clone(), true));
    }
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| (value.to_owned(), false))
}

fn cookie_header(token: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(&format!(
        "{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict"
    ))
    .ok()?;
    value.set_sensitive(true);
    Some(value)
}

fn refuse(status: StatusCode, kind: &str, message: &str) -> Response {
    let mut response = crate::rest::error(status, kind, message);
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins() {
        let mut headers = HeaderMap::new();
        assert!(origin_allowed(&headers, Some("127.0.0.1:8081")));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8081"),
        );
        assert!(origin_allowed(&headers, Some("127.0.0.1:8081")));
        assert!(!origin_allowed(&headers, Some("localhost:8081")));
        headers.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(!origin_allowed(&headers, Some("127.0.0.1:8081")));
    }
}
