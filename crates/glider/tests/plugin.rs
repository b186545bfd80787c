//! Plugins end to end: real plugin processes (examples/plugins/*.py and a misbehaving
//! fixture) behind the in-process gateway, with mock backends on loopback. Each
//! capability does what docs/plugins.md says; a plugin that hangs, crashes, floods its
//! output or goes outside its manifest never fails a request (counted, not timed); a
//! hot reload under load fails none.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::{Gateway, gateway, mock_and_config, post_json};
use glider_config::Config;
use serde_json::{Value, json};

fn script(relative: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(relative)
        .display()
        .to_string()
}

fn example(name: &str) -> String {
    script(&format!("../../examples/plugins/{name}"))
}

/// One `plugins:` entry running `python3 args...`, with `extra` YAML keys.
fn entry(name: &str, args: &[String], extra: &str) -> String {
    let command: Vec<String> = std::iter::once("python3".to_owned())
        .chain(args.iter().cloned())
        .map(|a| format!("'{a}'"))
        .collect();
    format!(
        "  - {{name: {name}, command: [{}]{}{extra}}}\n",
        command.join(", "),
        if extra.is_empty() { "" } else { ", " }
    )
}

/// The gateway with `plugins` attached, once every plugin has given its manifest.
async fn with_plugins(plugins: &str) -> (glider_test_support::MockVendor, Gateway) {
    with_plugins_and("", plugins).await
}

/// [`with_plugins`] with `extra` config YAML besides the plugins.
async fn with_plugins_and(
    extra: &str,
    plugins: &str,
) -> (glider_test_support::MockVendor, Gateway) {
    let (mock, yaml) = mock_and_config(&format!("{extra}plugins:\n{plugins}")).await;
    let gw = gateway(&yaml).await;
    gw.engine.attach_plugins(None);
    assert!(
        common::procs::until(|| {
            let plugins = gw.engine.plugins();
            plugins
                .hosts()
                .iter()
                .all(|h| h.manifest().is_some() && h.pgid().is_some())
        })
        .await,
        "every plugin initialised"
    );
    (mock, gw)
}

