"""Drives sidetrack's Bedrock endpoints with the official `boto3` SDK over TLS with a bearer
token (AWS_BEARER_TOKEN_BEDROCK, which boto3 >= 1.44 only sends over HTTPS); prints one JSON object.

usage: bedrock_runtime.py invoke|invoke_stream|converse|converse_stream|converse_usage|invoke_usage
       ENDPOINT CA_CERT MODEL
`converse_usage` and `invoke_usage` take MODEL as a comma-separated list and report, per model, the
usage of a non-streamed call and of a stream: ConverseStream's `metadata` usage; for
InvokeModelWithResponseStream the `message_start`/`message_delta` usage and the last chunk's
`amazon-bedrock-invocationMetrics`: `{"MODEL": {"complete": {...}, "stream": {...}}}`.
The caller sets AWS_BEARER_TOKEN_BEDROCK. Retries are off so error tests see one call.
"""
import json
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError, EventStreamError


def converse_usage(client, models: list, messages: list) -> dict:
    out = {}
    for model in models:
        done = client.converse(modelId=model, messages=messages)["usage"]
        metadata = []
        for event in client.converse_stream(modelId=model, messages=messages)["stream"]:
            if "metadata" in event:
                metadata.append(event["metadata"].get("usage"))
        out[model] = {"complete": done, "stream": metadata}
    return out


def invoke_usage(client, models: list, body: str) -> dict:
    out = {}
    for model in models:
        resp = client.invoke_model(modelId=model, body=body)
        done = json.loads(resp["body"].read())
        headers = resp["ResponseMetadata"]["HTTPHeaders"]
        starts, deltas, metrics, last = [], [], [], None
        for event in client.invoke_model_with_response_stream(modelId=model, body=body)["body"]:
            inner = json.loads(event["chunk"]["bytes"])
            if inner["type"] == "message_start":
                starts.append(inner["message"]["usage"])
            elif inner["type"] == "message_delta":
                deltas.append(inner.get("usage"))
            if "amazon-bedrock-invocationMetrics" in inner:
                metrics.append(inner["amazon-bedrock-invocationMetrics"])
            last = inner["type"]
        out[model] = {
            "complete": done["usage"],
            "headers": {k: int(headers[k]) for k in
                        ("x-amzn-bedrock-input-token-count", "x-amzn-bedrock-output-token-count")
                        if k in headers},
            "stream": {"message_start": starts, "message_delta": deltas, "invocation_metrics": metrics,
                       "last": last},
        }
    return out


def main() -> None:
    mode, endpoint, ca, model = sys.argv[1:5]
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint,
        verify=ca,
        config=Config(retries={"total_max_attempts": 1}),
    )
    out = {"text": "", "error": None, "events": []}
    anthropic_body = json.dumps(
        {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    )
    messages = [{"role": "user", "content": [{"text": "hi"}]}]
    if mode == "converse_usage":
        print(json.dumps(converse_usage(client, model.split(","), messages)))
        return
    if mode == "invoke_usage":
        print(json.dumps(invoke_usage(client, model.split(","), anthropic_body)))
        return
    try:
        if mode == "invoke":
            resp = client.invoke_model(modelId=model, body=anthropic_body)
            body = json.loads(resp["body"].read())
            out["text"] = "".join(b.get("text", "") for b in body["content"])
        elif mode == "invoke_stream":
            resp = client.invoke_model_with_response_stream(modelId=model, body=anthropic_body)
            for event in resp["body"]:
                inner = json.loads(event["chunk"]["bytes"])
                out["events"].append(inner["type"])
                if inner["type"] == "content_block_delta":
                    out["text"] += inner["delta"].get("text", "")
        elif mode == "converse":
            resp = client.converse(modelId=model, messages=messages)
            out["text"] = "".join(b.get("text", "") for b in resp["output"]["message"]["content"])
            out["usage"] = resp["usage"]
        elif mode == "converse_stream":
            resp = client.converse_stream(modelId=model, messages=messages)
            for event in resp["stream"]:
                name = next(iter(event))
                out["events"].append(name)
                if name == "contentBlockDelta":
                    out["text"] += event[name]["delta"].get("text", "")
        else:
            raise SystemExit(f"unknown mode {mode}")
    except EventStreamError as e:
        out["error"] = {"class": "EventStreamError", "code": e.response["Error"]["Code"]}
    except ClientError as e:
        code = e.response["Error"]["Code"]
        modeled = getattr(client.exceptions, code, None)
        out["error"] = {
            "class": type(e).__name__,
            "code": code,
            "modeled": modeled is not None and isinstance(e, modeled),
            "status": e.response["ResponseMetadata"]["HTTPStatusCode"],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
