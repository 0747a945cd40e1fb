"""Drives sidetrack with Google's `google-genai` SDK pointed at it unchanged (only the base URL);
prints one JSON object for the Rust test (crates/gateway/tests/gemini.rs).

usage: gemini_genai.py cases BASE_URL API_KEY | usage_matrix BASE_URL API_KEY MODELS
`cases`: `plain` (generate_content on a Gemini target), `to_anthropic` (a Gemini 503, served by
Anthropic), `to_openai_stream` (generate_content_stream, a Gemini 503, served by OpenAI), `tool`
(a function declaration answered with an OpenAI tool call), `safety` (safetySettings with only an
OpenAI fallback: the Gemini 503 comes back as the SDK's error). Retries are off so the test counts
upstream hits exactly. `usage_matrix` takes MODELS comma-separated and reports, per model, the
usage of `generate_content` and every `usage_metadata` of `generate_content_stream` with the finish
reason of its chunk: `{"MODEL": {"complete": {...}, "stream": [{...}, ...]}}`.
"""
import json
import sys

from google import genai
from google.genai import errors, types


def usage(u) -> list:
    return [u.prompt_token_count, u.candidates_token_count, u.total_token_count]


def counts(u) -> dict:
    return {"input": u.prompt_token_count, "output": u.candidates_token_count,
            "total": u.total_token_count}


def usage_matrix(client, models: list) -> dict:
    out = {}
    for model in models:
        done = client.models.generate_content(model=model, contents="hi")
        chunks = []
        for chunk in client.models.generate_content_stream(model=model, contents="hi"):
            if chunk.usage_metadata is not None:
                finish = chunk.candidates[0].finish_reason if chunk.candidates else None
                chunks.append(dict(counts(chunk.usage_metadata),
                                   finish=finish.value if finish is not None else None))
        out[model] = {"complete": counts(done.usage_metadata), "stream": chunks}
    return out


def main() -> None:
    mode, base, key = sys.argv[1], sys.argv[2], sys.argv[3]
    client = genai.Client(
        api_key=key,
        http_options=types.HttpOptions(
            base_url=base, api_version="v1beta", retry_options=types.HttpRetryOptions(attempts=1)
        ),
    )
    if mode == "usage_matrix":
        print(json.dumps(usage_matrix(client, sys.argv[4].split(","))))
        return
    out = {}

    r = client.models.generate_content(model="gemini-up", contents="hi")
    out["plain"] = {"text": r.text, "finish": r.candidates[0].finish_reason.value,
                    "usage": usage(r.usage_metadata)}

    r = client.models.generate_content(model="to-anthropic", contents="hi")
    out["to_anthropic"] = {"text": r.text, "usage": usage(r.usage_metadata)}

    text, finish, last_usage = "", None, None
    for chunk in client.models.generate_content_stream(model="to-openai", contents="hi"):
        text += chunk.text or ""
        if chunk.candidates and chunk.candidates[0].finish_reason is not None:
            finish = chunk.candidates[0].finish_reason.value
        if chunk.usage_metadata is not None:
            last_usage = usage(chunk.usage_metadata)
    out["to_openai_stream"] = {"text": text, "finish": finish, "usage": last_usage}

    weather = types.FunctionDeclaration(
        name="get_weather",
        description="Current weather for a city",
        parameters=types.Schema(
            type=types.Type.OBJECT,
            properties={"city": types.Schema(type=types.Type.STRING)},
            required=["city"],
        ),
    )
    r = client.models.generate_content(
        model="gpt-tool",
        contents="Weather in Rome?",
        config=types.GenerateContentConfig(
            tools=[types.Tool(function_declarations=[weather])],
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        ),
    )
    call = r.function_calls[0]
    out["tool"] = {"name": call.name, "args": call.args}

    try:
        client.models.generate_content(
            model="to-openai",
            contents="hi",
            config=types.GenerateContentConfig(
                safety_settings=[types.SafetySetting(
                    category=types.HarmCategory.HARM_CATEGORY_HARASSMENT,
                    threshold=types.HarmBlockThreshold.BLOCK_LOW_AND_ABOVE,
                )],
            ),
        )
        out["safety"] = {"code": 200}
    except errors.APIError as e:
        out["safety"] = {"code": e.code, "status": e.status}

    print(json.dumps(out))


if __name__ == "__main__":
    main()
