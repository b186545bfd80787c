//! `glider mcp login NAME` and `glider mcp logout NAME`: obtain (or remove) the OAuth
//! token of a Streamable HTTP server configured with `oauth:` (docs/tools.md,
//! "Authorization"). The token goes to GLIDER_HOME/mcp-auth/NAME.json, 0600; a running
//! `glider serve` picks it up at its next connect.

use crate::out::outln;
use std::io::Write;
use std::path::Path;

use anyhow::Context;
use clap::Subcommand;

use crate::{glider_home, load_config};

#[derive(Subcommand)]
pub enum McpAction {
    /// Log in to server NAME (its `oauth:`): prints the URL to open, or the device
    /// code to enter, then waits for the authorization and stores the token.
    Login { name: String },
    /// Delete the stored token of server NAME.
    Logout { name: String },
}

pub fn run(action: McpAction, config: Option<&Path>) -> anyhow::Result<String> {
    let config = load_config(config)?;
    let dir = glider_mcp::auth::token_dir(&glider_home());
    match action {
        McpAction::Login { name } => {
            let server = config
                .mcp
                .servers
                .get(&name)
                .with_context(|| format!("no MCP server named {name:?} in mcp.servers"))?;
            if server.oauth.is_none() {
                anyhow::bail!(
                    "mcp.servers.{name} has no oauth: section; add `oauth: {{provider: github, client_id: …}}` or `oauth: {{}}` for a server that advertises its authorization server"
                );
            }
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let mut say = |line: &str| {
                outln!("{line}");
                let _ = std::io::stdout().flush();
            };
            let path = runtime.block_on(glider_mcp::auth::login(&name, server, &dir, &mut say))?;
            Ok(format!(
                "logged in to {name}; the token is stored in {}",
                path.display()
            ))
        }
        McpAction::Logout { name } => {
            if !glider_config::mcp::valid_server_name(&name) {
                anyhow::bail!("{name:?} is not an MCP server name");
            }
            let path = glider_mcp::auth::token_path(&dir, &name);
            match std::fs::remove_file(&path) {
                Ok(()) => Ok(format!("removed {}", path.display())),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    Ok(format!("{name} had no stored token"))
                }
                Err(e) => Err(e).with_context(|| format!("cannot remove {}", path.display())),
            }
        }
    }
}
