/**
 * Hostile bodies over HTTP (issue 25, "The wire under attack"): the
 * simulated instances and the gateway answer deep nesting, a non-JSON
 * content type, out-of-range sampling parameters and their own bugs with
 * OpenAI's error JSON, write at most one line on stderr, and keep serving.
 */
import { assert, assertEquals, assertMatch, assertStringIncludes } from "@std/assert";
import { ErrorBody, MAX_JSON_DEPTH } from "../scenarios/wire/openai.ts";
import { VllmMetrics } from "../scenarios/wire/prometheus.ts";
import { scenario } from "./_scenarios.ts";
import { loopbackFleet, loopbackGateway } from "./_wire.ts";

const JSON_TYPE = { "content-type": "application/json" };

/** The lines `console.error` is given while `run` runs (nothing reaches stderr meanwhile). */
async function stderrLines(run: () => Promise<void>): Promise<string[]> {
  const lines: string[] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => lines.push(args.map(String).join(" "));
  try {
    await run();
  } finally {
    console.error = original;
  }
  return lines;
}

/** One simulated instance and a gateway in front of it, on loopback. */
async function withFleetAndGateway(test: (urls: { instance: string; gateway: string }) => Promise<void>) {
  const config = scenario({ policy: { name: "round_robin" }, instances: { count: 1 } });
  const fleet = await loopbackFleet(config, 50);
  const gateway = await loopbackGateway(config, fleet.urls, 50);
  try {
    await test({ instance: fleet.urls[0], gateway: gateway.url });
  } finally {
    await gateway.close(1000);
    await fleet.close(1000);
  }
}

/** A 400 in OpenAI's shape, read whole; returns its error. */
async function openAIError(response: Response, status: number) {
  assertEquals(response.status, status);
  assertMatch(response.headers.get("content-type") ?? "", /^application\/json/);
  const error = ErrorBody.parse(await response.json()).error;
  assertEquals(error.type, status === 500 ? "server_error" : "invalid_request_error");
  return error;
}

const deep = (n: number) => "[".repeat(n) + "]".repeat(n);

const DEEP_BODIES: [string, string, string, string][] = [
  ["user", "/v1/completions", `{"model":"sim","prompt":"hi","user":${deep(10_000)}}`, "user"],
  ["stop", "/v1/completions", `{"model":"sim","prompt":"hi","stop":${deep(10_000)}}`, "stop"],
  [
    "a chat message's content",
    "/v1/chat/completions",
    `{"model":"sim","messages":[{"role":"user","content":${deep(10_000)}}]}`,
    "messages[0].content",
  ],
  [
    "response_format, 100,000 objects (about 600 KB)",
    "/v1/completions",
    `{"model":"sim","prompt":"hi","response_format":${'{"a":'.repeat(100_000)}1${"}".repeat(100_000)}}`,
    "response_format.a.a.a",
  ],
];

Deno.test("deep JSON nesting is a 400 in OpenAI's shape from the instance and the gateway, with nothing on stderr", async () => {
  await withFleetAndGateway(async (urls) => {
    const lines = await stderrLines(async () => {
      for (const [server, url] of Object.entries(urls)) {
        for (const [name, path, body, param] of DEEP_BODIES) {
          const response = await fetch(`${url}${path}`, { method: "POST", headers: JSON_TYPE, body });
          const error = await openAIError(response, 400);
          assertEquals(error.param, param, `${server}, ${name}`);
          assertStringIncludes(error.message, `nested deeper than ${MAX_JSON_DEPTH} levels`);
        }
        // And it keeps serving.
        const ok = await fetch(`${url}/v1/completions`, {
          method: "POST",
          headers: JSON_TYPE,
          body: JSON.stringify({ model: "sim", prompt: "still here", max_tokens: 2 }),
        });
        assertEquals(ok.status, 200, server);
        await ok.body?.cancel();
      }
    });
    assertEquals(lines, []);
  });
});

Deno.test("the instance refuses a non-JSON content type with vLLM's 400, and serves application/json with a charset", async () => {
  await withFleetAndGateway(async ({ instance }) => {
    const body = JSON.stringify({ model: "sim", prompt: "hi", max_tokens: 2 });
    for (
      const contentType of ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded"]
    ) {
      const response = await fetch(`${instance}/v1/completions`, {
        method: "POST",
        headers: { "content-type": contentType },
        body,
      });
      const error = await openAIError(response, 400);
      assertEquals(error.code, "unsupported_media_type");
      assertStringIncludes(error.message, "Only 'application/json' is allowed");
      assertStringIncludes(error.message, JSON.stringify(contentType));
    }
    // fetch gives a string body `text/plain;charset=UTF-8` unless told otherwise.
    const untyped = await fetch(`${instance}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ model: "sim", messages: [{ role: "user", content: "hi" }] }),
    });
    assertEquals((await openAIError(untyped, 400)).code, "unsupported_media_type");
    const ok = await fetch(`${instance}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json; charset=utf-8" },
      body,
    });
    assertEquals(ok.status, 200);
    await ok.body?.cancel();
  });
});

Deno.test("temperature -3 is vLLM's 400 from the instance and the gateway", async () => {
  await withFleetAndGateway(async (urls) => {
    for (const url of Object.values(urls)) {
      const response = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: JSON_TYPE,
        body: JSON.stringify({ model: "sim", prompt: "hi", temperature: -3 }),
      });
      const error = await openAIError(response, 400);
      assertEquals([error.param, error.message], [
        "temperature",
        "temperature must be non-negative, got -3.",
      ]);
    }
  });
});

Deno.test("an unexpected exception in the instance's handler is a 500 in OpenAI's shape and one line on stderr", async () => {
  await withFleetAndGateway(async ({ instance }) => {
    const text = VllmMetrics.prototype.text;
    VllmMetrics.prototype.text = () => {
      throw new RangeError("Maximum call stack size exceeded");
    };
    let lines: string[];
    try {
      lines = await stderrLines(async () => {
        for (let i = 0; i < 3; i++) {
          const error = await openAIError(await fetch(`${instance}/metrics`), 500);
          assertEquals(error.code, "internal_error");
          assertStringIncludes(error.message, "RangeError: Maximum call stack size exceeded");
        }
      });
    } finally {
      VllmMetrics.prototype.text = text;
    }
    assertEquals(lines.length, 3, lines.join("\n"));
    for (const line of lines) {
      assertEquals(
        line,
        "sim instance 0: GET /metrics: The server had an error while processing your request: " +
          "RangeError: Maximum call stack size exceeded",
      );
      assert(!line.includes("\n"), "one line, no stack trace");
    }
    assertEquals((await fetch(`${instance}/health`)).status, 200);
  });
});
