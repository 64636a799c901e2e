// The official openai npm package against semisched serve: one JSON call, one stream.
// Usage: node check.mjs BASE_URL KEY; prints one JSON line of what it saw.
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const messages = [{ role: "user", content: "hi" }];
const reply = await client.chat.completions.create({ model: "mock-1", messages, max_tokens: 5 });
const stream = await client.chat.completions.create({
  model: "mock-1", messages, max_tokens: 5, stream: true, stream_options: { include_usage: true },
});
let chunks = 0;
let text = "";
let usage = null;
for await (const chunk of stream) {
  if (chunk.choices.length) { chunks += 1; text += chunk.choices[0].delta.content ?? ""; }
  if (chunk.usage) usage = chunk.usage;
}
let unauthorized = null;
try {
  await new OpenAI({ baseURL, apiKey: "sk-wrong", maxRetries: 0 }).models.list();
} catch (err) {
  unauthorized = { status: err.status, code: err.code };
}
console.log(JSON.stringify({
  content: reply.choices[0].message.content, completion_tokens: reply.usage.completion_tokens,
  chunks, text, stream_completion_tokens: usage?.completion_tokens ?? null, unauthorized,
}));
