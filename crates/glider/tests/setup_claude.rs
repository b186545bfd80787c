//! `glider setup claude` as a user runs it, against a throwaway HOME: a command file
//! per routing and delegation flag, a user's own file of the same name untouched, and
//! `--remove` deleting only Glider's (issue 21, item 2).

use std::path::Path;
use std::process::Command;

fn setup(home: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_glider"))
        .args(["setup", "claude"])
        .args(args)
        .env("HOME", home)
        .env_remove("CLAUDE_CONFIG_DIR")
        .output()
        .expect("glider runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
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
    let left: Vec<String> = std::fs::read_dir(&commands)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["cloud.md"], "{said}");
}
