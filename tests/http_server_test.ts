import { assert, assertEquals, assertStringIncludes } from "@std/assert";
import { ConnectionPool, type HttpServer, serveHttp } from "../scenarios/wire/http_server.ts";
import { serverUrl, SseWriter } from "../scenarios/wire/http.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** A server on an ephemeral loopback port, shut down after `body`. */
async function withServer(
  options: Partial<Parameters<typeof serveHttp>[0]>,
  body: (server: HttpServer, port: number) => Promise<void>,
): Promise<string[]> {
  const warnings: string[] = [];
  const server = serveHttp({
    hostname: "127.0.0.1",
    port: 0,
    handler: async (request) => {
      const text = request.body === null ? "" : await request.text();
      return new Response(`${request.method} ${new URL(request.url).pathname} ${text}`);
    },
    onWarning: (line) => warnings.push(line),
    ...options,
  });
  try {
    await body(server, server.addr.port);
  } finally {
    await server.shutdown();
  }
  return warnings;
}

/** Reads `conn` until it ends (null) or `until` matches what was read; the text read. */
async function readUntil(conn: Deno.Conn, until?: RegExp): Promise<{ text: string; ended: boolean }> {
  const buffer = new Uint8Array(65536);
  let text = "";
  while (true) {
    let n: number | null;
    try {
      n = await conn.read(buffer);
    } catch {
      n = null; // reset
    }
    if (n === null) return { text, ended: true };
    text += decoder.decode(buffer.subarray(0, n));
    if (until?.test(text)) return { text, ended: false };
  }
}

/** Whether `promise` settles within `ms`. */
async function settlesWithin(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<false>((resolve) => timer = setTimeout(() => resolve(false), ms));
  const result = await Promise.race([promise.then(() => true, () => true), late]);
  clearTimeout(timer);
  return result;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

Deno.test("serveHttp answers fetch's requests: a GET, a POST with a length, a chunked POST, keep-alive", async () => {
  await withServer({}, async (_, port) => {
    const url = `http://127.0.0.1:${port}`;
    assertEquals(await (await fetch(`${url}/a`)).text(), "GET /a ");
    assertEquals(await (await fetch(`${url}/b`, { method: "POST", body: "hello" })).text(), "POST /b hello");
    const chunked = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(encoder.encode("one "));
        controller.enqueue(encoder.encode("two"));
        controller.close();
      },
    });
    const response = await fetch(`${url}/c`, { method: "POST", body: chunked });
    assertEquals(await response.text(), "POST /c one two");
  });
});

Deno.test("serveHttp keeps a connection for the next request, pipelined or not, and answers HEAD without a body", async () => {
  await withServer({}, async (_, port) => {
    const conn = await Deno.connect({ port });
    await conn.write(
      encoder.encode("GET /1 HTTP/1.1\r\nhost: x\r\n\r\nPOST /2 HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc"),
    );
    const both = await readUntil(conn, /POST \/2 abc$/);
    assertEquals(both.text.match(/HTTP\/1\.1 200 OK/g)?.length, 2);
    assertStringIncludes(both.text, "content-length: 7\r\n");
    await conn.write(encoder.encode("HEAD /3 HTTP/1.1\r\n\r\nGET /4 HTTP/1.1\r\nconnection: close\r\n\r\n"));
    const rest = await readUntil(conn);
    assert(rest.ended);
    assertEquals(rest.text.match(/HTTP\/1\.1 200 OK/g)?.length, 2);
    assert(!rest.text.includes("HEAD /3"), "a HEAD answer has no body");
    assert(rest.text.endsWith("GET /4 "), rest.text);
    conn.close();
  });
});

Deno.test("serveHttp refuses malformed heads in OpenAI's error JSON, and heads past the bound with 431", async () => {
  await withServer({ limits: { maxHeaderBytes: 1024 } }, async (server, port) => {
    for (
      const [head, status] of [
        ["NOT A REQUEST\r\n\r\n", 400],
        ["GET /x HTTP/1.1\r\nbad header\r\n\r\n", 400],
        ["GET /x HTTP/1.1\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n", 400],
        ["GET /x HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n", 501],
        [`GET /x HTTP/1.1\r\nx-big: ${"a".repeat(2000)}\r\n\r\n`, 431],
        ["GET /x HTTP/2.0\r\n\r\n", 505],
      ] as const
    ) {
      const conn = await Deno.connect({ port });
      await conn.write(encoder.encode(head));
      const { text, ended } = await readUntil(conn);
      conn.close();
      assert(ended, "a malformed request closes its connection");
      assert(text.startsWith(`HTTP/1.1 ${status} `), `${JSON.stringify(head.slice(0, 40))}: ${text}`);
      const body = JSON.parse(text.slice(text.indexOf("\r\n\r\n") + 4));
      assertEquals(body.error.type, "invalid_request_error");
    }
    assertEquals(server.stats().malformed, 6);
  });
});

