"""Glider's message flags from the real Codex (issue 21, item 2). `codex exec` sends a
prompt that starts with `/local` as it is, so the flag reaches Glider in the Responses
body's `input`; Codex's interactive composer refuses an unknown slash command
(`Unrecognized command '/local'`) but sends a message that starts with a space as typed;
and the provider's `env_http_headers` carries `x-glider-route` from an environment
variable for a whole session. The backends record what they were sent: the flag never
reaches the model."""

import json

import pytest

from conftest import poll
from test_claude_flags import assert_reached_without_flag, flag_stack, user_texts  # noqa: F401 (a fixture)
from test_claude_interactive import Tmux
from test_real_clis import cli, codex_config, run


@pytest.fixture
def codex(tmp_path, flag_stack):  # noqa: F811 (the imported fixture)
    """A CODEX_HOME whose provider is Glider's gateway, Codex's environment, and a working
    directory; the backends' logs start empty."""
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = codex_config(home, flag_stack["gateway"])
    for backend in flag_stack["backends"].values():
        with backend.lock:
            backend.bodies.clear()
    return home, env, work


def codex_exec(prompt, env, work):
    code, out, err = run([cli("codex"), "exec", "--skip-git-repo-check", "--ephemeral", "--color", "never",
                          "--json", prompt], env, work)
    assert code == 0, f"codex failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return [e["item"]["text"] for e in events
            if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"]


def only(backends, name, what):
    others = {n: b.bodies for n, b in backends.items() if n != name and b.bodies}
    assert not others, f"{what} should reach only {name}: {others}"


@pytest.mark.parametrize("prompt, flag, answers", [
    ("/local say hi", "/local", "local"),
    ("/via spare say hi", "/via", "spare"),
])
def test_codex_exec_sends_a_flag_through_and_glider_strips_it(flag_stack, codex, prompt, flag, answers):  # noqa: F811
    _home, env, work = codex
    texts = codex_exec(prompt, env, work)
    assert any(t.startswith("reply ") for t in texts), texts
    assert_reached_without_flag(flag_stack["backends"][answers], flag)
    only(flag_stack["backends"], answers, flag)


def test_codex_routes_a_session_by_the_providers_env_http_headers(flag_stack, codex):  # noqa: F811
    """`env_http_headers = { "x-glider-route" = "GLIDER_ROUTE" }`: `GLIDER_ROUTE=local
    codex …` sends every request of that run local, with no flag in the text."""
    home, env, work = codex
    config = home / "config.toml"
    config.write_text(config.read_text() + 'env_http_headers = { "x-glider-route" = "GLIDER_ROUTE" }\n')
    env["GLIDER_ROUTE"] = "local"
    texts = codex_exec("say hi", env, work)
    assert any(t.startswith("reply ") for t in texts), texts
    # No flag was typed: the header alone routes, and the user's words arrive as typed.
    local = flag_stack["backends"]["local"]
    assert local.bodies and all("say hi" in user_texts(body) for body in local.bodies), local.bodies
    only(flag_stack["backends"], "local", "x-glider-route: local")


def test_codex_interactive_refuses_a_slash_flag_but_sends_one_after_a_space(flag_stack, codex, tmp_path):  # noqa: F811
    home, env, work = codex
    # The model the pinned Codex suggests moving to: with an older one it first shows a
    # "try the new model" screen that takes the first keys typed.
    config = home / "config.toml"
    # Keys sent by tmux come faster than a person types: without this Codex takes them
    # for a paste, and the Enter after them for a new line in it.
    text = config.read_text()
    assert 'model = "gpt-5.5"' in text, text
    config.write_text(text.replace('model = "gpt-5.5"', 'model = "gpt-6-sol"\ndisable_paste_burst = true'))
    tmux_dir = tmp_path / "tmux"
    tmux_dir.mkdir()
    tmux = Tmux(tmux_dir)
    local = flag_stack["backends"]["local"]
    try:
        # `--no-daemon`: else the TUI starts a shared app-server that outlives it.
        tmux.start([cli("codex"), "--no-daemon"], env, work, width=160, height=45)
        assert poll(lambda: "for shortcuts" in tmux.screen(), timeout=90), tmux.screen()
        tmux.type("/local say hi")
        refused = poll(lambda: "Unrecognized command '/local'" in tmux.screen(), timeout=60)
        assert refused, tmux.screen()
        assert not local.bodies, local.bodies
        # Clear the composer, then the same message after a space.
        tmux.key("C-u")
        tmux.type(" /local say hi")
        answered = poll(lambda: local.bodies and "reply 1" in tmux.screen(), timeout=120)
        assert answered, f"no local answer on screen:\n{tmux.screen()}\nbackend got: {local.bodies}"
        assert_reached_without_flag(local, "/local")
    finally:
        tmux.kill()
