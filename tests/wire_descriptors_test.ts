/**
 * Descriptor limits, in child processes run under `prlimit --nofile=N`
 * (util-linux): a server at the limit stops accepting and recovers, never
 * exits. Skipped, with one line, where prlimit is missing.
 */
import { assert, assertEquals, assertStringIncludes } from "@std/assert";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("..", import.meta.url));

function hasPrlimit(): boolean {
  try {
    new Deno.Command("prlimit", { args: ["--version"], stdout: "null", stderr: "null" }).outputSync();
    return true;
  } catch {
    return false;
  }
}

const ignore = !hasPrlimit();
if (ignore) console.error("wire_descriptors_test: skipped: prlimit (util-linux) is not installed");

/** Opens up to `n` connections to `port` (each given 1 s), returns those that opened. */
async function openIdle(port: number, n: number): Promise<Deno.Conn[]> {
  const conns: Deno.Conn[] = [];
  for (let i = 0; i < n; i++) {
    const timer = AbortSignal.timeout(1000);
    try {
      conns.push(await Deno.connect({ port, signal: timer } as Deno.ConnectOptions));
    } catch {
      break; // the backlog is full: the server is not accepting, as it should not
    }
  }
  return conns;
}

/** Reads lines of `stream` into `lines` until it ends, resolving `first` with the first one. */
function collectLines(stream: ReadableStream<Uint8Array>, lines: string[]): Promise<string> {
  const first = Promise.withResolvers<string>();
  (async () => {
    let rest = "";
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      rest += chunk;
      const parts = rest.split("\n");
      rest = parts.pop()!;
      for (const line of parts) {
        lines.push(line);
        if (lines.length === 1) first.resolve(line);
      }
    }
    if (rest !== "") lines.push(rest);
    first.resolve(lines[0] ?? "");
  })();
  return first.promise;
}

Deno.test({
  name: "a server out of descriptors (EMFILE) stops accepting, says so once, and serves again when they free",
  ignore,
  async fn() {
    const child = new Deno.Command("prlimit", {
      args: [
        "--nofile=128",
        Deno.execPath(),
        "run",
        "--no-prompt",
        "--allow-net=127.0.0.1",
        "--allow-read",
        `${ROOT}tests/fixtures/descriptor_server.ts`,
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const out: string[] = [], err: string[] = [];
    const port = Number(await collectLines(child.stdout, out));
    collectLines(child.stderr, err);
    const held = await openIdle(port, 400);
    assert(held.length > 128, `only ${held.length} connections opened: the limit was never met`);
    await new Promise((r) => setTimeout(r, 300));
    for (const conn of held) conn.close();
    // Once the descriptors are free again it answers (its backoff is at most 1 s).
    let answer = "";
    for (let i = 0; i < 20 && answer !== "ok"; i++) {
      answer = await fetch(`http://127.0.0.1:${port}/`).then((r) => r.text()).catch(() => "");
      if (answer !== "ok") await new Promise((r) => setTimeout(r, 250));
    }
    assertEquals(answer, "ok");
    const writer = child.stdin.getWriter();
    await writer.close();
    const status = await child.status;
    assertEquals(status.code, 0, err.join("\n"));
    const stats = JSON.parse(out[1]);
    assert(stats.descriptorErrors >= 1, JSON.stringify(stats));
    const said = err.filter((line) => line.includes("out of file descriptors"));
    assertEquals(said.length, 1, err.join("\n"));
    assertStringIncludes(said[0], "not accepting for a while; raise the limit (ulimit -n)");
  },
});

Deno.test({
  name: "serve under ulimit -n 256 outlives 1,000 idle connections, its own bound keeping it off the limit",
  ignore,
  async fn() {
    const child = new Deno.Command("prlimit", {
      args: [
        "--nofile=256",
        Deno.execPath(),
        "run",
        "--no-prompt",
        "--allow-read",
        "--allow-net=127.0.0.1,localhost",
        "--allow-env=INIT_CWD",
        "--unstable-worker-options",
        `${ROOT}scenarios/serve.ts`,
        "--instances",
        "2",
      ],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const out: string[] = [], err: string[] = [];
    collectLines(child.stderr, err);
    await collectLines(child.stdout, out);
    while (!out.some((line) => line.startsWith("serving at"))) await new Promise((r) => setTimeout(r, 50));
    const gateway = out.find((line) => line.startsWith("gateway: "))!.split(" ")[1];
    const bound = Number(
      out.find((line) => line.startsWith("serving at"))!.match(/at most (\d+) connections/)![1],
    );
    assert(bound > 10 && bound < 256 / 3, `the bound is ${bound}`);
    try {
      const held = await openIdle(Number(new URL(gateway).port), 1000);
      assert(held.length > bound, `${held.length} connections opened`);
      await new Promise((r) => setTimeout(r, 500));
      for (const conn of held) conn.close();
      let status = 0;
      for (let i = 0; i < 20 && status !== 200; i++) {
        status = await fetch(`${gateway}/v1/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "sim", prompt: "after the flood", max_tokens: 2 }),
        }).then(async (r) => (await r.arrayBuffer(), r.status)).catch(() => 0);
        if (status !== 200) await new Promise((r) => setTimeout(r, 250));
      }
      assertEquals(status, 200, err.join("\n"));
      assert(!err.some((line) => /Too many open files|out of file descriptors/.test(line)), err.join("\n"));
      assert(err.some((line) => line.includes("gateway: at its connection bound")), err.join("\n"));
    } finally {
      child.kill("SIGTERM");
      await child.status;
    }
  },
});
