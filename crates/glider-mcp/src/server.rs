//! The gateway's `/mcp`: a Streamable HTTP MCP server (rmcp's, mounted in axum) that
//! offers the union of the hub's tools, forwarding each call to its server, and of
//! Glider's own tools (the internal ones over `tools.workspace`, run sandboxed exactly
//! as the tool loop runs them). Every connected client is sent
//! `notifications/tools/list_changed` when the offered tools change. Who may reach it (Host, Origin, `server.gateway_token`) is the gateway's own
//! guard, which sits in front of this router, so rmcp's Host check is off here.

use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{NotificationContext, Peer, RequestContext};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use tokio_util::sync::CancellationToken;

use glider_tools::{MCP_PROVIDER, ToolProvider, ToolSet, ToolSpec};

use crate::{McpHub, ToolError, lock};

/// Glider's current tool set (the engine runtime's, reloaded with the config); `/mcp`
/// serves its providers other than the hub next to the hub's own tools.
pub type LocalTools = Arc<dyn Fn() -> ToolSet + Send + Sync>;

/// The path the gateway serves MCP on.
pub const PATH: &str = "/mcp";

/// An axum router serving `/mcp` over `hub` and `local`, until `stop` resolves (which
/// also ends its open sessions and the task that tells clients about tool changes).
/// Needs a Tokio runtime.
pub fn router(
    hub: McpHub,
    local: LocalTools,
    stop: impl Future<Output = ()> + Send + 'static,
) -> axum::Router {
    let stop = {
        let token = CancellationToken::new();
        let cancel = token.clone();
        tokio::spawn(async move {
            stop.await;
            cancel.cancel();
        });
        token
    };
    let clients: Arc<Mutex<Vec<Peer<RoleServer>>>> = Arc::default();
    let endpoint = Endpoint {
        hub,
        local,
        clients,
    };
    tokio::spawn(tell_tool_changes(endpoint.clone(), stop.clone()));
    let service: StreamableHttpService<Endpoint, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(endpoint.clone()),
        Default::default(),
        StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .with_cancellation_token(stop),
    );
    axum::Router::new().nest_service(PATH, service)
}

/// One MCP session's handler (each session gets a clone).
#[derive(Clone)]
struct Endpoint {
    hub: McpHub,
    local: LocalTools,
    /// Every session that finished `initialize`, to be told about tool changes.
    clients: Arc<Mutex<Vec<Peer<RoleServer>>>>,
}

impl Endpoint {
    /// Glider's own providers (not the hub, whose tools are served from it directly).
    fn local(&self) -> ToolSet {
        (self.local)().without(MCP_PROVIDER)
    }

    /// Every tool served: the hub's, then Glider's own, each name once.
    fn served(&self) -> Vec<ToolSpec> {
        let mut specs = ToolProvider::specs(&self.hub);
        for spec in self.local().specs(&[]) {
            if !specs.iter().any(|served| served.name == spec.name) {
                specs.push(spec);
            }
        }
        specs
    }

    /// Run one of Glider's own tools; a refusal or failure is a tool error the model
    /// can read, as in the tool loop.
    async fn call_local(&self, local: ToolSet, request: CallToolRequestParams) -> CallToolResult {
        let arguments = request
            .arguments
            .map_or(serde_json::json!({}), serde_json::Value::Object);
        match local.call(&request.name, arguments).await {
            Ok(output) => CallToolResult::success(vec![ContentBlock::text(output.into_text())]),
            Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]),
        }
    }
}

impl ServerHandler for Endpoint {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("glider", env!("CARGO_PKG_VERSION")))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        lock(&self.clients).push(context.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = self
            .served()
            .into_iter()
            .map(|spec| {
                let schema = match spec.input_schema {
                    serde_json::Value::Object(schema) => schema,
                    _ => serde_json::Map::new(),
                };
                Tool::new(spec.name, spec.description, Arc::new(schema))
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let local = self.local();
        let hub_offers = self.hub.tools().iter().any(|t| t.name == request.name);
        if !hub_offers && local.specs(&[]).iter().any(|t| t.name == request.name) {
            return Ok(CallToolResponse::Complete(
                self.call_local(local, request).await,
            ));
        }
        let arguments = request
            .arguments
            .map_or(serde_json::Value::Null, serde_json::Value::Object);
        match self.hub.call(&request.name, arguments).await {
            Ok(output) => Ok(CallToolResponse::Complete(output.result)),
            // A name nobody offers is a protocol error; anything that went wrong on the
            // way to a real tool is a tool error the model can read.
            Err(error @ (ToolError::UnknownTool(_) | ToolError::NotOffered { .. })) => {
                Err(ErrorData::invalid_params(error.to_string(), None))
            }
            Err(error) => Ok(CallToolResponse::Complete(CallToolResult::error(vec![
                ContentBlock::text(error.to_string()),
            ]))),
        }
    }
}

/// Send `notifications/tools/list_changed` to every session whenever the served tools
/// change (a wake-up that leaves the list as it was sends nothing); a session the
/// notification cannot reach any more is forgotten.
async fn tell_tool_changes(endpoint: Endpoint, stop: CancellationToken) {
    let mut changes = endpoint.hub.subscribe();
    let mut told = endpoint.served();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        let now = endpoint.served();
        if now == told {
            continue;
        }
        told = now;
        let clients = &endpoint.clients;
        let peers: Vec<Peer<RoleServer>> = lock(clients).clone();
        let mut gone = Vec::new();
        for (index, peer) in peers.iter().enumerate() {
            if peer.notify_tool_list_changed().await.is_err() {
                gone.push(index);
            }
        }
        if !gone.is_empty() {
            let mut clients = lock(clients);
            let mut index = 0;
            // Drop exactly the peers that failed; sessions added meanwhile stay.
            clients.retain(|_| {
                let keep = !gone.contains(&index);
                index += 1;
                keep
            });
        }
    }
}
