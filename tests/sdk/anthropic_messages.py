"""Drives sidetrack with the official `anthropic` SDK; prints one JSON object for the Rust test.

usage: anthropic_messages.py message|stream|usage_matrix BASE_URL MODEL AUTH_STYLE KEY
`usage_matrix` takes MODEL as a comma-separated list and reports, per model, the usage of a
non-streamed message and of a stream: the SDK's final message usage, plus the `message_start` and
`message_delta` usage as they arrived: `{"MODEL": {"complete": {...}, "stream": {...}}}`.
AUTH_STYLE: bearer (api_key=..., which SDK 2.x sends as Authorization: Bearer) or
            x-api-key (the header older SDKs send, set explicitly).
Retries are off so error tests see exactly one call.
"""
import json
import sys

import anthropic


def client(base: str, style: str, key: str) -> anthropic.Anthropic:
    if style == "bearer":
        return anthropic.Anthropic(base_url=base, api_key=key, max_retries=0)
    return anthropic.Anthropic(
        base_url=base, api_key=None, auth_token=None, default_headers={"x-api-key": key}, max_retries=0
    )


def usage_matrix(c: anthropic.Anthropic, models: list, messages: list) -> dict:
    out = {}
    for model in models:
        msg = c.messages.create(model=model, max_tokens=64, messages=messages)
        starts, deltas = [], []
        with c.messages.stream(model=model, max_tokens=64, messages=messages) as stream:
            for event in stream:
                if event.type == "message_start":
                    u = event.message.usage
                    starts.append({"input": u.input_tokens, "output": u.output_tokens})
                elif event.type == "message_delta":
                    u = event.usage
                    deltas.append({"input": u.input_tokens, "output": u.output_tokens})
            final = stream.get_final_message().usage
        out[model] = {
            "complete": {"input": msg.usage.input_tokens, "output": msg.usage.output_tokens},
            "stream": {"final": {"input": final.input_tokens, "output": final.output_tokens},
                       "message_start": starts, "message_delta": deltas},
        }
    return out


def main() -> None:
    mode, base, model, style, key = sys.argv[1:6]
    c = client(base, style, key)
    messages = [{"role": "user", "content": "hi"}]
    if mode == "usage_matrix":
        print(json.dumps(usage_matrix(c, model.split(","), messages)))
        return
    out = {"text": "", "error": None, "events": 0}
    try:
        if mode == "message":
            msg = c.messages.create(model=model, max_tokens=64, messages=messages)
            out["text"] = "".join(b.text for b in msg.content if b.type == "text")
            out["stop_reason"] = msg.stop_reason
            out["usage"] = {"input": msg.usage.input_tokens, "output": msg.usage.output_tokens}
        elif mode == "stream":
            parts = []
            with c.messages.stream(model=model, max_tokens=64, messages=messages) as stream:
                for event in stream:
                    out["events"] += 1
                    if event.type == "content_block_delta" and event.delta.type == "text_delta":
                        parts.append(event.delta.text)
                    out["text"] = "".join(parts)
                final = stream.get_final_message()
                out["stop_reason"] = final.stop_reason
        else:
            raise SystemExit(f"unknown mode {mode}")
    except anthropic.APIStatusError as e:
        out["error"] = {"class": type(e).__name__, "status": e.status_code, "type": getattr(e, "type", None), "message": str(e)}
    except anthropic.APIError as e:
        out["error"] = {"class": type(e).__name__, "status": None, "message": str(e)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
