"""Sends Bedrock requests that carry a guardrail through sidetrack with the official `boto3` SDK
(over TLS with a bearer token, as bedrock_runtime.py); prints one JSON object.

usage: bedrock_guardrail.py converse|invoke ENDPOINT CA_CERT MODEL
`converse` passes `guardrailConfig={"guardrailIdentifier": "gr-test", "guardrailVersion": "1",
"trace": "enabled"}`; `invoke` passes `guardrailIdentifier="gr-test", guardrailVersion="1",
trace="ENABLED"` (boto3 sends them as X-Amzn-Bedrock-Guardrail* / X-Amzn-Bedrock-Trace headers).
Output: `{"text": ..., "error": null | {"code", "status"}}`. Retries are off: one call each.
"""
import json
import sys

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError


def main() -> None:
    mode, endpoint, ca, model = sys.argv[1:5]
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=endpoint,
        verify=ca,
        config=Config(retries={"total_max_attempts": 1}),
    )
    out = {"text": "", "error": None}
    try:
        if mode == "converse":
            resp = client.converse(
                modelId=model,
                messages=[{"role": "user", "content": [{"text": "hi"}]}],
                guardrailConfig={"guardrailIdentifier": "gr-test", "guardrailVersion": "1", "trace": "enabled"},
            )
            out["text"] = "".join(b.get("text", "") for b in resp["output"]["message"]["content"])
        elif mode == "invoke":
            body = json.dumps(
                {"anthropic_version": "bedrock-2023-05-31", "max_tokens": 64,
                 "messages": [{"role": "user", "content": "hi"}]}
            )
            resp = client.invoke_model(
                modelId=model, body=body, guardrailIdentifier="gr-test", guardrailVersion="1", trace="ENABLED"
            )
            done = json.loads(resp["body"].read())
            out["text"] = "".join(b.get("text", "") for b in done["content"])
        else:
            raise SystemExit(f"unknown mode {mode}")
    except ClientError as e:
        out["error"] = {
            "code": e.response["Error"]["Code"],
            "status": e.response["ResponseMetadata"]["HTTPStatusCode"],
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