Deno.test("a client that does not finish its headers within headersTimeoutMs is closed, however it trickles", async () => {
  await withServer({ limits: { headersTimeoutMs: 300 } }, async (server, port) => {
    const conn = await Deno.connect({ port });
    // One byte every 50 ms: the whole head would take 30 × 50 = 1,500 ms, five times the timeout.
    const head = encoder.encode("GET /slow HTTP/1.1\r\nhost: x\r\n");
    let sent = 0;
    const trickle = (async () => {
      for (; sent < head.length; sent++) {
        try {
          await conn.write(head.subarray(sent, sent + 1));
        } catch {
          return;
        }
        await sleep(50);
      }
    })();
    const { ended } = await readUntil(conn);
    assert(ended);
    assert(sent < head.length, `closed only after all ${head.length} bytes of the head arrived`);
    await trickle;
    conn.close();
    assertEquals(server.stats().headersTimedOut, 1);
    assertEquals(server.stats().open, 0);
  });
});

Deno.test("a keep-alive connection idle past idleTimeoutMs is closed; one in use is not", async () => {
  await withServer({ limits: { idleTimeoutMs: 1000 } }, async (server, port) => {
    const busy = await Deno.connect({ port });
    const idle = await Deno.connect({ port });
    await idle.write(encoder.encode("GET /once HTTP/1.1\r\n\r\n"));
    await readUntil(idle, /GET \/once $/);
    const idleEnd = readUntil(idle);
    // The busy one asks every 100 ms (a tenth of the timeout: a loaded machine's stalls fit in
    // between) for 3 s, three idle timeouts, and stays open.
    for (let i = 0; i < 30; i++) {
      await busy.write(encoder.encode(`GET /${i} HTTP/1.1\r\n\r\n`));
      const { ended } = await readUntil(busy, new RegExp(`GET /${i} $`));
      assert(!ended, `the busy connection was closed at its request ${i}`);
      await sleep(100);
    }
    assert((await idleEnd).ended);
    assertEquals(server.stats().idleTimedOut, 1);
    busy.close();
    idle.close();
  });
});

Deno.test("at maxConnections the server stops accepting, and accepts again when one closes", async () => {
  const warnings = await withServer({ limits: { maxConnections: 3 } }, async (server, port) => {
    const held = await Promise.all([0, 1, 2].map(() => Deno.connect({ port })));
    // Each held connection is accepted (its request is answered) before the fourth comes.
    for (const [i, conn] of held.entries()) {
      await conn.write(encoder.encode(`GET /held${i} HTTP/1.1\r\n\r\n`));
      await readUntil(conn, new RegExp(`GET /held${i} $`));
    }
    const fourth = await Deno.connect({ port }); // the kernel's backlog takes it
    await fourth.write(encoder.encode("GET /fourth HTTP/1.1\r\nconnection: close\r\n\r\n"));
    const answer = readUntil(fourth);
    assert(!await settlesWithin(answer, 300), "the fourth connection was served beyond the bound");
    assertEquals(server.stats().open, 3);
    held[0].close();
    const { text } = await answer;
    assert(text.endsWith("GET /fourth "), text);
    assert(server.stats().atBound >= 1);
    for (const conn of held.slice(1)) conn.close();
    fourth.close();
  });
  assertEquals(warnings.length, 1, warnings.join("\n"));
  assertStringIncludes(
    warnings[0],
    "at its connection bound (3 connections): not accepting until one closes",
  );
});

Deno.test("servers sharing a ConnectionPool hold at most its size together", async () => {
  const pool = new ConnectionPool(2);
  const other = serveHttp({
    hostname: "127.0.0.1",
    port: 0,
    handler: () => new Response("b"),
    pool,
    onWarning: () => {},
  });
  try {
    await withServer({ pool }, async (_, port) => {
      const held = await Promise.all([0, 1].map(() => Deno.connect({ port })));
      for (const conn of held) {
        await conn.write(encoder.encode("GET /h HTTP/1.1\r\n\r\n"));
        await readUntil(conn, /GET \/h $/);
      }
      assertEquals(pool.used, 2);
      const late = fetch(serverUrl(other.addr));
      assert(!await settlesWithin(late, 300), "the other server accepted past the shared bound");
      held[0].close();
      assertEquals(await (await late).text(), "b");
      held[1].close();
    });
  } finally {
    await other.shutdown();
  }
});

Deno.test("a request's signal aborts when its client leaves before the answer; a stream is cancelled", async () => {
  const aborted = Promise.withResolvers<void>();
  const cancelled = Promise.withResolvers<void>();
  await withServer({
    handler: (request) => {
      if (new URL(request.url).pathname === "/stream") {
        const sse = new SseWriter(() => cancelled.resolve());
        sse.send({ n: 0 }); // then nothing: the stream waits for an event that never comes
        return sse.response();
      }
      return new Promise<Response>((resolve) => {
        request.signal.addEventListener("abort", () => {
          aborted.resolve();
          resolve(new Response(null, { status: 499 }));
        });
      });
    },
  }, async (server, port) => {
    const whole = await Deno.connect({ port });
    await whole.write(encoder.encode("GET /never HTTP/1.1\r\n\r\n"));
    await sleep(50);
    whole.close();
    assert(await settlesWithin(aborted.promise, 2000), "the handler's signal did not abort");
    const stream = await Deno.connect({ port });
    await stream.write(encoder.encode("GET /stream HTTP/1.1\r\n\r\n"));
    await readUntil(stream, /data: \{"n":0\}/);
    stream.close();
    assert(await settlesWithin(cancelled.promise, 2000), "the stream was not cancelled");
    await sleep(50);
    assertEquals(server.stats().open, 0);
  });
});