fn chat(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

async fn ask(gw: &Gateway, model: &str, text: &str) -> common::Reply {
    post_json(&gw.base, "/v1/chat/completions", &chat(model, text)).await
}

fn counts(gw: &Gateway, what: fn(&glider_plugin::host::Counts) -> u64) -> u64 {
    gw.engine
        .plugins()
        .hosts()
        .iter()
        .map(|h| what(&h.counts))
        .sum()
}

#[tokio::test]
async fn a_route_plugin_sends_a_small_request_local_between_the_classifier_and_starlark() {
    let (mock, gw) = with_plugins(&entry("small", &[example("route_small_local.py")], "")).await;
    let reply = ask(&gw, "m-openai", "hello").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let route = reply.header("x-glider-route").to_owned();
    assert!(route.starts_with("rule=plugin; backend=ollama"), "{route}");
    assert!(route.contains("plugin small: "), "{route}");
    assert_eq!(mock.requests().pop().expect("forwarded").path, "/api/chat");
    // An explicit choice outranks the plugin, which is then not asked at all.
    let calls = counts(&gw, |c| c.calls.load(Ordering::Relaxed));
    let explicit = post_json(
        &gw.base,
        "/v1/chat/completions",
        &chat("openai/m-openai", "hello"),
    )
    .await;
    assert_eq!(explicit.status, 200, "{}", explicit.text());
    assert!(
        explicit
            .header("x-glider-route")
            .starts_with("rule=explicit")
    );
    assert_eq!(counts(&gw, |c| c.calls.load(Ordering::Relaxed)), calls);
}

#[tokio::test]
async fn rewrite_plugins_add_a_note_on_their_scope_and_redact_with_the_grant() {
    let note = entry(
        "note",
        &[example("rewrite_system_note.py")],
        "env: {GLIDER_NOTE: 'tabs, not spaces'}",
    );
    let redact = entry(
        "redact",
        &[example("rewrite_redact.py")],
        "allow_prompt_text: true",
    );
    let (mock, gw) = with_plugins(&format!("{note}{redact}")).await;
    let secret = "sk-abcdefghijklmnopqrstuvwxyz0123";

    let local = ask(&gw, "m-ollama", &format!("my key is {secret}")).await;
    assert_eq!(local.status, 200, "{}", local.text());
    let seen = mock.requests().pop().expect("forwarded").body;
    assert_eq!(seen["messages"][0]["role"], "system", "{seen}");
    assert_eq!(seen["messages"][0]["content"], "tabs, not spaces");
    assert!(!seen.to_string().contains(secret), "{seen}");
    assert!(seen.to_string().contains("my key is [redacted]"), "{seen}");

    // The note's scope is local: a cloud request gets only the redaction.
    let cloud = ask(&gw, "m-openai", &format!("again {secret}")).await;
    assert_eq!(cloud.status, 200, "{}", cloud.text());
    let seen = mock.requests().pop().expect("forwarded").body;
    assert!(!seen.to_string().contains("tabs, not spaces"), "{seen}");
    assert!(!seen.to_string().contains(secret), "{seen}");
}

#[tokio::test]
async fn an_observer_gets_route_and_finish_events_without_prompt_text() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("observed.jsonl");
    let (_mock, gw) = with_plugins(&entry(
        "log",
        &[example("observe_log.py")],
        &format!("env: {{GLIDER_PLUGIN_LOG: '{}'}}", log.display()),
    ))
    .await;
    let mut request = chat("m-ollama", "the password is hunter2");
    request["messages"] = json!([
        {"role": "user", "content": "the password is hunter2"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "read_file", "arguments": "{\"path\": \"secret.txt\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "file text"}
    ]);
    let reply = post_json(&gw.base, "/v1/chat/completions", &request).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let events = || -> Vec<Value> {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    assert!(
        common::procs::until(|| {
            let names: Vec<String> = events().iter().map(|e| e["event"].to_string()).collect();
            ["\"route_decided\"", "\"tool_call\"", "\"request_finished\""]
                .iter()
                .all(|n| names.iter().any(|e| e == n))
        })
        .await,
        "events: {:?}",
        events()
    );
    let all = serde_json::to_string(&events()).expect("json");
    assert!(
        !all.contains("hunter2") && !all.contains("secret.txt"),
        "{all}"
    );
    let tool = events()
        .into_iter()
        .find(|e| e["event"] == "tool_call")
        .expect("tool call");
    assert_eq!(tool["data"]["name"], "read_file");
    assert_eq!(
        counts(&gw, |c| c.observe_dropped.load(Ordering::Relaxed)),
        0
    );
}

#[tokio::test]
async fn a_local_model_calls_a_plugin_declared_tool_in_the_tool_loop() {
    // The loop's reduced set names only the plugin's tool (the internal ones are left out).
    let workspace = tempfile::tempdir().expect("workspace");
    let (mock, gw) = with_plugins_and(
        &format!(
            "tools: {{workspace: '{}', loop: {{enabled: true, max_turns: 4, tools: [word_count]}}}}\n",
            workspace.path().display()
        ),
        &entry("tools", &[example("tools_declare.py")], ""),
    )
    .await;
    let plugins = gw.engine.plugins();
    assert!(!plugins.routes() && !plugins.rewrites(true) && !plugins.rewrites(false));
    let mut events = gw.engine.bus().subscribe();
    let reply = ask(
        &gw,
        "m-ollama",
        r#"count these [[call:word_count {"text":"one two three four"}]]"#,
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answer = reply.json();
    let text = answer["choices"][0]["message"]["content"].to_string();
    assert!(text.contains("tool result: 4 words"), "{answer}");
    let sent = mock.requests();
    assert_eq!(sent.len(), 2, "two model turns");
    let offered = sent[0].body.to_string();
    assert!(
        offered.contains("\"word_count\"") && !offered.contains("\"grep\""),
        "the plugin's tool is offered, alone: {offered}"
    );
    let record = common::next_finished(&mut events).await;
    let call = &record.tool_calls[0];
    assert_eq!((call.tool.as_str(), call.ok), ("word_count", true));
    // The tool's own error (`isError`) goes back to the model as the call's result.
    let reply = ask(&gw, "m-ollama", r#"count [[call:word_count {"text":5}]]"#).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let text = reply.json()["choices"][0]["message"]["content"].to_string();
    assert!(
        text.contains("tool result: error: `text` must be a string"),
        "{text}"
    );
    let record = common::next_finished(&mut events).await;
    assert_eq!(
        (record.tool_calls[0].tool.as_str(), record.tool_calls[0].ok),
        ("word_count", false)
    );
    // Both calls reached the plugin; an answered error is not a failed call.
    let tool = &plugins.hosts()[0].counts.tool;
    assert_eq!(tool.calls.load(Ordering::Relaxed), 2);
    assert_eq!(tool.failures.load(Ordering::Relaxed), 0);
}

fn misbehave(fault: &str, starts: &std::path::Path, extra: &str) -> String {
    entry(
        fault,
        &[
            script("tests/fixtures/plugins/misbehave.py"),
            fault.to_owned(),
            starts.display().to_string(),
        ],
        extra,
    )
}

#[tokio::test]
async fn a_hanging_plugin_times_out_until_its_breaker_opens_and_requests_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let starts = dir.path().join("starts");
    let (_mock, gw) = with_plugins(&misbehave(
        "hang",
        &starts,
        "deadline_ms: 100, breaker_failures: 3, breaker_open_secs: 600",
    ))
    .await;
    let mut events = gw.engine.bus().subscribe();
    for _ in 0..6 {
        let reply = ask(&gw, "m-openai", "hello").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(reply.header("x-glider-route").starts_with("rule=model"));
    }
    assert_eq!(counts(&gw, |c| c.timeouts.load(Ordering::Relaxed)), 3);
    assert_eq!(counts(&gw, |c| c.breaker_opened.load(Ordering::Relaxed)), 1);
    assert_eq!(counts(&gw, |c| c.skipped.load(Ordering::Relaxed)), 3);
    let mut notes = Vec::new();
    for _ in 0..6 {
        notes.extend(common::next_finished(&mut events).await.plugins);
    }
    assert!(
        notes
            .iter()
            .any(|n| n.contains("route failed (no reply within the deadline)")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("skipped, its breaker is open")),
        "{notes:?}"
    );
}

#[tokio::test]
async fn a_crashing_plugin_is_restarted_and_requests_go_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let starts = dir.path().join("starts");
    let (_mock, gw) = with_plugins(&misbehave("crash", &starts, "breaker_failures: 1000")).await;
    let started = || {
        std::fs::read_to_string(&starts)
            .unwrap_or_default()
            .lines()
            .count()
    };
    let mut sent = 0;
    while started() < 3 && sent < 2000 {
        let reply = ask(&gw, "m-openai", "hello").await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        sent += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        started() >= 3,
        "restarted: {} starts after {sent} requests",
        started()
    );
    assert!(counts(&gw, |c| c.failures.load(Ordering::Relaxed)) >= 2);
}

#[tokio::test]
async fn a_flooding_plugin_is_capped_and_ended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let starts = dir.path().join("starts");
    let (_mock, gw) = with_plugins(&misbehave(
        "flood",
        &starts,
        "max_line_bytes: 65536, deadline_ms: 5000",
    ))
    .await;
    let pgid = gw.engine.plugins().hosts()[0].pgid().expect("running");
    let reply = ask(&gw, "m-openai", "hello").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(reply.header("x-glider-route").starts_with("rule=model"));
    assert_eq!(counts(&gw, |c| c.failures.load(Ordering::Relaxed)), 1);
    assert_eq!(counts(&gw, |c| c.timeouts.load(Ordering::Relaxed)), 0);
    // The next call finds the child dead, drops it (its group is killed) and restarts.
    let _ = ask(&gw, "m-openai", "hello").await;
    assert!(common::procs::group_gone(pgid).await.is_empty());
}

#[tokio::test]
async fn a_result_outside_the_manifest_grants_is_refused_and_the_request_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let starts = dir.path().join("starts");
    let (mock, gw) = with_plugins(&misbehave("violate", &starts, "")).await;
    let mut events = gw.engine.bus().subscribe();
    let reply = ask(&gw, "m-ollama", "hello there").await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let seen = mock.requests().pop().expect("forwarded").body;
    assert_eq!(
        seen["messages"][0]["content"], "hello there",
        "not the hidden view"
    );
    assert_eq!(counts(&gw, |c| c.refused.load(Ordering::Relaxed)), 1);
    let record = common::next_finished(&mut events).await;
    assert!(
        record
            .plugins
            .iter()
            .any(|n| n.contains("refused, a whole request from a plugin not granted prompt text")),
        "{:?}",
        record.plugins
    );
}

