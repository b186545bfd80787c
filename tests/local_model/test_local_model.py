"""Every front dialect through Glider to a real small model (llama.cpp's llama-server on
Gemma 3 270M), over both local wires: OpenAI-compatible Chat Completions and
llama-server's own `/v1/messages`. A real model's words are not asserted: the replies'
structure is (well-formed in the client's dialect, usage counted, the forced tool called,
JSON of the requested schema, stop sequences honoured)."""

import json

import anthropic
import openai
import pytest

from conftest import poll
from llama import (ALIAS, CONTEXT, MAX_PREDICT, VIA_ANTHROPIC, VIA_OPENAI, get_json, post_json, record_fitted_with,
                   running_glider_on, running_llama_server)

BOTH = [VIA_OPENAI, VIA_ANTHROPIC]
# Greedy decoding (the anthropic SDK takes it only in extra_body): whether a 270M model reaches a forced call (llama.cpp's
# grammar lets text come first) must not change from run to run.
GREEDY = {"temperature": 0}
WEATHER = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
TITLE_SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}},
    "required": ["title"],
    "additionalProperties": False,
}


@pytest.fixture(scope="session")
def llama():
    with running_llama_server() as url:
        yield url


@pytest.fixture(scope="session")
def glider(llama):
    with running_glider_on(llama) as glider:
        yield glider


@pytest.fixture
def gateway(glider):
    return glider.match.group(1)


@pytest.fixture
def claude(gateway):
    return anthropic.Anthropic(base_url=gateway, api_key="unused", max_retries=0, timeout=180)


@pytest.fixture
def gpt(gateway):
    return openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=180)


def test_the_server_runs_the_shipped_template(llama):
    props = get_json(f"{llama}/props")
    assert "<start_of_turn>" in props["chat_template"]
    assert props["default_generation_settings"]["n_ctx"] == CONTEXT
    assert [m["id"] for m in get_json(f"{llama}/v1/models")["data"]] == [ALIAS]


def test_capabilities_discovered_from_props_are_shown(gateway, glider):
    # llama-server's /props (n_ctx, the template's tool support, modalities) and its
    # /v1/models meta (n_ctx_train), read by Glider's health probe.
    def discovered():
        models = {m["id"]: m for m in get_json(f"{gateway}/v1/models")["data"]}
        return models[VIA_OPENAI]["glider"]["capabilities"]
    caps = poll(discovered)
    assert caps == {"context_window": CONTEXT, "trained_context": 32768, "tools": True, "thinking": None,
                    "vision": False, "sources": ["/props", "/v1/models"]}, caps
    backends = {b["backend"]: b for b in get_json(f"{glider.dashboard}/api/backends")["backends"]}
    assert backends["llama-openai"]["capabilities"] == {ALIAS: caps}, backends["llama-openai"]
    # A `local: true` Anthropic-wire backend on the same server is probed like it (its
    # model list and /props), so it knows the same window and tool support.
    anthropic_caps = backends["llama-anthropic"]["capabilities"]
    assert set(anthropic_caps) == {ALIAS}, backends["llama-anthropic"]
    assert (anthropic_caps[ALIAS]["context_window"], anthropic_caps[ALIAS]["tools"]) == (CONTEXT, True), anthropic_caps


@pytest.mark.parametrize("model", BOTH)
def test_anthropic_messages(claude, model):
    reply = claude.messages.create(model=model, max_tokens=32, system="Answer in one short sentence.",
                                   messages=[{"role": "user", "content": "What colour is the sky?"}])
    assert reply.type == "message" and reply.role == "assistant"
    assert reply.content and reply.content[0].type == "text" and reply.content[0].text.strip()
    assert reply.stop_reason in ("end_turn", "max_tokens")
    assert 0 < reply.usage.output_tokens <= 32 and reply.usage.input_tokens > 0


