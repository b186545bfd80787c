"""The official SDKs' own documented streaming loops, copied unchanged, against every
front and every backend dialect behind it; and the parameter rule as an SDK user meets
it: a parameter the backend cannot honour is the SDK's typed 400 naming it, never a 200
that ignored it. (OpenAI's chat loop reads `chunk.choices[0]` on every chunk: a usage
chunk the client did not ask for used to crash it.)"""

import contextlib
import io

import anthropic
import ollama
import openai
import pytest

BACKENDS = ["m-ollama", "m-vllm", "m-openai", "m-anthropic"]


def printed(loop):
    """What `loop()` prints (the documented loops print as they go)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        loop()
    return out.getvalue()


@pytest.fixture
def gpt(stack):
    base, _ = stack
    return openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0, timeout=30)


@pytest.fixture
def claude(stack):
    base, _ = stack
    return anthropic.Anthropic(base_url=base, api_key="sk-ant-test", max_retries=0, timeout=30)


@pytest.fixture
def local(stack):
    base, _ = stack
    return ollama.Client(host=base, timeout=30)


@pytest.mark.parametrize("model", BACKENDS)
def test_openai_chat_completions_loop(gpt, model):
    def loop():
        # https://platform.openai.com/docs/api-reference/chat-streaming
        stream = gpt.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Say this is a test"}],
            stream=True,
        )
        for chunk in stream:
            print(chunk.choices[0].delta.content or "", end="")
    assert "echo: Say this is a test" in printed(loop)


@pytest.mark.parametrize("model", BACKENDS)
def test_openai_responses_loop(gpt, model):
    def loop():
        stream = gpt.responses.create(model=model, input="Say this is a test", stream=True)
        for event in stream:
            if event.type == "response.output_text.delta":
                print(event.delta, end="")
    assert "echo: Say this is a test" in printed(loop)


@pytest.mark.parametrize("model", BACKENDS)
def test_anthropic_messages_loop(claude, model):
    def loop():
        # https://docs.anthropic.com/en/api/messages-streaming (Python SDK helper)
        with claude.messages.stream(
            max_tokens=1024,
            messages=[{"role": "user", "content": "Hello"}],
            model=model,
        ) as stream:
            for text in stream.text_stream:
                print(text, end="", flush=True)
    assert "echo: Hello" in printed(loop)


@pytest.mark.parametrize("model", BACKENDS)
def test_ollama_chat_loop(local, model):
    def loop():
        # https://github.com/ollama/ollama-python (streaming responses)
        stream = local.chat(model=model, messages=[{"role": "user", "content": "Why is the sky blue?"}], stream=True)
        for chunk in stream:
            print(chunk["message"]["content"], end="", flush=True)
    assert "echo: Why is the sky blue?" in printed(loop)


@pytest.mark.parametrize("model", BACKENDS)
def test_ollama_generate_loop(local, model):
    def loop():
        for part in local.generate(model=model, prompt="Why is the sky blue?", stream=True):
            print(part["response"], end="", flush=True)
    assert "echo: Why is the sky blue?" in printed(loop)


@pytest.mark.parametrize("model", ["m-ollama", "m-anthropic"])
def test_n_and_logprobs_are_refused_by_name_where_they_cannot_be_served(gpt, model):
    for params, name in [({"n": 2}, "n"), ({"logprobs": True}, "logprobs")]:
        with pytest.raises(openai.BadRequestError) as refused:
            gpt.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}], **params)
        assert refused.value.param == name, refused.value


def test_n_reaches_an_openai_compatible_backend(gpt):
    # The mock answers with one choice: it is the backend's answer, not Glider's.
    reply = gpt.chat.completions.create(model="m-vllm", messages=[{"role": "user", "content": "hi"}], n=2)
    assert reply.choices


@pytest.mark.parametrize("model", ["m-ollama", "m-vllm"])
def test_a_pdf_is_refused_and_a_text_document_read(claude, model):
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}}
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=model, max_tokens=50, messages=[
            {"role": "user", "content": [pdf, {"type": "text", "text": "summarise"}]}])
    assert "document" in str(refused.value)
    text = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "green sky"}}
    reply = claude.messages.create(model=model, max_tokens=200, messages=[
        {"role": "user", "content": [text, {"type": "text", "text": "summarise"}]}])
    assert "green sky" in reply.content[0].text