Deno.test("a client that stops reading a stream is closed after idleTimeoutMs, and the stream cancelled", async () => {
  const cancelled = Promise.withResolvers<void>();
  let sse: SseWriter | undefined;
  await withServer({
    limits: { idleTimeoutMs: 300 },
    handler: () => {
      sse = new SseWriter(() => cancelled.resolve());
      return sse.response();
    },
  }, async (server, port) => {
    const conn = await Deno.connect({ port });
    await conn.write(encoder.encode("GET /flood HTTP/1.1\r\n\r\n"));
    await sleep(50);
    // The client reads nothing: the socket buffers fill, then a write waits past the timeout.
    const payload = { text: "x".repeat(60_000) };
    for (let i = 0; i < 2000 && !(sse?.closed ?? false); i++) {
      sse?.send(payload);
      await sleep(1);
    }
    assert(
      await settlesWithin(cancelled.promise, 3000),
      "the stream of a client that reads nothing was not ended",
    );
    assertEquals(server.stats().idleTimedOut, 1);
    conn.close();
  });
});

Deno.test("freeDescriptors counts the descriptors this process may still open, up to its bound", async () => {
  // In a process of its own: test files running beside this one share this process's descriptors.
  const { code, stdout, stderr } = await new Deno.Command("deno", {
    args: [
      "run",
      "--no-prompt",
      "--allow-read=/dev/null",
      new URL("./fixtures/descriptor_count.ts", import.meta.url).pathname,
    ],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assertEquals(code, 0, new TextDecoder().decode(stderr));
  type Count = { free: number; limited: boolean };
  const { small, before, holding, after }: Record<string, Count> = JSON.parse(
    new TextDecoder().decode(stdout),
  );
  assertEquals(small, { free: 256, limited: false });
  assert(before !== undefined);
  if (!before.limited) return assertEquals(before.free, 65_536); // a limit past the bound: the bound is all it says
  assertEquals(holding, { free: before.free - 10, limited: true });
  assertEquals(after, before);
});

Deno.test("a server at its own bound waits without spinning while the shared pool has room: its neighbour still answers", async () => {
  const child = new Deno.Command("deno", {
    args: [
      "run",
      "--no-prompt",
      "--allow-net=127.0.0.1",
      "--allow-read",
      new URL("./fixtures/bound_server.ts", import.meta.url).pathname,
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const [a, b] = (await reader.read()).value!.trim().split(" ").map(Number);
  const held = await Promise.all([0, 1, 2].map(() => Deno.connect({ port: a })));
  try {
    for (const conn of held.slice(0, 2)) {
      await conn.write(encoder.encode("GET / HTTP/1.1\r\n\r\n"));
      assert(await settlesWithin(readUntil(conn, /ok$/), 3000), "a held connection was not answered");
    }
    // The third waits in a's backlog; a waits at its bound. The process must still answer b.
    await sleep(100);
    const answer = await fetch(`http://127.0.0.1:${b}/`, { signal: AbortSignal.timeout(3000) })
      .then((r) => r.text(), (e) => `no answer: ${e.message}`);
    assertEquals(answer, "ok");
  } finally {
    for (const conn of held) conn.close();
    await child.stdin.close();
    await reader.cancel();
    // A frozen child never reads its stdin's end: it is killed.
    if (!await settlesWithin(child.status, 3000)) child.kill("SIGKILL");
    await child.status;
  }
});

Deno.test("a request body that stops coming is closed after idleTimeoutMs, even when the handler never reads it", async () => {
  await withServer({
    limits: { idleTimeoutMs: 300 },
    handler: () => new Response("no body wanted", { status: 405 }),
  }, async (server, port) => {
    const conn = await Deno.connect({ port });
    await conn.write(encoder.encode("POST /x HTTP/1.1\r\ncontent-length: 60000\r\n\r\nabc"));
    const { text, ended } = await readUntil(conn);
    conn.close();
    assert(ended);
    assertStringIncludes(text, "HTTP/1.1 405 ");
    assertEquals(server.stats().idleTimedOut, 1);
    assertEquals(server.stats().open, 0);
  });
});

Deno.test("a malformed chunked body closes its connection: what follows it is never read as a request", async () => {
  const seen: string[] = [];
  await withServer({
    handler: async (request) => {
      seen.push(new URL(request.url).pathname);
      try {
        await request.text();
      } catch {
        return new Response("bad body", { status: 400 });
      }
      return new Response("read");
    },
  }, async (_, port) => {
    const conn = await Deno.connect({ port });
    await conn.write(
      encoder.encode(
        "POST /x HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n",
      ),
    );
    const { text, ended } = await readUntil(conn);
    conn.close();
    assert(ended);
    assertStringIncludes(text, "HTTP/1.1 400 ");
    assertEquals(seen, ["/x"]);
  });
});
