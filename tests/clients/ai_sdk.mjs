// The Vercel AI SDK (`ai` with `@ai-sdk/openai` chat and responses, and `@ai-sdk/anthropic`) against
// sidetrack: every case of the real-client matrix in one process. Usage: node ai_sdk.mjs GATEWAY_URL.
// Prints one JSON document, {"cases": [{case, kind, ...}]}; crates/gateway/tests/real_clients.rs
// asserts it row by row. A case that throws is reported with `error` and the others still run.
import { generateText, streamText, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createAnthropic } from "@ai-sdk/anthropic";
import { z } from "zod";

// Warnings go to stderr: stdout is the one JSON document.
globalThis.AI_SDK_LOG_WARNINGS = ({ warnings }) => console.error("AI SDK warnings:", JSON.stringify(warnings));

const base = process.argv[2];
const openai = createOpenAI({ baseURL: `${base}/v1`, apiKey: "caller-key" });
const anthropic = createAnthropic({ baseURL: `${base}/v1`, apiKey: "caller-key" });
const KINDS = ["openai", "anthropic", "bedrock"];
const prompt = "What is the weather in Paris?";
const tools = {
  get_weather: tool({ description: "The weather in a city", inputSchema: z.object({ city: z.string(), unit: z.string().optional() }) }),
};

const providers = {
  "openai-chat": (model) => openai.chat(model),
  "openai-responses": (model) => openai.responses(model),
  anthropic: (model) => anthropic(model),
};

function row(text, finishReason, toolCalls, usage, response) {
  const call = toolCalls[0];
  return {
    text,
    finish: finishReason,
    tool: call ? { name: call.toolName, args: call.input } : null,
    usage: { input: usage.inputTokens, output: usage.outputTokens },
    served_by: response.headers?.["x-sidetrack-served-by"] ?? null,
  };
}

const modes = {
  async complete(model) {
    const r = await generateText({ model, prompt, maxRetries: 0, maxOutputTokens: 256 });
    return row(r.text, r.finishReason, r.toolCalls, r.usage, r.response);
  },
  async stream(model) {
    const r = streamText({ model, prompt, maxRetries: 0, maxOutputTokens: 256, onError: () => {} });
    return row(await r.text, await r.finishReason, await r.toolCalls, await r.usage, await r.response);
  },
  async tool(model) {
    const r = await generateText({ model, prompt, tools, maxRetries: 0, maxOutputTokens: 256 });
    return row(r.text, r.finishReason, r.toolCalls, r.usage, r.response);
  },
  async stream_tool(model) {
    const r = streamText({ model, prompt, tools, maxRetries: 0, maxOutputTokens: 256, onError: () => {} });
    return row(await r.text, await r.finishReason, await r.toolCalls, await r.usage, await r.response);
  },
};

const cases = [];
for (const [provider, make] of Object.entries(providers)) {
  for (const kind of KINDS) {
    for (const [mode, run] of Object.entries(modes)) {
      const name = `ai-sdk-${provider}/${mode}/${kind}`;
      const model = `via-${kind}-ai-sdk-${provider}-${mode}`;
      try {
        cases.push({ case: name, kind, model, ...(await run(make(model))) });
      } catch (e) {
        cases.push({ case: name, kind, model, error: `${e?.constructor?.name}: ${e?.message}` });
      }
    }
  }
}
process.stdout.write(JSON.stringify({ client: "ai", cases }) + "\n");
