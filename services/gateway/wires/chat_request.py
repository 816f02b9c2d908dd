"""A Chat Completions request body, checked and turned into the llm service's GenerateRequest (docs/openai.md).

Every parameter OpenAI documents is either honoured, ignored because it cannot change Sotto's answer (`user`,
`metadata`, ...), or refused with a message naming what is accepted; an unknown one is refused, as OpenAI does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.common.audio import read_wav
from services.common.config import GatewayConfig
from services.gateway.wires.openai_common import OpenAIError, decode_base64, image_from_url, token_count
from sotto.v1 import common_pb2, llm_pb2

# Accepted and ignored: they label, store or route a request, which changes nothing here.
_IGNORED = {"user", "metadata", "store", "service_tier", "parallel_tool_calls", "reasoning_effort",
            "prompt_cache_key", "safety_identifier", "verbosity", "tool_choice", "function_call"}
# Accepted at their neutral value only: anything else would need a feature the llm service does not have.
_NEUTRAL = {"frequency_penalty": (None, 0, 0.0), "presence_penalty": (None, 0, 0.0), "logprobs": (None, False),
            "top_logprobs": (None, 0), "tools": (None, []), "functions": (None, []), "logit_bias": (None, {}),
            "n": (None, 1), "audio": (None,), "prediction": (None,), "web_search_options": (None,),
            "modalities": (None, ["text"])}
_HONOURED = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "seed", "stop",
             "stream", "stream_options", "response_format"}
MAX_STOP = 4


@dataclass(frozen=True)
class ChatRequest:
    generate: llm_pb2.GenerateRequest
    model: str
    stream: bool
    include_usage: bool
    stop: tuple[str, ...]


def parse_chat_request(body: Any, gw: GatewayConfig) -> ChatRequest:
    """The request checked whole; images are decoded here, so callers run it in a worker thread."""
    if not isinstance(body, dict):
        raise OpenAIError("the request body must be a JSON object")
    unknown = sorted(set(body) - _IGNORED - set(_NEUTRAL) - _HONOURED)
    if unknown:
        raise OpenAIError(f"Unrecognized request argument supplied: {', '.join(unknown)}", param=unknown[0])
    for name, neutral in _NEUTRAL.items():
        if name in body and body[name] not in neutral:
            shown = " or ".join("null" if v is None else repr(v) for v in neutral)
            raise OpenAIError(f"'{name}' is not supported by this server; accepted: {shown}", param=name,
                              code="unsupported_parameter")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise OpenAIError("'model' is required (any name: the gateway serves one model, see GET /v1/models)",
                          param="model")
    fmt = body.get("response_format")
    if fmt is not None and fmt != {"type": "text"}:
        raise OpenAIError("'response_format' accepts only {\"type\": \"text\"}", param="response_format",
                          code="unsupported_parameter")
    stream = _typed(body, "stream", bool, False)
    options = body.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict) or set(options) - {"include_usage"}):
        raise OpenAIError("'stream_options' is {\"include_usage\": bool}, and only with \"stream\": true",
                          param="stream_options")
    if not isinstance((options or {}).get("include_usage", False), bool):
        raise OpenAIError("'stream_options.include_usage' must be a boolean", param="stream_options.include_usage")
    _within_budget(body.get("messages"), gw)
    system, history, user = _messages(body.get("messages"), gw)
    generate = llm_pb2.GenerateRequest(system_prompt=system, history=history, user=user, sampling=_sampling(body))
    return ChatRequest(generate=generate, model=model, stream=stream,
                       include_usage=bool((options or {}).get("include_usage")), stop=_stop(body.get("stop")))


def _typed(body: dict, name: str, typ: type | tuple[type, ...], default: Any = None) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) and typ is not bool or not isinstance(value, typ):
        expected = {bool: "a boolean", int: "an integer"}.get(typ, "a number")
        raise OpenAIError(f"'{name}' must be {expected}", param=name)
    return value


def _sampling(body: dict) -> llm_pb2.Sampling:
    sampling = llm_pb2.Sampling()
    for name in ("max_completion_tokens", "max_tokens"):  # the newer name wins when both are given
        if body.get(name) is not None:
            sampling.max_new_tokens = token_count(body[name], name)
            break
    temperature = _typed(body, "temperature", (int, float))
    if temperature is not None:
        if not 0 <= temperature <= 2:
            raise OpenAIError("'temperature' must be between 0 and 2", param="temperature")
        sampling.temperature = temperature
    top_p = _typed(body, "top_p", (int, float))
    if top_p is not None:
        if not 0 < top_p <= 1:
            raise OpenAIError("'top_p' must be in (0, 1]", param="top_p")
        sampling.top_p = top_p
    seed = _typed(body, "seed", int)
    if seed is not None:
        if seed < 0:
            raise OpenAIError("'seed' must be >= 0", param="seed")
        sampling.seed = seed
    return sampling


def _stop(stop: Any) -> tuple[str, ...]:
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not 0 < len(stops) <= MAX_STOP or \
            not all(isinstance(s, str) and s for s in stops):
        raise OpenAIError(f"'stop' must be a non-empty string or a list of 1 to {MAX_STOP} of them", param="stop")
    return tuple(stops)


def _within_budget(messages: Any, gw: GatewayConfig) -> None:
    """Refuse what cannot be worth any model work, by counting alone: messages, parts and characters of text, in
    one pass that stops at the first limit crossed (a 10,000-message request costs no more than its decoding)."""
    if not isinstance(messages, list):
        return  # _messages names the mistake
    if len(messages) > gw.max_messages:
        raise OpenAIError(f"'messages' holds {len(messages)} messages; at most {gw.max_messages} are accepted "
                          "(SOTTO_GATEWAY_MAX_MESSAGES)", param="messages", code="context_length_exceeded")
    parts = chars = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        pieces = content if isinstance(content, list) else [content]
        parts += len(pieces)
        chars += sum(len(p) if isinstance(p, str) else len(p.get("text") or "") if isinstance(p, dict)
                     and isinstance(p.get("text"), str) else 0 for p in pieces)
        if parts > gw.max_messages:
            raise OpenAIError(f"'messages' holds more than {gw.max_messages} content parts "
                              "(SOTTO_GATEWAY_MAX_MESSAGES)", param="messages", code="context_length_exceeded")
        if chars > gw.max_prompt_chars:
            raise OpenAIError(f"the messages hold more than {gw.max_prompt_chars} characters of text, more than "
                              "this model can take (SOTTO_GATEWAY_MAX_PROMPT_CHARS): send a shorter request",
                              param="messages", code="context_length_exceeded")


def _messages(messages: Any, gw: GatewayConfig) -> tuple[str, list[common_pb2.Turn], llm_pb2.UserContent]:
    """System text, the earlier turns as text (consecutive ones of a role merged), and the last user message."""
    if not isinstance(messages, list) or not messages:
        raise OpenAIError("'messages' must be a non-empty list", param="messages")
    system: list[str] = []
    turns: list[tuple[int, int, str]] = []  # (role, index in messages, text)
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise OpenAIError(f"'{param}' must be an object", param=param)
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text_only(message.get("content"), f"{param}.content"))
        elif role == "assistant":
            if message.get("tool_calls") or message.get("function_call"):
                raise OpenAIError(f"'{param}': tool calls are not supported", param=f"{param}.tool_calls",
                                  code="unsupported_parameter")
            turns.append((common_pb2.Turn.ROLE_ASSISTANT, i, _text_only(message.get("content") or "",
                                                                        f"{param}.content")))
        elif role == "user":
            turns.append((common_pb2.Turn.ROLE_USER, i, ""))  # the text comes from _user_content below
        else:
            raise OpenAIError(f"'{param}.role' is {role!r}; accepted: system, developer, user, assistant",
                              param=f"{param}.role")
    last = len(messages) - 1
    if messages[last].get("role") != "user":
        raise OpenAIError("the last message must be the user's", param=f"messages[{last}].role")
    user = _user_content(messages[last].get("content"), f"messages[{last}].content", gw)
    history: list[common_pb2.Turn] = []
    for role, i, text in turns[:-1]:
        if role == common_pb2.Turn.ROLE_USER:
            # earlier images and audio are not sent again: the history is text, as on /ws
            text = _user_content(messages[i].get("content"), f"messages[{i}].content", gw).text
        if history and history[-1].role == role:
            history[-1].text = f"{history[-1].text}\n{text}".strip()
        else:
            history.append(common_pb2.Turn(role=role, text=text))
    return "\n\n".join(system), history, user


def _text_only(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "\n".join(p["text"] for p in content)
    raise OpenAIError(f"'{param}' must be a string or a list of text parts", param=param)


def _user_content(content: Any, param: str, gw: GatewayConfig) -> llm_pb2.UserContent:
    user = llm_pb2.UserContent()
    if isinstance(content, str):
        user.text = content
        return user
    if not isinstance(content, list) or not content:
        raise OpenAIError(f"'{param}' must be a string or a non-empty list of parts", param=param)
    texts: list[str] = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "image_url" and isinstance(part.get("image_url"), dict):
            if len(user.images) == gw.max_images:
                raise OpenAIError(f"'{param}' holds more than {gw.max_images} images (SOTTO_GATEWAY_MAX_IMAGES)",
                                  param=where)
            data, mime = image_from_url(part["image_url"].get("url"), gw.max_jpeg_bytes, gw.max_image_pixels,
                                        f"{where}.image_url.url")
            user.images.append(llm_pb2.Image(data=data, mime_type=mime))
        elif kind == "input_audio" and isinstance(part.get("input_audio"), dict):
            user.audio_wav = _wav(part["input_audio"], f"{where}.input_audio", bool(user.audio_wav))
        else:
            raise OpenAIError(f"'{where}' must be a text, image_url or input_audio part", param=where)
    user.text = "\n".join(texts)
    return user


def _wav(audio: dict, param: str, have_audio: bool) -> bytes:
    if audio.get("format") != "wav":
        raise OpenAIError(f"'{param}.format' must be \"wav\" (PCM16 mono)", param=f"{param}.format")
    if have_audio:
        raise OpenAIError(f"'{param}': one audio part per message", param=param)
    data = decode_base64(audio.get("data"), f"{param}.data")
    try:
        read_wav(data)
    except ValueError as exc:
        raise OpenAIError(f"'{param}.data': {exc}", param=f"{param}.data") from None
    return data
