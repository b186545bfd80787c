//! The one seam between the proxy's mechanics (CONNECT, TLS, tunnelling, forwarding in
//! [`crate::proxy`]) and what Glider does with a decrypted request: a handler, in the
//! manner of hudsucker's `HttpHandler`. The mechanics pick the handler for a request
//! (the Cursor Agent RPC plane, or the API path for a model request), call
//! [`HttpHandler::handle_request`], forward what it hands back to the origin, and pass
//! the origin's reply through [`HttpHandler::handle_response`]. Every other request on
//! a decrypted host goes to the origin untouched, without a handler. A handler sees
//! where the request goes ([`Target`]) and the proxy, never the mechanics themselves.

use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use glider_engine::Tracker;
use http::{Request, Response};
use hyper::body::Incoming;

use crate::Mitm;

/// What one decrypted request is about: the proxy it came through and its origin.
pub struct HandlerCtx<'a> {
    pub mitm: &'a Arc<Mitm>,
    pub target: &'a Target,
}

/// A handler's verdict on a request.
pub enum RequestOrResponse {
    /// Glider does not answer it: the mechanics send it to the origin and hand the
    /// origin's reply to [`HttpHandler::handle_response`]. Boxed: a request head and a
    /// tracker are far larger than a response.
    Request(Box<OriginBound>),
    /// Glider's answer: the mechanics write it to the client and the origin never
    /// sees the request.
    Response(Response<Body>),
}

/// A request on its way to the origin.
pub struct OriginBound {
    /// Bytes and credentials as the handler left them.
    pub request: Request<Body>,
    /// When set, records the origin's leg of a model request: its status, usage read
    /// from the reply, its end, or the 502 when the origin cannot be reached.
    pub tracker: Option<Tracker>,
}

impl RequestOrResponse {
    /// Send `request` on to the origin, recorded by `tracker` when there is one.
    pub fn to_origin(request: Request<Body>, tracker: Option<Tracker>) -> Self {
        RequestOrResponse::Request(Box::new(OriginBound { request, tracker }))
    }
}

/// Glider's part of one decrypted request. A handler is made per request, so it may
/// keep what `handle_request` learnt for `handle_response`.
pub trait HttpHandler: Send {
    /// Decide what becomes of `request`: answer it, or let it go to the origin.
    fn handle_request(
        &mut self,
        ctx: &HandlerCtx<'_>,
        request: Request<Incoming>,
    ) -> impl Future<Output = RequestOrResponse> + Send;

    /// The origin's reply to a request this handler let through, on its way to the
    /// client (also a 502 the mechanics made when the origin could not be reached).
    /// The default passes it on unchanged.
    fn handle_response(
        &mut self,
        _ctx: &HandlerCtx<'_>,
        response: Response<Body>,
    ) -> Response<Body> {
        response
    }
}

/// Where a proxied connection or request goes.
#[derive(Debug, Clone)]
pub struct Target {
    /// Host name or IP (no brackets), as the client named it.
    pub host: String,
    pub port: u16,
    /// `https` inside a CONNECT tunnel, `http` for a plain proxy request.
    pub scheme: &'static str,
}

impl Target {
    /// `host[:port]` as it goes in a URI (default port left out, IPv6 bracketed).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.scheme == "https" { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authority_leaves_out_the_default_port() {
        let t = |host: &str, port, scheme| Target {
            host: host.into(),
            port,
            scheme,
        };
        assert_eq!(t("a.com", 443, "https").authority(), "a.com");
        assert_eq!(t("a.com", 8443, "https").authority(), "a.com:8443");
        assert_eq!(t("a.com", 80, "http").authority(), "a.com");
        assert_eq!(t("::1", 443, "https").authority(), "[::1]");
    }
}
