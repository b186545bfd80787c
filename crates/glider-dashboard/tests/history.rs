//! The request history: one JSON line per finished request under GLIDER_HOME/history,
//! rotated by size (and day), read back by a new dashboard after a restart.

mod common;

use common::{Setup, history_files, start_with};
use glider_test_support::{MockConfig, MockVendor};

#[tokio::test]
async fn history_survives_a_restart_and_rotates_by_size() {
    let home = tempfile::tempdir().expect("tempdir");
    let first = start_with(
        MockVendor::start(MockConfig::default()).await,
        Setup {
            home: Some(home.path().to_path_buf()),
            customize: Box::new(|o| o.history.max_file_bytes = 2000),
            ..Setup::default()
        },
    )
    .await;
    for _ in 0..12 {
        assert_eq!(first.ask("m-local", false).await.status, 200);
    }
    first.wait_written(12).await;
    first.dashboard.close().await;
    drop(first);

    let files = history_files(home.path());
    assert!(files.len() > 1, "rotated by size: {files:?}");
    assert!(
        files
            .iter()
            .all(|f| f.starts_with("requests-") && f.ends_with(".jsonl")),
        "{files:?}"
    );
    let mut lines = 0;
    for file in &files {
        let path = home.path().join("history").join(file);
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.len() <= 2000 + 1000, "{file} is {} bytes", text.len());
        for line in text.lines() {
            let entry: serde_json::Value =
                serde_json::from_str(line).expect("one JSON object per line");
            assert!(entry["seq"].is_u64() && entry["backend"] == "local");
            // What the client said is never kept.
            assert!(!line.contains("say something short"), "{line}");
            lines += 1;
        }
    }
    assert_eq!(lines, 12);

    // A new process over the same GLIDER_HOME.
    let second = start_with(
        MockVendor::start(MockConfig::default()).await,
        Setup {
            home: Some(home.path().to_path_buf()),
            customize: Box::new(|o| o.recent = 5),
            ..Setup::default()
        },
    )
    .await;
    let page = second.get_json("/api/requests?limit=100").await;
    let seqs: Vec<u64> = page["requests"]
        .as_array()
        .expect("requests")
        .iter()
        .filter_map(|r| r["seq"].as_u64())
        .collect();
    assert_eq!(
        seqs,
        (1..=12).rev().collect::<Vec<_>>(),
        "memory (5) then files (7)"
    );
    // Pages walk from memory into the files without gaps or repeats.
    let mut walked = Vec::new();
    let mut before: Option<u64> = None;
    loop {
        let query = match before {
            Some(b) => format!("/api/requests?limit=4&before={b}"),
            None => "/api/requests?limit=4".to_owned(),
        };
        let page = second.get_json(&query).await;
        walked.extend(
            page["requests"]
                .as_array()
                .expect("requests")
                .iter()
                .filter_map(|r| r["seq"].as_u64()),
        );
        match page["next_before"].as_u64() {
            Some(b) => before = Some(b),
            None => break,
        }
    }
    assert_eq!(walked, seqs);
    // Numbering continues.
    assert_eq!(second.ask("m-local", false).await.status, 200);
    second.wait_written(1).await;
    let newest = second.get_json("/api/requests?limit=1").await;
    assert_eq!(newest["requests"][0]["seq"], 13);
}
