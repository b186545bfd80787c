"""The real `ollama` Python package (PyPI) against Glider's Ollama front, with a real
llama.cpp server behind it (serving embeddings too): `list`, `show`, `ps`, `chat` and
`generate` (streamed and not), `embed` and `embeddings` as the package's own
documentation writes them, the same vectors through the `openai` package's
`embeddings.create`, and model management refused in Ollama's error shape. A real model's words are not asserted, only that it wrote some and
that the replies parse into the package's own types."""

import re

import ollama
import openai
import pytest

from conftest import poll
from llama import CONTEXT, VIA_ANTHROPIC, VIA_OPENAI, get_json, running_glider_on, running_llama_server

BOTH = [VIA_OPENAI, VIA_ANTHROPIC]
OPTIONS = {"num_predict": 24, "temperature": 0}


@pytest.fixture(scope="module")
def gateway():
    with running_llama_server(extra_args=("--embeddings", "--pooling", "mean")) as url, \
            running_glider_on(url) as glider:
        yield glider.match.group(1)


@pytest.fixture
def client(gateway):
    return ollama.Client(host=gateway, timeout=180)


def test_list_names_every_routed_model(client):
    names = [model.model for model in client.list().models]
    assert set(BOTH) <= set(names), names


def test_show_gives_the_window_and_what_the_server_said_the_model_can_do(client, gateway):
    # The probe reads llama-server's /props (the template's tool support, its window).
    probed = poll(lambda: get_json(f"{gateway}/v1/models")["data"][0]["glider"]["capabilities"], timeout=30)
    assert probed and "/props" in probed["sources"], probed
    # What the server said is what `show` says (the config says nothing of either).
    assert probed["tools"] is True and probed["vision"] is False, probed
    shown = client.show(VIA_OPENAI)
    assert "completion" in shown.capabilities and "tools" in shown.capabilities, shown.capabilities
    assert "vision" not in shown.capabilities
    assert shown.modelinfo["glider.context_length"] == CONTEXT, shown.modelinfo
    with pytest.raises(ollama.ResponseError) as missing:
        client.show("no-such-model")
    assert missing.value.status_code == 404


def test_ps_lists_only_routed_models(client):
    routed = {model.model for model in client.list().models}
    running = client.ps().models
    assert {model.model for model in running} <= routed


@pytest.mark.parametrize("model", BOTH)
def test_chat(client, model):
    reply = client.chat(model=model, messages=[{"role": "user", "content": "Say hello."}], options=OPTIONS)
    assert reply.message.role == "assistant"
    assert reply.message.content.strip()
    assert reply.done and reply.eval_count > 0


@pytest.mark.parametrize("model", BOTH)
def test_chat_stream(client, model):
    parts = list(client.chat(model=model, messages=[{"role": "user", "content": "Say hello."}],
                             options=OPTIONS, stream=True))
    assert parts[-1].done and all(not part.done for part in parts[:-1])
    assert "".join(part.message.content for part in parts).strip()


@pytest.mark.parametrize("model", BOTH)
def test_generate(client, model):
    reply = client.generate(model=model, prompt="Say hello.", system="Answer briefly.", options=OPTIONS)
    assert reply.response.strip()
    assert reply.done and reply.done_reason in ("stop", "length")


@pytest.mark.parametrize("model", BOTH)
def test_generate_stream(client, model):
    parts = list(client.generate(model=model, prompt="Say hello.", options=OPTIONS, stream=True))
    assert parts[-1].done and all(not part.done for part in parts[:-1])
    assert "".join(part.response for part in parts).strip()


def test_an_empty_prompt_loads_the_model(client):
    # What `ollama run` sends first.
    reply = client.generate(model=VIA_OPENAI)
    assert reply.done and reply.done_reason == "load" and reply.response == ""


def test_version_is_a_plain_semver(gateway):
    version = get_json(f"{gateway}/api/version")["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version


def test_model_management_is_refused_in_ollama_s_shape(client):
    with pytest.raises(ollama.ResponseError) as pulled:
        client.pull(VIA_OPENAI)
    assert pulled.value.status_code == 403
    assert "does not manage models" in pulled.value.error
    with pytest.raises(ollama.ResponseError) as deleted:
        client.delete(VIA_OPENAI)
    assert deleted.value.status_code == 403


def test_embed_and_the_older_embeddings(client):
    texts = ["fn main() {}", "def main(): pass"]
    vectors = client.embed(model=VIA_OPENAI, input=texts).embeddings
    assert len(vectors) == 2 and len(vectors[0]) == len(vectors[1]) > 0
    assert vectors[0] != vectors[1]
    one = client.embeddings(model=VIA_OPENAI, prompt=texts[0]).embedding
    assert len(one) == len(vectors[0])
    assert max(abs(a - b) for a, b in zip(one, vectors[0])) < 1e-4


def test_openai_embeddings_give_the_same_vectors(client, gateway):
    texts = ["fn main() {}"]
    gpt = openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=180)
    created = gpt.embeddings.create(model=VIA_OPENAI, input=texts)
    via_ollama = client.embed(model=VIA_OPENAI, input=texts).embeddings[0]
    assert max(abs(a - b) for a, b in zip(created.data[0].embedding, via_ollama)) < 1e-4
    assert created.usage.prompt_tokens > 0


def test_a_model_behind_anthropic_s_wire_has_no_embeddings(client):
    with pytest.raises(ollama.ResponseError) as refused:
        client.embed(model=VIA_ANTHROPIC, input="x")
    assert refused.value.status_code == 400 and "no embeddings" in refused.value.error
