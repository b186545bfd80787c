//! The one seam between the proxy's mechanics (CONNECT, TLS, tunnelling, forwarding in
//! [`crate::proxy`]) and what Glider does with a decrypted request: a handler, in the
//! manner of hudsucker's `HttpHandler`. The mechanics pick the handler for a request
//! (the Cursor Agent RPC plane, or the API path for a model request), call
//! [`HttpHandler::handle_request`], forward what it hands back to the origin, and pass
//! the origin's reply through [`HttpHandler::handle_response`]. Every other request on
//! a decrypted host goes to the origin untouched, without a handler.

use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use glider_engine::Tracker;
use http::{Request, Response};
use hyper::body::Incoming;

use crate::Mitm;
use crate::proxy::Target;

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
    Request(Box<ToOrigin>),
    /// Glider's answer: the mechanics write it to the client and the origin never
    /// sees the request.
    Response(Response<Body>),
}

/// A request on its way to the origin.
pub struct ToOrigin {
    /// Bytes and credentials as the handler left them.
    pub request: Request<Body>,
    /// When set, records the origin's leg of a model request: its status, usage read
    /// from the reply, its end, or the 502 when the origin cannot be reached.
    pub tracker: Option<Tracker>,
}

impl RequestOrResponse {
    /// Send `request` on to the origin, recorded by `tracker` when there is one.
    pub fn to_origin(request: Request<Body>, tracker: Option<Tracker>) -> Self {
        RequestOrResponse::Request(Box::new(ToOrigin { request, tracker }))
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

impl Mitm {
    /// Run `handler` for `request`: the mechanics' side of the [`HttpHandler`] contract.
    pub(crate) async fn handle<H: HttpHandler>(
        self: &Arc<Self>,
        target: &Target,
        mut handler: H,
        request: Request<Incoming>,
    ) -> Response<Body> {
        let ctx = HandlerCtx { mitm: self, target };
        match handler.handle_request(&ctx, request).await {
            RequestOrResponse::Response(response) => response,
            RequestOrResponse::Request(to_origin) => {
                let ToOrigin { request, tracker } = *to_origin;
                let response = self.forward(request, target, tracker).await;
                handler.handle_response(&ctx, response)
            }
        }
    }
}