#[tokio::test]
async fn plugins_added_changed_and_removed_by_reload_under_load_fail_no_request() {
    let (_mock, yaml) = mock_and_config("").await;
    let gw = gateway(&yaml).await;
    gw.engine.attach_plugins(None);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (base, stop) = (gw.base.clone(), stop.clone());
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0u32, 0u32);
                while !stop.load(Ordering::Relaxed) {
                    let reply =
                        post_json(&base, "/v1/chat/completions", &chat("m-ollama", "hi")).await;
                    if reply.status == 200 {
                        ok += 1
                    } else {
                        failed += 1
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    let note = |text: &str| {
        entry(
            "note",
            &[example("rewrite_system_note.py")],
            &format!("env: {{GLIDER_NOTE: '{text}'}}"),
        )
    };
    let mut pgids = Vec::new();
    for plugins in [note("first"), note("second"), String::new(), note("third")] {
        let section = if plugins.is_empty() {
            "plugins: []\n".to_owned()
        } else {
            format!("plugins:\n{plugins}")
        };
        let next = Config::parse(&format!("{yaml}{section}"), "test").expect("valid");
        let _ = gw.config.apply(next);
        let expected = usize::from(!plugins.is_empty());
        assert!(
            common::procs::until(|| {
                let p = gw.engine.plugins();
                p.hosts().len() == expected && p.hosts().iter().all(|h| h.pgid().is_some())
            })
            .await,
            "{plugins}: {} hosts, pgids {:?}, refused {:?}",
            gw.engine.plugins().hosts().len(),
            gw.engine
                .plugins()
                .hosts()
                .iter()
                .map(|h| h.pgid())
                .collect::<Vec<_>>(),
            gw.engine
                .plugins()
                .hosts()
                .iter()
                .map(|h| h.refused())
                .collect::<Vec<_>>()
        );
        pgids.extend(gw.engine.plugins().hosts().iter().filter_map(|h| h.pgid()));
    }
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut failed) = (0, 0);
    for worker in workers {
        let (o, f) = worker.await.expect("worker");
        ok += o;
        failed += f;
    }
    assert!(ok > 0);
    assert_eq!(failed, 0, "{failed} of {} requests failed", ok + failed);
    // Each replaced plugin was stopped: only the last one's group is left.
    let last = pgids.pop().expect("the last plugin runs");
    for pgid in pgids {
        assert!(
            common::procs::group_gone(pgid).await.is_empty(),
            "group {pgid} left"
        );
    }
    gw.engine.stop_plugins().await;
    assert!(common::procs::group_gone(last).await.is_empty());
}

