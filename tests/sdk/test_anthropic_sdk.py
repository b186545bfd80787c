"""The official `anthropic` Python SDK as a strict client of Glider's Messages door,
against every backend dialect: streams, tools, count_tokens and typed errors."""

import anthropic
import pytest

BACKENDS = ["m-ollama", "m-vllm", "m-openai", "m-anthropic"]
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
CALL = 'weather in Paris? [[call:get_weather {"city":"Paris"}]]'


@pytest.fixture
def client(stack):
    base, _ = stack
    return anthropic.Anthropic(base_url=base, api_key="sk-ant-test", max_retries=0, timeout=30)


@pytest.mark.parametrize("model", BACKENDS)
def test_messages_non_stream(client, model):
    reply = client.messages.create(
        model=model, max_tokens=100, system="be brief", messages=[{"role": "user", "content": "hello claude sdk"}]
    )
    assert reply.type == "message" and reply.role == "assistant"
    assert "echo: hello claude sdk" in reply.content[-1].text
    assert reply.stop_reason == "end_turn"
    assert reply.usage.output_tokens > 0


@pytest.mark.parametrize("model", BACKENDS)
def test_messages_stream(client, model):
    with client.messages.stream(model=model, max_tokens=100, messages=[{"role": "user", "content": "hello stream"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert "echo: hello stream" in text
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


@pytest.mark.parametrize("model", BACKENDS)
@pytest.mark.parametrize("stream", [False, True])
def test_tool_round_trip(client, model, stream):
    messages = [{"role": "user", "content": CALL}]
    if stream:
        with client.messages.stream(model=model, max_tokens=200, tools=[WEATHER], messages=messages) as s:
            first = s.get_final_message()
    else:
        first = client.messages.create(model=model, max_tokens=200, tools=[WEATHER], messages=messages)
    assert first.stop_reason == "tool_use"
    calls = [block for block in first.content if block.type == "tool_use"]
    assert len(calls) == 1 and calls[0].name == "get_weather" and calls[0].input == {"city": "Paris"}
    messages += [
        {"role": "assistant", "content": [block.model_dump(exclude_none=True) for block in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id, "content": "18C and sunny"}]},
    ]
    second = client.messages.create(model=model, max_tokens=200, tools=[WEATHER], messages=messages)
    assert "tool result: 18C and sunny" in second.content[-1].text


@pytest.mark.parametrize("model", ["m-anthropic", "m-ollama"])
def test_count_tokens(client, model):
    count = client.messages.count_tokens(model=model, messages=[{"role": "user", "content": "count these words please"}])
    assert count.input_tokens > 0


def test_typed_errors(client):
    with pytest.raises(anthropic.NotFoundError) as err:
        client.messages.create(model="no-such-model", max_tokens=10, messages=[{"role": "user", "content": "x"}])
    assert "no-such-model" in str(err.value)
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="m-ollama", max_tokens=10, messages=[{"role": "user", "content": 42}])
    assert "content" in str(err.value)
