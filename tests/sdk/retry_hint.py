"""SPEC §6.5 with the official SDKs at their default retries (max_retries=2): each call against a
route whose breaker is open must reach the gateway exactly once, and the error must carry the
retry hint. Prints one JSON object for the Rust test.

usage: retry_hint.py openai|anthropic BASE_URL MODEL CALLS
Reports, per call, the status, `x-should-retry`, `retry-after`, `retry-after-ms` and the SDK's
exception class.
"""
import json
import sys

import anthropic
import openai


def main() -> None:
    sdk, base, model, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    messages = [{"role": "user", "content": "hi"}]
    out = []
    for _ in range(calls):
        try:
            if sdk == "openai":
                client = openai.OpenAI(base_url=base + "/v1", api_key="sk-test")
                client.chat.completions.create(model=model, messages=messages)
            else:
                client = anthropic.Anthropic(base_url=base, api_key="sk-test")
                client.messages.create(model=model, max_tokens=16, messages=messages)
            out.append({"ok": True})
        except (openai.APIStatusError, anthropic.APIStatusError) as e:
            h = e.response.headers
            out.append({
                "class": type(e).__name__,
                "status": e.status_code,
                "should_retry": h.get("x-should-retry"),
                "retry_after": h.get("retry-after"),
                "retry_after_ms": h.get("retry-after-ms"),
            })
    print(json.dumps(out))


if __name__ == "__main__":
    main()