/// The process group the run state in `home` records for plugin `name`.
fn recorded_group(home: &std::path::Path, name: &str) -> Option<u32> {
    let text = std::fs::read_to_string(home.join("runstate.json")).ok()?;
    let state: Value = serde_json::from_str(&text).ok()?;
    state["delegates"]
        .as_array()?
        .iter()
        .find(|d| d["cli"] == format!("plugin:{name}"))?["pgid"]
        .as_u64()
        .and_then(|pgid| u32::try_from(pgid).ok())
}

#[tokio::test]
async fn a_plugin_left_running_by_a_sigkilled_glider_is_ended_at_the_next_start() {
    use common::procs::{group_members, until};
    let home = tempfile::tempdir().expect("home");
    let dir = tempfile::tempdir().expect("lab");
    // A plugin whose helper ignores the end of Glider's pipes: only a group kill ends it.
    let wrapper = dir.path().join("leaky.sh");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nsleep 1000 >/dev/null 2>&1 &\nexec python3 '{}'\n",
            example("observe_log.py")
        ),
    )
    .expect("wrapper");
    let log = dir.path().join("observed.jsonl");
    let yaml = format!(
        "plugins:\n  - {{name: leaky, command: [sh, '{}'], env: {{GLIDER_PLUGIN_LOG: '{}'}}}}\n",
        wrapper.display(),
        log.display()
    );
    let mut served = common::serve::serve_yaml(home.path(), &yaml);
    let mut pgid = None;
    assert!(
        until(|| {
            pgid = recorded_group(home.path(), "leaky");
            pgid.is_some_and(|g| group_members(g).len() >= 2)
        })
        .await,
        "the plugin's group (plugin and helper) was never recorded"
    );
    let pgid = pgid.expect("recorded");
    served.child.kill().expect("SIGKILL glider");
    served.child.wait().expect("reaped");
    drop(served);
    assert!(
        !group_members(pgid).is_empty(),
        "the helper outlives a SIGKILLed Glider"
    );

    let served = common::serve::serve_yaml(home.path(), &yaml);
    assert!(
        until(|| group_members(pgid).is_empty()).await,
        "the old plugin's group is still there: {:?}",
        group_members(pgid)
    );
    served.stop();
}

