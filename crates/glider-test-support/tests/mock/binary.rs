//! The `glider-mock` binary: prints its address, serves, exits on SIGTERM.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::common::client;

#[tokio::test]
async fn binary_serves_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_glider-mock"))
        .args([
            "--port",
            "0",
            "--deltas",
            "3",
            "--reply-text",
            "benchmark reply",
            "--model",
            "bench",
        ])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn glider-mock");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("ready line in time")
        .expect("read stdout")
        .expect("a line");
    let addr = line
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected line: {line}"));
    assert!(addr.starts_with("127.0.0.1:"));

    let out: serde_json::Value = client()
        .post(format!("http://{addr}/api/chat"))
        .json(&serde_json::json!({"model": "bench", "stream": false,
            "messages": [{"role": "user", "content": "x"}]}))
        .send()
        .await
        .expect("sent")
        .json()
        .await
        .expect("json");
    assert_eq!(out["message"]["content"], "benchmark reply");

    #[cfg(unix)]
    {
        let pid = child.id().expect("pid").to_string();
        let status = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .await
            .expect("kill");
        assert!(status.success());
        let exit = tokio::time::timeout(Duration::from_secs(10), child.wait())
            .await
            .expect("exits after SIGTERM")
            .expect("wait");
        assert!(exit.success(), "{exit:?}");
        assert_eq!(
            lines.next_line().await.expect("read"),
            None,
            "one line only"
        );
    }
}
