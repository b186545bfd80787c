//! [`AuthorizedClient`]: rmcp's reqwest Streamable HTTP client with the server's OAuth
//! bearer put on every request (the token is asked of the [`TokenSource`] each time, so
//! a refresh before expiry reaches the next request), and one retry with a refreshed
//! token when the server answers `401` to the one sent.

use std::collections::HashMap;
use std::sync::Arc;

use http::{HeaderName, HeaderValue};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::common::client_side_sse::BoxedSseResponse;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};

use super::{AuthError, TokenSource};

type HttpError = StreamableHttpError<reqwest::Error>;

/// A Streamable HTTP client that authorizes with a server's stored OAuth token.
#[derive(Clone)]
pub struct AuthorizedClient {
    http: reqwest::Client,
    tokens: Arc<TokenSource>,
}

impl AuthorizedClient {
    pub fn new(http: reqwest::Client, tokens: Arc<TokenSource>) -> AuthorizedClient {
        AuthorizedClient { http, tokens }
    }

    /// Run `call` with the current bearer; after a 401, once more with a fresh one.
    async fn authorized<T, F, Fut>(&self, call: F) -> Result<T, HttpError>
    where
        F: Fn(Option<String>) -> Fut,
        Fut: Future<Output = Result<T, HttpError>>,
    {
        let sent = self.tokens.bearer().await.map_err(unauthorized)?;
        match call(Some(sent.clone())).await {
            Err(StreamableHttpError::AuthRequired(_)) => {
                let fresh = self.tokens.rejected(&sent).await.map_err(unauthorized)?;
                call(Some(fresh)).await
            }
            other => other,
        }
    }
}

/// A token that cannot be had ends the request with the error that says what to do.
fn unauthorized(error: AuthError) -> HttpError {
    StreamableHttpError::Io(std::io::Error::other(error.to_string()))
}

impl StreamableHttpClient for AuthorizedClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(|token| {
            self.http.post_message(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, HttpError> {
        self.authorized(|token| {
            self.http.post_message_with_response_limits(
                uri.clone(),
                message.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
                limits,
            )
        })
        .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), HttpError> {
        self.authorized(|token| {
            self.http.delete_session(
                uri.clone(),
                session_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxedSseResponse, HttpError> {
        self.authorized(|token| {
            self.http.get_stream(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
            )
        })
        .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxedSseResponse, HttpError> {
        self.authorized(|token| {
            self.http.get_stream_with_max_sse_event_size(
                uri.clone(),
                session_id.clone(),
                last_event_id.clone(),
                token,
                custom_headers.clone(),
                max_sse_event_size,
            )
        })
        .await
    }
}