#[tokio::test]
async fn the_dashboard_counts_each_plugins_calls_per_hook_on_rest_and_metrics() {
    let home = tempfile::tempdir().expect("home");
    let starts = home.path().join("starts");
    let (_mock, yaml) = mock_and_config("").await;
    // In config order: `hang` times out until its breaker opens, `crash` exits on each
    // call (restarted), `small` answers every route call.
    let plugins = [
        misbehave(
            "hang",
            &starts,
            "deadline_ms: 100, breaker_failures: 2, breaker_open_secs: 600",
        ),
        misbehave("crash", &starts, "breaker_failures: 1000"),
        entry("small", &[example("route_small_local.py")], ""),
    ]
    .concat();
    let served = common::serve::serve_yaml(home.path(), &format!("{yaml}plugins:\n{plugins}"));
    let started = |body: &Value| {
        body["plugins"]
            .as_array()
            .is_some_and(|p| p.len() == 3 && p.iter().all(|p| p["manifest"].is_object()))
    };
    served.poll_json("/api/plugins", started).await;
    let client = reqwest::Client::new();
    let mut sent: u64 = 0;
    let body = loop {
        let reply = client
            .post(format!("{}/v1/chat/completions", served.gateway))
            .json(&chat("m-openai", "hello"))
            .send()
            .await
            .expect("the gateway answered");
        assert_eq!(reply.status(), 200);
        sent += 1;
        let body = served.poll_json("/api/plugins", |_| true).await;
        if body["plugins"][1]["restarts"].as_u64() >= Some(1) || sent >= 2000 {
            break body;
        }
    };
    let (hang, crash, small) = (
        &body["plugins"][0],
        &body["plugins"][1],
        &body["plugins"][2],
    );
    assert!(crash["restarts"].as_u64() >= Some(1), "{crash}");
    assert!(
        crash["counts"]["route"]["failures"].as_u64() >= Some(1),
        "{crash}"
    );
    assert_eq!(hang["breaker_open"], true, "{hang}");
    assert_eq!(hang["counts"]["route"]["calls"], 2, "{hang}");
    assert_eq!(hang["counts"]["route"]["timeouts"], 2, "{hang}");
    assert_eq!(hang["counts"]["skipped"], sent - 2, "{hang}");
    assert_eq!(hang["restarts"], 0, "{hang}");
    assert_eq!(small["counts"]["route"]["calls"], sent, "{small}");
    assert_eq!(small["counts"]["route"]["failures"], 0, "{small}");
    assert_eq!(small["counts"]["rewrite"]["calls"], 0, "{small}");

    let metrics = served.metrics().await;
    let sample = |name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no sample {name} in:\n{metrics}"))
    };
    assert_eq!(
        sample(r#"glider_plugin_calls_total{plugin="hang",hook="route"}"#),
        2
    );
    assert_eq!(
        sample(r#"glider_plugin_timeouts_total{plugin="hang",hook="route"}"#),
        2
    );
    assert_eq!(
        sample(r#"glider_plugin_failures_total{plugin="hang",hook="route"}"#),
        2
    );
    assert_eq!(sample(r#"glider_plugin_breaker_open{plugin="hang"}"#), 1);
    assert_eq!(sample(r#"glider_plugin_breaker_open{plugin="small"}"#), 0);
    assert_eq!(
        sample(r#"glider_plugin_skipped_total{plugin="hang"}"#),
        sent - 2
    );
    assert_eq!(
        sample(r#"glider_plugin_calls_total{plugin="small",hook="route"}"#),
        sent
    );
    assert_eq!(
        sample(r#"glider_plugin_calls_total{plugin="small",hook="tool"}"#),
        0
    );
    assert!(sample(r#"glider_plugin_restarts_total{plugin="crash"}"#) >= 1);
    assert!(
        metrics.contains("# TYPE glider_plugin_calls counter"),
        "{metrics}"
    );
    served.stop();
}
