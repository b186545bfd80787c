//! `glider desktop` on a real X server (Xvfb under `scripts/test`): the dashboard in a
//! WebKitGTK window, let in by the same token rule as a browser (the window opens
//! `/?token=` once; its page's socket then carries the cookie), drawn — a screenshot of
//! the real screen, kept as `target/desktop-window.png`, must hold the page, not a
//! blank window — and stopped by SIGTERM with the same drain as `glider serve`. The
//! tray's menu is clicked as a tray host clicks it, over D-Bus (`com.canonical.dbusmenu`
//! `Event`, with `gdbus`, on the session bus of `dbus-run-session`): Pause local routing
//! turns the local backends off and on again, Exit stops Glider with the drain. Only
//! with the `desktop` feature (it needs GTK and WebKitGTK).
#![cfg(feature = "desktop")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

const TOKEN: &str = "window-token-e2e";
/// Guards the polls below against a hang; never a timing assertion.
const GUARD: Duration = Duration::from_secs(90);
/// A drawn dashboard has thousands of colours (text is anti-aliased); a blank window
/// on the black root has two or three.
const DRAWN_COLOURS: u64 = 200;

/// The distinct colours of the PNG at `path` (ImageMagick's `identify`).
fn colours(path: &Path) -> u64 {
    let out = Command::new("identify")
        .args(["-format", "%k"])
        .arg(path)
        .output()
        .expect("ImageMagick's identify runs (apt-get install imagemagick; .ci/run does)");
    assert!(
        out.status.success(),
        "identify: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a colour count")
}

/// The whole X screen as a PNG at `path` (ImageMagick's `import`).
fn screenshot(path: &Path) {
    let status = Command::new("import")
        .args(["-window", "root"])
        .arg(path)
        .status()
        .expect("ImageMagick's import runs");
    assert!(status.success(), "import -window root failed");
}

/// `target/NAME`, where the other suites keep their screenshots.
fn kept(name: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .join(name)
}

