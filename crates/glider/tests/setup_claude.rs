//! `glider setup claude` as a user runs it, against a throwaway HOME: a command file
//! per routing and delegation flag, a user's own file of the same name untouched, and
//! `--remove` deleting only Glider's; and `glider run claude` handing one Claude Code the
//! same commands through `--add-dir` without writing to `~/.claude` (issue 21, item 2).

use std::path::Path;
use std::process::Command;

/// Run `glider args…` with `HOME` = `home` (and `GLIDER_HOME` = `home/.glider`), no
/// `CLAUDE_CONFIG_DIR` nor `GLIDER_CONFIG`; its stdout, once it succeeded.
fn glider(home: &Path, args: &[&std::ffi::OsStr]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_glider"))
        .args(args)
        .env("HOME", home)
        .env("GLIDER_HOME", home.join(".glider"))
        .env_remove("CLAUDE_CONFIG_DIR")
        .env_remove("GLIDER_CONFIG")
        .output()
        .expect("glider runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn setup(home: &Path, args: &[&str]) -> String {
    let mut all: Vec<&std::ffi::OsStr> = vec!["setup".as_ref(), "claude".as_ref()];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    glider(home, &all)
}

#[test]
fn setup_claude_installs_a_command_per_flag_and_never_touches_a_users_own() {
    let home = tempfile::tempdir().expect("tempdir");
    let commands = home.path().join(".claude").join("commands");
    std::fs::create_dir_all(&commands).expect("mkdir");
    let own = "Summarise the cloud costs of this repo\n";
    std::fs::write(commands.join("cloud.md"), own).expect("write");

    let said = setup(home.path(), &[]);
    for (file, body) in [
        ("local.md", "/local $ARGUMENTS"),
        ("via.md", "/via $ARGUMENTS"),
        ("claude.md", "/claude $ARGUMENTS"),
        ("cursor-agent.md", "/cursor-agent $ARGUMENTS"),
        ("agy.md", "/agy $ARGUMENTS"),
    ] {
        let text = std::fs::read_to_string(commands.join(file)).expect(file);
        assert!(
            text.starts_with("---\nglider-managed: true"),
            "{file}: {text}"
        );
        assert_eq!(text.lines().last(), Some(body), "{file}: {text}");
    }
    assert_eq!(
        std::fs::read_to_string(commands.join("cloud.md")).expect("own"),
        own
    );
    assert!(said.contains("kept") && said.contains("cloud.md"), "{said}");

    // Running it again rewrites Glider's own files, still not the user's.
    setup(home.path(), &[]);
    assert_eq!(
        std::fs::read_to_string(commands.join("cloud.md")).expect("own"),
        own
    );

    let said = setup(home.path(), &["--remove"]);
    assert_eq!(names(&commands), ["cloud.md"], "{said}");
}

/// The names of the files in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn glider_run_claude_adds_the_commands_for_that_child_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (home, bin) = (dir.path().join("home"), dir.path().join("bin"));
    let glider_home = home.join(".glider");
    let user_commands = home.join(".claude").join("commands");
    std::fs::create_dir_all(&user_commands).expect("mkdir");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let own = "Summarise the cloud costs of this repo\n";
    std::fs::write(user_commands.join("cloud.md"), own).expect("write");
    // A stand-in `claude` that prints the argv it was given, one word a line.
    let claude = bin.join("claude");
    std::fs::write(
        &claude,
        "#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\n",
    )
    .expect("write");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&claude, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let argv = glider(
        &home,
        &[
            "run".as_ref(),
            claude.as_os_str(),
            "-p".as_ref(),
            "/local say hi".as_ref(),
        ],
    );
    let overlay = glider_home.join("claude-run");
    assert_eq!(
        argv,
        format!("--add-dir={}\n-p\n/local say hi\n", overlay.display())
    );
    let commands = overlay.join(".claude").join("commands");
    // Every flag but `/cloud`, which the user's own file already names.
    assert_eq!(
        names(&commands),
        [
            "agy.md",
            "claude.md",
            "cursor-agent.md",
            "local.md",
            "via.md"
        ]
    );
    let local = std::fs::read_to_string(commands.join("local.md")).expect("local.md");
    assert_eq!(local.lines().last(), Some("/local $ARGUMENTS"), "{local}");
    // The user's own directory is as it was.
    assert_eq!(names(&user_commands), ["cloud.md"]);
    assert_eq!(
        std::fs::read_to_string(user_commands.join("cloud.md")).expect("own"),
        own
    );

    // Another program is started with its arguments alone.
    let echo = bin.join("echo-args");
    std::fs::copy(&claude, &echo).expect("copy");
    let argv = glider(&home, &["run".as_ref(), echo.as_os_str(), "hi".as_ref()]);
    assert_eq!(argv, "hi\n");
}
