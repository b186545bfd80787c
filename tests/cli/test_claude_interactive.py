"""The real Claude Code, interactive, in a detached tmux session against Glider's gateway
(issue 21, item 2): a user types `/local say hi` at its prompt after `glider setup
claude`, the recording local backend answers, and neither the flag nor Claude Code's
record of the command reaches it. The first-run screens (theme, API key approval, folder
trust) are answered in a throwaway HOME's ~/.claude.json, as Claude Code itself records
them. The screen is read by polling `tmux capture-pane`; the test's own tmux server
(socket under its temp dir) is killed after."""

import json
import os
import shlex
import subprocess

import pytest

from conftest import _binary, poll, start_glider
from test_claude_flags import assert_reached_without_flag, recording_backends
from test_real_clis import claude_quiet_env, cli

CONFIG = """
backends:
  - {{name: local, type: vllm, base_url: '{local}', models: [qwen-local]}}
routing: {{cloud_fallback: false, local_fallback: false, classifier: {{enabled: false}}}}
"""

KEY = "sk-ant-interactive-test-key-0123456789"


def seed_first_run(home, work):
    """What Claude Code writes to ~/.claude.json once a user has picked a theme, approved
    the API key from the environment (by its last 20 characters) and trusted `work`."""
    (home / ".claude.json").write_text(json.dumps({
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "customApiKeyResponses": {"approved": [KEY[-20:]], "rejected": []},
        "projects": {os.path.realpath(work): {"hasTrustDialogAccepted": True,
                                              "hasCompletedProjectOnboarding": True}},
    }))


class Tmux:
    """One session on a tmux server of this test's own (its socket under `directory`)."""

    def __init__(self, directory, session="cli"):
        self.session = session
        self.env = dict(os.environ, TMUX_TMPDIR=str(directory))
        self.env.pop("TMUX", None)

    def __call__(self, *args):
        return subprocess.run(["tmux", *args], env=self.env, capture_output=True, text=True, timeout=30, check=True)

    def start(self, argv, env, cwd, width=200, height=50):
        """Run `argv` in the session with exactly `env` (not tmux's own environment)."""
        command = "exec env -i " + " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()) + " " + \
            " ".join(shlex.quote(arg) for arg in argv)
        self("new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height), "-c", str(cwd), command)

    def type(self, text):
        """Type `text` literally and, once the screen shows it, Enter (an Enter that
        arrives with the keys can be read as part of a paste, a new line)."""
        self("send-keys", "-t", self.session, "-l", text)
        assert poll(lambda: text.strip() in self.screen(), timeout=30), self.screen()
        self("send-keys", "-t", self.session, "Enter")

    def key(self, name):
        self("send-keys", "-t", self.session, name)

    def screen(self):
        return self("capture-pane", "-p", "-t", self.session).stdout

    def kill(self):
        subprocess.run(["tmux", "kill-server"], env=self.env, capture_output=True, timeout=30)


@pytest.fixture
def tmux(tmp_path):
    directory = tmp_path / "tmux"
    directory.mkdir()
    server = Tmux(directory)
    try:
        yield server
    finally:
        server.kill()


def test_local_typed_at_claude_codes_interactive_prompt_reaches_the_local_model(tmp_path, tmux):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    seed_first_run(home, work)
    with recording_backends("local") as backends:
        local = backends["local"]
        config = tmp_path / "glider.yaml"
        config.write_text(CONFIG.format(local=local.url))
        glider = start_glider(config, tmp_path / "glider-home")
        try:
            env = claude_quiet_env(home, ANTHROPIC_API_KEY=KEY, ANTHROPIC_BASE_URL=glider.match.group(1))
            env.pop("CLAUDE_CONFIG_DIR", None)
            setup = subprocess.run([_binary("glider"), "setup", "claude"], env=env, capture_output=True,
                                   text=True, timeout=30)
            assert setup.returncode == 0, setup.stderr
            tmux.start([cli("claude")], env, work)
            ready = poll(lambda: "for shortcuts" in tmux.screen(), timeout=90)
            assert ready, f"Claude Code's prompt did not appear:\n{tmux.screen()}"
            tmux.type("/local say hi")
            answered = poll(lambda: local.bodies and "reply 1" in tmux.screen(), timeout=120)
            assert answered, f"no local answer on screen:\n{tmux.screen()}\nbackend got: {local.bodies}"
            assert "Unknown command" not in tmux.screen()
            assert_reached_without_flag(local, "/local")
        finally:
            glider.stop()