@pytest.mark.parametrize("model", BOTH)
def test_anthropic_messages_stream(claude, model):
    with claude.messages.stream(model=model, max_tokens=32,
                                messages=[{"role": "user", "content": "Name a fruit."}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.strip() and final.content[0].text == text
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert 0 < final.usage.output_tokens <= 32


@pytest.mark.parametrize("model", BOTH)
@pytest.mark.parametrize("stream", [False, True])
def test_openai_chat(gpt, model, stream):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}]
    if stream:
        chunks = list(gpt.chat.completions.create(model=model, max_tokens=32, messages=messages, stream=True,
                                                  stream_options={"include_usage": True}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        usage = [c.usage for c in chunks if c.usage]
        assert finish and finish[-1] in ("stop", "length")
        assert usage and 0 < usage[-1].completion_tokens <= 32
    else:
        reply = gpt.chat.completions.create(model=model, max_tokens=32, messages=messages)
        text = reply.choices[0].message.content
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert 0 < reply.usage.completion_tokens <= 32
    assert text and text.strip()


@pytest.mark.parametrize("model", BOTH)
@pytest.mark.parametrize("stream", [False, True])
def test_openai_responses(gpt, model, stream):
    if stream:
        events = list(gpt.responses.create(model=model, max_output_tokens=32, input="Say hello.", stream=True))
        kinds = [e.type for e in events]
        assert kinds[0] == "response.created" and kinds[-1] in ("response.completed", "response.incomplete"), kinds
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text == events[-1].response.output_text
    else:
        reply = gpt.responses.create(model=model, max_output_tokens=32, input="Say hello.")
        assert reply.status in ("completed", "incomplete")
        text = reply.output_text
        assert 0 < reply.usage.output_tokens <= 32
    assert text.strip()


@pytest.mark.parametrize("model", BOTH)
@pytest.mark.parametrize("stream", [False, True])
def test_ollama_chat(gateway, model, stream):
    status, body = post_json(f"{gateway}/api/chat", {
        "model": model, "stream": stream, "options": {"num_predict": 32},
        "messages": [{"role": "user", "content": "Say hello."}],
    })
    assert status == 200, body
    lines = [json.loads(line) for line in body.splitlines() if line.strip()]
    assert lines[-1]["done"] is True and lines[-1]["eval_count"] > 0
    assert all(not line["done"] for line in lines[:-1])
    text = "".join(line["message"]["content"] for line in lines)
    assert text.strip()
    if not stream:
        assert len(lines) == 1


@pytest.mark.parametrize("model", BOTH)
@pytest.mark.parametrize("stream", [False, True])
def test_forced_tool_call_anthropic(claude, model, stream):
    args = dict(model=model, max_tokens=MAX_PREDICT, tools=[WEATHER], extra_body=GREEDY,
                tool_choice={"type": "tool", "name": "get_weather"},
                messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    if stream:
        with claude.messages.stream(**args) as s:
            reply = s.get_final_message()
    else:
        reply = claude.messages.create(**args)
    calls = [block for block in reply.content if block.type == "tool_use"]
    # A 270M model may repeat the call until its cap: the first call is what is forced.
    assert reply.stop_reason in ("tool_use", "max_tokens"), reply
    assert calls and calls[0].name == "get_weather" and calls[0].id, reply
    assert isinstance(calls[0].input, dict)


@pytest.mark.parametrize("model", BOTH)
def test_forced_tool_call_openai(gpt, model):
    reply = gpt.chat.completions.create(
        model=model, max_tokens=MAX_PREDICT, **GREEDY,
        tools=[{"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                 "parameters": WEATHER["input_schema"]}}],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        messages=[{"role": "user", "content": "What is the weather in Paris?"}],
    )
    choice = reply.choices[0]
    assert choice.finish_reason in ("tool_calls", "length"), reply
    assert choice.message.tool_calls, reply
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.id
    assert isinstance(json.loads(call.function.arguments), dict)


def assert_title_json(text):
    title = json.loads(text)
    assert set(title) == {"title"} and isinstance(title["title"], str), title


# Over the OpenAI-compatible wire the schema reaches llama.cpp's grammar as
# response_format; llama-server's /v1/messages takes no schema in any form, so there
# Glider sends it as a forced tool whose input schema it is, and turns the call back
# into the text reply (docs/local-models.md, "Structured output").
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", BOTH)
def test_title_request_answers_json_of_the_schema(claude, model, stream):
    # The shape of Claude Code's title call: a schema in output_config.format.
    args = dict(
        model=model, max_tokens=64,
        system="Write a 3-7 word title for the conversation. Answer with JSON.",
        messages=[{"role": "user", "content": "How do I sort a list in Python?"}],
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": TITLE_SCHEMA}}, **GREEDY},
    )
    if stream:
        with claude.messages.stream(**args) as s:
            reply = s.get_final_message()
    else:
        reply = claude.messages.create(**args)
    assert [block.type for block in reply.content] == ["text"], reply
    assert_title_json(reply.content[0].text)
    if model == VIA_ANTHROPIC:
        # The forced call is the whole answer: a finished turn, not a tool_use stop.
        assert reply.stop_reason == "end_turn", reply


@pytest.mark.parametrize("model", [VIA_OPENAI])
def test_openai_response_format_answers_json_of_the_schema(gpt, model):
    reply = gpt.chat.completions.create(
        model=model, max_tokens=64, **GREEDY,
        messages=[{"role": "user", "content": "Give a title for: how to sort a list in Python."}],
        response_format={"type": "json_schema", "json_schema": {"name": "title", "schema": TITLE_SCHEMA, "strict": True}},
    )
    assert_title_json(reply.choices[0].message.content)


@pytest.mark.parametrize("model", BOTH)
def test_stop_sequence_ends_the_reply(claude, model):
    # "e" is in almost every English word: the reply stops long before its cap, and the
    # sequence itself is not part of the text.
    reply = claude.messages.create(model=model, max_tokens=MAX_PREDICT, stop_sequences=["e"],
                                   messages=[{"role": "user", "content": "Describe the sea in three sentences."}])
    text = "".join(block.text for block in reply.content if block.type == "text")
    assert "e" not in text
    assert reply.usage.output_tokens < MAX_PREDICT


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", BOTH)
def test_stop_sequence_is_named(claude, model, stream):
    # Over the OpenAI-compatible wire llama-server says only `finish_reason: "stop"`:
    # Glider matches the sequence itself. Over its /v1/messages it names the sequence
    # (though beside "end_turn", which Glider forwards as the backend's own bytes).
    kwargs = dict(model=model, max_tokens=MAX_PREDICT, stop_sequences=["e"], extra_body=GREEDY,
                  messages=[{"role": "user", "content": "Describe the sea in three sentences."}])
    if stream:
        with claude.messages.stream(**kwargs) as events:
            text = "".join(events.text_stream)
            reply = events.get_final_message()
    else:
        reply = claude.messages.create(**kwargs)
        text = "".join(block.text for block in reply.content if block.type == "text")
    assert "e" not in text
    assert reply.stop_sequence == "e", reply
    if model == VIA_OPENAI:
        assert reply.stop_reason == "stop_sequence", reply


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", BOTH)
def test_stop_sequence_ends_an_openai_reply(gpt, model, stream):
    kwargs = dict(model=model, max_tokens=MAX_PREDICT, stop=["e"], temperature=0,
                  messages=[{"role": "user", "content": "Describe the sea in three sentences."}])
    if stream:
        chunks = list(gpt.chat.completions.create(stream=True, **kwargs))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    else:
        reply = gpt.chat.completions.create(**kwargs)
        text = reply.choices[0].message.content or ""
        finish = [reply.choices[0].finish_reason]
    assert "e" not in text
    assert finish == ["stop"]


@pytest.mark.parametrize("model", BOTH)
def test_count_tokens(claude, model):
    short = claude.messages.count_tokens(model=model, messages=[{"role": "user", "content": "hi"}])
    long = claude.messages.count_tokens(model=model, messages=[{"role": "user", "content": "hi " * 200}],
                                        tools=[WEATHER])
    assert 0 < short.input_tokens < long.input_tokens


def llama_count(llama, chat):
    """llama-server's own count of a Chat Completions body: its template, its tokenizer."""
    status, applied = post_json(f"{llama}/apply-template", chat)
    assert status == 200, applied
    status, tokens = post_json(f"{llama}/tokenize", {"content": json.loads(applied)["prompt"], "add_special": True,
                                                     "parse_special": True})
    assert status == 200, tokens
    return len(json.loads(tokens)["tokens"])


def test_count_tokens_uses_the_model_s_own_tokenizer(claude, llama):
    system = "You answer questions about the weather."
    question = "Is it going to rain in Reykjavík tomorrow, and how cold will it be?"
    counted = claude.messages.count_tokens(model=VIA_OPENAI, system=system, tools=[WEATHER],
                                           messages=[{"role": "user", "content": question}]).input_tokens
    chat = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            "tools": [{"type": "function", "function": {"name": WEATHER["name"], "description": WEATHER["description"],
                                                        "parameters": WEATHER["input_schema"]}}]}
    assert counted == llama_count(llama, chat)
    # Over llama-server's own /v1/messages the Anthropic backend asks its count_tokens.
    status, own = post_json(f"{llama}/v1/messages/count_tokens", {
        "model": ALIAS, "system": system, "tools": [WEATHER], "messages": [{"role": "user", "content": question}]})
    assert status == 200, own
    assert claude.messages.count_tokens(model=VIA_ANTHROPIC, system=system, tools=[WEATHER],
                                        messages=[{"role": "user", "content": question}]).input_tokens == \
        json.loads(own)["input_tokens"]


def test_near_the_window_the_exact_count_decides_the_token_limit(claude):
    # Plain prose: Glider's byte ratio (3.5 bytes a token) puts it over the 4k window,
    # Gemma's tokenizer well inside it. Within 20 % of the window the exact count is
    # asked for, so the request is answered instead of refused (cloud fallback is off).
    text = "The sea was calm and the sky was clear over the harbour. " * 255
    assert len(text) / 3.5 > CONTEXT
    reply = claude.messages.create(model=VIA_OPENAI, max_tokens=8, messages=[{"role": "user", "content": text}])
    assert reply.type == "message" and 0 < reply.usage.input_tokens < CONTEXT, reply


# Over both wires: an Anthropic-wire backend marked `local: true` is fitted like any local one.
@pytest.mark.parametrize("model,backend", [(VIA_OPENAI, "llama-openai"), (VIA_ANTHROPIC, "llama-anthropic")])
def test_a_claude_code_sized_request_is_fitted_and_the_record_says_so(claude, glider, model, backend):
    # 20 tools (over the default budget of 12) and Claude Code's max_tokens: more than a
    # 270M model can use. The fit phase keeps the core set, caps the output, drops
    # context_management; the dashboard's record lists each change.
    names = ["Read", "Edit", "Write", "Bash", "Grep", "Glob"] + [f"Extra{i}" for i in range(14)]
    long_schema = {"type": "object", "properties": {
        f"option_{i}": {"type": "string", "description": "An option explained."} for i in range(2)}}
    tools = [{"name": n, "description": "A tool explained at length. " * 3, "input_schema": long_schema}
             for n in names]
    reply = claude.messages.create(
        model=model, max_tokens=32000, tools=tools,
        messages=[{"role": "user", "content": "Say hi."}],
        extra_body={"context_management": {"edits": [{"type": "clear_thinking_20251015"}]}, **GREEDY},
    )
    assert reply.type == "message" and reply.usage.output_tokens <= MAX_PREDICT
    fitted = record_fitted_with(glider, f"{backend}: max_tokens 32000 -> {MAX_PREDICT}")["fitted"]
    assert any(note.startswith(f"{backend}: tools 20 -> 6 ") for note in fitted), fitted
    assert f"{backend}: max_tokens 32000 -> {MAX_PREDICT}" in fitted, fitted
    assert f"{backend}: dropped context_management" in fitted, fitted
