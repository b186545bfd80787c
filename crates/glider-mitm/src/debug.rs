//! Debug dumps (`mitm.debug_agent_rpc`, or `GLIDER_MITM_DEBUG_RPC`): the full body of
//! every decrypted API request and Cursor Agent RPC, plus decoded Agent RPC frames, one
//! file each under `GLIDER_HOME/mitm/debug/` (0700 directory, 0600 files). Header
//! credentials are redacted; bodies are not, so a dump holds source code and prompts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use glider_sys::{atomicfile, fileacl};
use http::HeaderMap;

/// The environment variable that turns dumps on regardless of the config.
pub const ENV: &str = "GLIDER_MITM_DEBUG_RPC";

/// Headers whose values never reach a dump.
const SECRET_HEADERS: [&str; 5] = [
    "authorization",
    "x-api-key",
    "cookie",
    "proxy-authorization",
    "openai-organization",
];

/// Where dumps go, and whether the warning was given.
pub struct DebugDumps {
    dir: PathBuf,
    warned: AtomicBool,
    next: AtomicU64,
}

/// Whether the environment asks for dumps (set, and not `0`/`false`/empty).
pub fn env_enabled() -> bool {
    std::env::var(ENV).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "no" | "off"))
}

impl DebugDumps {
    /// Dumps under `dir` (created 0700 on the first dump).
    pub fn new(dir: PathBuf) -> DebugDumps {
        DebugDumps {
            dir,
            warned: AtomicBool::new(false),
            next: AtomicU64::new(1),
        }
    }

    /// The dump directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Say once, loudly, that dumps are on and what they contain.
    pub fn warn_once(&self) {
        if !self.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                dir = %self.dir.display(),
                "MITM debug dumps are ON (mitm.debug_agent_rpc or {ENV}): every decrypted API request body is written to disk. Dumps contain your source code and prompts; turn this off when done and delete the directory"
            );
        }
    }

    /// Write one request. Errors are logged, never fatal to the request.
    pub fn dump(&self, host: &str, method: &str, path: &str, headers: &HeaderMap, body: &[u8]) {
        self.warn_once();
        if let Err(e) = self.write(host, method, path, headers, body) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "debug dump failed");
        }
    }

    fn write(
        &self,
        host: &str,
        method: &str,
        path: &str,
        headers: &HeaderMap,
        body: &[u8],
    ) -> std::io::Result<()> {
        let headers: serde_json::Map<String, serde_json::Value> = headers
            .iter()
            .map(|(name, value)| {
                let shown = if SECRET_HEADERS.contains(&name.as_str()) {
                    "[redacted]".to_owned()
                } else {
                    String::from_utf8_lossy(value.as_bytes()).into_owned()
                };
                (name.as_str().to_owned(), shown.into())
            })
            .collect();
        // JSON as JSON, text as text, anything else (protobuf) as hex: the whole body.
        let body = serde_json::from_slice::<serde_json::Value>(body).unwrap_or_else(|_| {
            match std::str::from_utf8(body) {
                Ok(text) => text.into(),
                Err(_) => serde_json::json!({"hex": glider_cursorrpc::messages::hex_encode(body)}),
            }
        });
        let record = serde_json::json!({
            "host": host,
            "method": method,
            "path": path,
            "headers": headers,
            "body": body,
        });
        self.write_record(&format!("{host}{path}"), &record)
    }

    /// Write one JSON record (a decoded Agent RPC message or a stream's frames), named
    /// after `label`. Errors are logged, never fatal to the request.
    pub fn dump_record(&self, label: &str, record: &serde_json::Value) {
        self.warn_once();
        if let Err(e) = self.write_record(label, record) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "debug dump failed");
        }
    }

    fn write_record(&self, label: &str, record: &serde_json::Value) -> std::io::Result<()> {
        fileacl::private_dir(&self.dir)?;
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        let seq = self.next.fetch_add(1, Ordering::Relaxed);
        let slug: String = label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .take(80)
            .collect();
        let file = self.dir.join(format!("{millis}-{seq:04}-{slug}.json"));
        let text = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
        atomicfile::write(&file, &text, fileacl::PRIVATE_FILE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn dumps_are_private_and_redact_credentials() {
        let home = tempfile::tempdir().expect("tempdir");
        let dumps = DebugDumps::new(home.path().join("debug"));
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", http::HeaderValue::from_static("sk-secret"));
        headers.insert(
            "anthropic-version",
            http::HeaderValue::from_static("2023-06-01"),
        );
        dumps.dump(
            "api.anthropic.com",
            "POST",
            "/v1/messages",
            &headers,
            br#"{"model":"m"}"#,
        );
        let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(dumps.dir()), 0o700);
        let files: Vec<_> = std::fs::read_dir(dumps.dir())
            .expect("list")
            .map(|e| e.expect("entry").path())
            .collect();
        assert_eq!(files.len(), 1);
        assert_eq!(mode(&files[0]), 0o600);
        let text = std::fs::read_to_string(&files[0]).expect("read");
        assert!(!text.contains("sk-secret"), "{text}");
        assert!(
            text.contains("[redacted]") && text.contains("2023-06-01"),
            "{text}"
        );
        assert!(text.contains("\"model\": \"m\""), "{text}");
    }

    #[test]
    fn binary_bodies_are_kept_whole_as_hex() {
        let home = tempfile::tempdir().expect("tempdir");
        let dumps = DebugDumps::new(home.path().join("debug"));
        dumps.dump(
            "api2.cursor.sh",
            "POST",
            "/agent.v1.AgentService/RunSSE",
            &HeaderMap::new(),
            &[0x00, 0xff, 0x10],
        );
        let file = std::fs::read_dir(dumps.dir())
            .expect("list")
            .next()
            .expect("one dump")
            .expect("entry")
            .path();
        let text = std::fs::read_to_string(file).expect("read");
        assert!(text.contains("\"hex\": \"00ff10\""), "{text}");
    }
}
