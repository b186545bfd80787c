"""A new user's first hour, as they would see it (issue 49, item 10): the default
profile (`configs/glider.yaml`, the one `glider serve` embeds), the cloud unreachable,
neither cloud key set, and a real instruct model local (SmolLM2-135M-Instruct behind
llama.cpp's server, in the profile's place of Ollama). The real `claude -p` and
`codex exec` must print the model's answer: exit 0, some words of its own, not Glider's
cap note in place of the answer, not "Failed to authenticate"."""

import json
import pathlib
import re
import socket
import sys
import tempfile

import pytest

from conftest import start_glider
from llama import ALIAS, get_json, running_llama_server

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "cli"))
from test_real_clis import claude_quiet_env, cli, codex_config, run  # noqa: E402

from conftest import _binary  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
# SmolLM2-135M's own window.
WINDOW = 8192


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def refused_url():
    """A loopback URL nothing listens on: the cloud, offline."""
    return f"http://127.0.0.1:{free_port()}"


def first_hour_profile(llama_url):
    """The embedded default profile, changed only where this machine differs from a
    user's: the local server is llama.cpp's (OpenAI-compatible) instead of Ollama, the
    clouds are unreachable, and the key variables are ones nobody sets."""
    profile = (ROOT / "configs" / "glider.yaml").read_text()
    local = re.search(r"  - name: local\n(    .*\n)+", profile)
    assert local, "the default profile has a backend named local"
    llama = (
        "  - name: local\n"
        "    type: vllm\n"
        f"    base_url: \"{llama_url}/v1\"\n"
        f"    context_window: {WINDOW}\n"
        f"    models: [\"{ALIAS}\"]\n"
        f"    default_model: \"{ALIAS}\"\n"
    )
    cloud = refused_url()
    profile = profile.replace(local.group(0), llama)
    for url in ("https://api.anthropic.com", "https://api.openai.com/v1"):
        assert url in profile, url
        profile = profile.replace(url, cloud)
    profile = profile.replace("${ANTHROPIC_API_KEY}", "${GLIDER_FIRST_HOUR_UNSET_A}")
    profile = profile.replace("${OPENAI_API_KEY}", "${GLIDER_FIRST_HOUR_UNSET_O}")
    # The gateway and dashboard ports are given on the command line; the MITM door's
    # fixed 8082 gets a free one, so a second Glider on this machine changes nothing.
    assert "port: 8082" in profile
    return profile.replace("port: 8082", f"port: {free_port()}")


@pytest.fixture(scope="module")
def first_hour():
    with running_llama_server(context=WINDOW, instruct=True) as url:
        with tempfile.TemporaryDirectory() as tmp:
            config = pathlib.Path(tmp) / "glider.yaml"
            config.write_text(first_hour_profile(url))
            glider = start_glider(config, pathlib.Path(tmp) / "home")
            glider.config, glider.home = config, pathlib.Path(tmp) / "home"
            try:
                yield glider
            finally:
                glider.stop()


def assert_an_answer(printed, err):
    """What the CLI printed is the model's answer: words, not Glider's note alone."""
    text = printed.strip()
    assert text, f"nothing printed\nstderr: {err[-3000:]}"
    assert not text.startswith("[glider:"), f"the note was printed in place of the answer: {text!r}"
    assert "Failed to authenticate" not in text + err, (text, err[-3000:])
    assert re.search(r"[A-Za-z]{2,}", text), text


def test_claude_code_offline_prints_the_local_model_s_answer(first_hour, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    gateway = first_hour.match.group(1)
    env = claude_quiet_env(home, ANTHROPIC_BASE_URL=gateway, ANTHROPIC_API_KEY="sk-ant-first-hour")
    code, out, err = run([cli("claude"), "-p", "What is the capital of France? Answer in one sentence."],
                         env, work, timeout=600)
    assert code == 0, f"claude failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    assert_an_answer(out, err)
    requests = get_json(f"{first_hour.dashboard}/api/requests?limit=50")["requests"]
    answered = [r for r in requests if r["status"] == 200]
    assert answered and all(r["backend"] == "local" and r["local"] for r in answered), requests


def test_codex_offline_prints_the_local_model_s_answer(first_hour, tmp_path):
    home, work = tmp_path / "codex-home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = codex_config(home, first_hour.match.group(1))
    last = tmp_path / "last.txt"
    code, out, err = run(
        [cli("codex"), "exec", "--skip-git-repo-check", "--ephemeral", "--color", "never", "-o", str(last),
         "What is the capital of France? Answer in one sentence."],
        env, work, timeout=600,
    )
    assert code == 0, f"codex failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    assert_an_answer(last.read_text(), err)
    requests = get_json(f"{first_hour.dashboard}/api/requests?limit=50")["requests"]
    codex = [r for r in requests if r["status"] == 200 and r.get("front") == "openai_responses"]
    assert codex and all(r["backend"] == "local" for r in codex), json.dumps(requests)[:3000]


def test_local_through_glider_run_claude_prints_the_local_model_s_answer(first_hour, tmp_path):
    """The MITM door, offline: `glider run claude` (proxy and CA trust for that one
    process, and the `/local` command Claude Code would refuse as unknown) with the user's
    own key left alone; `/local` sends the turn to the local model, whose answer is
    printed."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    env = claude_quiet_env(home, ANTHROPIC_API_KEY="sk-ant-first-hour", GLIDER_HOME=str(first_hour.home))
    for name in ("ANTHROPIC_BASE_URL", "NODE_EXTRA_CA_CERTS", "SSL_CERT_FILE", "CLAUDE_CONFIG_DIR"):
        env.pop(name, None)
    code, out, err = run([_binary("glider"), "run", "-c", str(first_hour.config), cli("claude"), "-p",
                          "/local What is the capital of France? Answer in one sentence."], env, work, timeout=600)
    assert code == 0, f"glider run claude failed ({code})\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
    assert_an_answer(out, err)
    requests = get_json(f"{first_hour.dashboard}/api/requests?limit=50")["requests"]
    mitm = [r for r in requests if r["door"] == "mitm" and r["status"] == 200]
    assert mitm and all(r["backend"] == "local" for r in mitm), json.dumps(requests)[:3000]