async fn status(dashboard: &str) -> (u16, Value) {
    let reply = reqwest::Client::new()
        .get(format!("{dashboard}/api/status"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("the dashboard answers");
    let code = reply.status().as_u16();
    (code, reply.json().await.unwrap_or(Value::Null))
}

#[test]
fn the_blank_check_fails_on_a_blank_screen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let blank = dir.path().join("blank.png");
    let made = Command::new("convert")
        .args(["-size", "1280x860", "xc:white"])
        .arg(&blank)
        .status()
        .expect("ImageMagick's convert runs");
    assert!(made.success());
    assert!(colours(&blank) < DRAWN_COLOURS);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_in_a_real_window_under_the_token_rule() {
    assert!(
        std::env::var_os("DISPLAY").is_some(),
        "this test needs an X server: scripts/test runs it under xvfb-run"
    );
    let home = tempfile::tempdir().expect("tempdir");
    let (_mock, yaml) =
        common::mock_and_config(&format!("server: {{dashboard_token: {TOKEN}}}\n")).await;
    let config = home.path().join("glider.yaml");
    std::fs::write(&config, yaml).expect("config written");
    // Under the C locale, as a service or a bare session runs it.
    let served = common::serve::start(
        home.path(),
        &config,
        &[
            ("WEBKIT_DISABLE_COMPOSITING_MODE", "1"),
            ("LANG", "C.UTF-8"),
            ("LC_ALL", ""),
            ("LC_MESSAGES", ""),
        ],
        &["desktop"],
    );

    // The token is required: without it the dashboard refuses.
    let bare = reqwest::get(format!("{}/api/status", served.dashboard))
        .await
        .expect("the dashboard answers");
    assert_eq!(bare.status(), 401);

    // The window's page connected its live socket, which needs the token cookie that
    // only `/?token=` sets.
    let deadline = Instant::now() + GUARD;
    loop {
        let (code, body) = status(&served.dashboard).await;
        assert_eq!(code, 200, "{body}");
        if body["events"]["ws_clients"].as_u64() >= Some(1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the window's page never connected: {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // And it is drawn: the real screen, not a blank window — taken once two shots in a
    // row agree (the page has drawn what it read, not only its frame).
    let shot = kept("desktop-window.png");
    let _ = std::fs::remove_file(&shot);
    let charts = home.path().join("charts.png");
    let mut before = 0;
    loop {
        screenshot(&shot);
        let seen = colours(&shot);
        // The Activity charts' strip (the window opens at the screen's corner): axes
        // and labels once uPlot drew them, white while it did not (it failed to load
        // under the C locale until the web view was given a language).
        let cropped = Command::new("convert")
            .arg(&shot)
            .args(["-crop", "1200x150+40+250", "+repage"])
            .arg(&charts)
            .status()
            .expect("ImageMagick's convert runs");
        assert!(cropped.success());
        let drawn = colours(&charts);
        if seen >= DRAWN_COLOURS && seen == before && drawn >= 20 {
            break;
        }
        before = seen;
        assert!(
            Instant::now() < deadline,
            "the window stayed blank ({seen} colours in {}; {drawn} in its charts' strip)",
            shot.display()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    eprintln!("the window, as drawn: {}", shot.display());

    // SIGTERM: the same drain as `glider serve`, then the window goes and the process
    // ends well.
    let exit = served.stop_within(GUARD);
    assert!(exit.success(), "glider desktop exited with {exit}");
}

/// `gdbus ARGS…` on the session bus; its standard output. At most 5 s: a connection
/// that does not answer (WebKit's own, in the same process) is given up on.
fn gdbus(args: &[&str]) -> Result<String, String> {
    let out = Command::new("timeout")
        .args(["5", "gdbus"])
        .args(args)
        .output()
        .map_err(|e| format!("gdbus runs (apt-get install libglib2.0-bin): {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The bus name of process `pid` and the object path of its tray menu, once exported.
fn tray_menu(pid: u32) -> Option<(String, String)> {
    let bus = [
        "call",
        "--session",
        "--dest",
        "org.freedesktop.DBus",
        "--object-path",
        "/org/freedesktop/DBus",
        "--method",
    ];
    let names = gdbus(&[&bus[..], &["org.freedesktop.DBus.ListNames"]].concat()).ok()?;
    for name in names.split('\'').filter(|n| n.starts_with(":1.")) {
        let owner = gdbus(
            &[
                &bus[..],
                &["org.freedesktop.DBus.GetConnectionUnixProcessID", name],
            ]
            .concat(),
        );
        if !owner.is_ok_and(|o| o.contains(&format!(" {pid},"))) {
            continue;
        }
        // The process has more than one connection (WebKit's own, say): the menu's is
        // the one that answers with it.
        let Ok(tree) = gdbus(&[
            "introspect",
            "--session",
            "--dest",
            name,
            "--object-path",
            "/",
            "--recurse",
        ]) else {
            continue;
        };
        let Some(path) = tree
            .split_whitespace()
            .find(|w| w.starts_with("/org/ayatana/NotificationItem/") && w.ends_with("/Menu"))
        else {
            continue;
        };
        return Some((name.to_owned(), path.to_owned()));
    }
    None
}

/// The menu's items, label → id, from `GetLayout`'s
/// `<(ID, {…'label': <'LABEL'>…}, @av [])>` entries.
fn menu_items(name: &str, path: &str) -> Vec<(String, String)> {
    let layout = gdbus(&[
        "call",
        "--session",
        "--dest",
        name,
        "--object-path",
        path,
        "--method",
        "com.canonical.dbusmenu.GetLayout",
        "--",
        "0",
        "-1",
        "[]",
    ])
    .expect("the menu's layout");
    layout
        .split("<(")
        .skip(1)
        .filter_map(|item| {
            let id = item.split(',').next()?.trim().to_owned();
            let label = item
                .split("'label': <'")
                .nth(1)?
                .split('\'')
                .next()?
                .to_owned();
            Some((label, id))
        })
        .collect()
}

/// Click the item labelled `label`, as a tray host does.
fn click(name: &str, path: &str, label: &str) {
    let items = menu_items(name, path);
    let (_, id) = items
        .iter()
        .find(|(l, _)| l == label)
        .unwrap_or_else(|| panic!("no {label:?} in the tray menu: {items:?}"));
    gdbus(&[
        "call",
        "--session",
        "--dest",
        name,
        "--object-path",
        path,
        "--method",
        "com.canonical.dbusmenu.Event",
        "--",
        id,
        "clicked",
        "<int32 0>",
        "0",
    ])
    .unwrap_or_else(|e| panic!("clicking {label:?}: {e}"));
}

/// Each backend's `(name, local, enabled)` once `ready` holds for them.
async fn backends_when(
    dashboard: &str,
    ready: impl Fn(&[(String, bool, bool)]) -> bool,
) -> Vec<(String, bool, bool)> {
    let deadline = Instant::now() + GUARD;
    loop {
        let body: Value = reqwest::get(format!("{dashboard}/api/backends"))
            .await
            .expect("the dashboard answers")
            .json()
            .await
            .expect("JSON");
        let backends: Vec<_> = body["backends"]
            .as_array()
            .expect("a list")
            .iter()
            .map(|b| {
                (
                    b["backend"].as_str().unwrap_or_default().to_owned(),
                    b["local"].as_bool() == Some(true),
                    b["enabled"].as_bool() == Some(true),
                )
            })
            .collect();
        if ready(&backends) {
            return backends;
        }
        assert!(
            Instant::now() < deadline,
            "the backends never got there: {backends:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tray_pauses_local_routing_and_exits_with_the_drain() {
    assert!(
        std::env::var_os("DISPLAY").is_some()
            && std::env::var_os("DBUS_SESSION_BUS_ADDRESS").is_some(),
        "this test needs an X server and a session bus: scripts/test runs it under xvfb-run and dbus-run-session"
    );
    let home = tempfile::tempdir().expect("tempdir");
    let (_mock, yaml) = common::mock_and_config("").await;
    let config = home.path().join("glider.yaml");
    std::fs::write(&config, yaml).expect("config written");
    let mut served = common::serve::start(
        home.path(),
        &config,
        &[("WEBKIT_DISABLE_COMPOSITING_MODE", "1")],
        &["desktop"],
    );
    let pid = served.child.id();
    let deadline = Instant::now() + GUARD;
    let (name, path) = loop {
        if let Some(found) = tray_menu(pid) {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "glider desktop exported no tray menu"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let labels: Vec<_> = menu_items(&name, &path)
        .into_iter()
        .map(|(l, _)| l)
        .collect();
    assert_eq!(labels, ["Open dashboard", "Pause local routing", "Exit"]);

    // Pause: every local backend off, the cloud ones untouched; resume: back on.
    let all = backends_when(&served.dashboard, |b| !b.is_empty()).await;
    assert!(all.iter().all(|(_, _, enabled)| *enabled), "{all:?}");
    click(&name, &path, "Pause local routing");
    let paused = backends_when(&served.dashboard, |b| {
        b.iter().all(|(_, local, enabled)| enabled != local)
    })
    .await;
    assert!(paused.iter().any(|(_, local, _)| *local), "{paused:?}");
    click(&name, &path, "Pause local routing");
    backends_when(&served.dashboard, |b| {
        b.iter().all(|(_, _, enabled)| *enabled)
    })
    .await;

    // Exit: the drain SIGTERM starts, then a clean end.
    click(&name, &path, "Exit");
    served.lines.wait_for("stop asked from the window");
    served
        .lines
        .wait_for("shutting down: draining open requests");
    let deadline = Instant::now() + GUARD;
    let exit = loop {
        if let Some(exit) = served.child.try_wait().expect("try_wait") {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "glider desktop still runs after Exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "glider desktop exited with {exit}");
}
