"""The official `openai` Python SDK as a strict client of Glider's OpenAI doors
(Chat Completions and Responses), against every backend dialect."""

import json

import openai
import pytest

BACKENDS = ["m-ollama", "m-vllm", "m-openai", "m-anthropic"]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = 'weather in Paris? [[call:get_weather {"city":"Paris"}]]'


@pytest.fixture
def client(stack):
    base, _ = stack
    return openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0, timeout=30)


@pytest.mark.parametrize("model", BACKENDS)
def test_chat_non_stream(client, model):
    reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hello sdk"}], max_tokens=100)
    assert "echo: hello sdk" in reply.choices[0].message.content
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens > 0


@pytest.mark.parametrize("model", BACKENDS)
def test_chat_stream(client, model):
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "hello stream"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert "echo: hello stream" in text
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens > 0


@pytest.mark.parametrize("model", BACKENDS)
@pytest.mark.parametrize("stream", [False, True])
def test_chat_tool_round_trip(client, model, stream):
    messages = [{"role": "user", "content": CALL}]
    if stream:
        calls = {}
        for chunk in client.chat.completions.create(model=model, messages=messages, tools=[WEATHER], stream=True):
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    entry = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                    entry["id"] = call.id or entry["id"]
                    if call.function:
                        entry["name"] = call.function.name or entry["name"]
                        entry["arguments"] += call.function.arguments or ""
        assert len(calls) == 1
        call = calls[0]
        call_id, name, arguments = call["id"], call["name"], call["arguments"]
    else:
        reply = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER])
        assert reply.choices[0].finish_reason == "tool_calls"
        call = reply.choices[0].message.tool_calls[0]
        call_id, name, arguments = call.id, call.function.name, call.function.arguments
    assert name == "get_weather"
    assert json.loads(arguments) == {"city": "Paris"}
    messages += [
        {"role": "assistant", "content": None, "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "18C and sunny"},
    ]
    reply = client.chat.completions.create(model=model, messages=messages, tools=[WEATHER])
    assert "tool result: 18C and sunny" in reply.choices[0].message.content


@pytest.mark.parametrize("model", BACKENDS)
def test_responses_non_stream(client, model):
    reply = client.responses.create(model=model, input="hello responses", instructions="be brief")
    assert "echo: hello responses" in reply.output_text
    assert reply.status == "completed"
    assert reply.usage.output_tokens > 0


@pytest.mark.parametrize("model", BACKENDS)
def test_responses_stream(client, model):
    deltas, completed = "", None
    for event in client.responses.create(model=model, input="hello streamed responses", stream=True):
        if event.type == "response.output_text.delta":
            deltas += event.delta
        if event.type == "response.completed":
            completed = event.response
    assert "echo: hello streamed responses" in deltas
    assert completed is not None and completed.output_text == deltas


@pytest.mark.parametrize("model", BACKENDS)
def test_responses_tool_round_trip(client, model):
    tools = [{"type": "function", "name": "get_weather", "description": "Weather", "parameters": WEATHER["function"]["parameters"]}]
    first = client.responses.create(model=model, input=CALL, tools=tools)
    calls = [item for item in first.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    follow = [
        {"role": "user", "content": CALL},
        {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather", "arguments": calls[0].arguments},
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "18C and sunny"},
    ]
    second = client.responses.create(model=model, input=follow, tools=tools)
    assert "tool result: 18C and sunny" in second.output_text


def test_typed_errors(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert "no-such-model" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="m-ollama", messages="not a list")
    assert "messages" in err.value.message
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="x")


def test_models_list(client):
    ids = {model.id for model in client.models.list()}
    assert set(BACKENDS) <= ids
