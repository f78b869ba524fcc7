import { assert, assertEquals, assertRejects } from "@std/assert";
import { HttpClient, HttpClientError } from "../scenarios/wire/http_client.ts";
import { serveHttp } from "../scenarios/wire/http_server.ts";
import { readSseData, serverUrl } from "../scenarios/wire/http.ts";

const encoder = new TextEncoder();

/** A raw TCP server that answers every connection with `answer` (given the request's bytes so far), then does what `after` says. */
function rawServer(
  answer: (connection: number) => string,
  after: "keep" | "close" = "keep",
): { url: string; connections: () => number; close: () => void } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const open = new Set<Deno.Conn>();
  let connections = 0;
  (async () => {
    for await (const conn of listener) {
      const n = connections++;
      open.add(conn);
      (async () => {
        const buffer = new Uint8Array(65536);
        try {
          while (true) {
            const read = await conn.read(buffer);
            if (read === null) break;
            await conn.write(encoder.encode(answer(n)));
            if (after === "close") break;
          }
        } catch { /* reset */ }
        open.delete(conn);
        try {
          conn.close();
        } catch { /* closed */ }
      })();
    }
  })();
  return {
    url: `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`,
    connections: () => connections,
    close: () => {
      listener.close();
      for (const c of open) {
        try {
          c.close();
        } catch { /* closed */ }
      }
    },
  };
}

Deno.test("HttpClient keeps a connection alive across requests: content-length, chunked and empty bodies", async () => {
  let n = 0;
  const server = serveHttp({
    hostname: "127.0.0.1",
    port: 0,
    handler: async (request) => {
      const body = await request.text();
      n++;
      if (n % 3 === 1) return new Response(`echo ${body}`);
      if (n % 3 === 2) {
        const stream = new ReadableStream<Uint8Array>({
          start(c) {
            c.enqueue(encoder.encode("data: 1\n\n"));
            c.enqueue(encoder.encode("data: 2\n\n"));
            c.close();
          },
        });
        return new Response(stream, { headers: { "content-type": "text/event-stream" } });
      }
      return new Response(null, { status: 204 });
    },
  });
  const client = new HttpClient();
  try {
    const url = serverUrl(server.addr);
    for (let round = 0; round < 3; round++) {
      const whole = await client.request(`${url}/x`, { method: "POST", body: "hi" });
      assertEquals([whole.status, await whole.text()], [200, "echo hi"]);
      const stream = await client.request(`${url}/s`, { method: "POST", body: "" });
      assertEquals(stream.headers.get("Content-Type"), "text/event-stream");
      const events: string[] = [];
      for await (const data of readSseData(stream.body)) events.push(data);
      assertEquals(events, ["1", "2"]);
      const empty = await client.request(`${url}/e`);
      assertEquals([empty.status, await empty.text()], [204, ""]);
    }
    assertEquals(server.stats().accepted, 1);
  } finally {
    client.close();
    await server.shutdown();
  }
});

Deno.test("HttpClient decodes chunked bodies split anywhere, with extensions and trailers", async () => {
  const head = "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n";
  const body = "5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\ntrailer: x\r\n\r\n";
  // The server writes its answer a byte at a time.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const served = (async () => {
    const conn = await listener.accept();
    await conn.read(new Uint8Array(4096));
    for (const byte of encoder.encode(head + body)) await conn.write(Uint8Array.of(byte));
    await conn.read(new Uint8Array(4096)).catch(() => null);
    conn.close();
  })();
  const client = new HttpClient();
  try {
    const response = await client.request(`http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}/`);
    assertEquals(await response.text(), "hello world");
  } finally {
    client.close();
    listener.close();
    await served;
  }
});

Deno.test("HttpClient never fails a request on a pooled connection the server closed: seen idle, or sent again once", async () => {
  const server = rawServer(() => "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", "close");
  const client = new HttpClient();
  try {
    // The server closes after each answer though it said keep-alive. Right after an answer the next
    // request may find the connection still pooled (then its read meets the close: sent again on a
    // new one); a moment later the idle connection's own read has seen the close.
    for (let i = 0; i < 6; i++) {
      const response = await client.request(server.url);
      assertEquals(await response.text(), "ok");
      if (i % 2 === 1) await new Promise((r) => setTimeout(r, 20));
    }
    assertEquals(server.connections(), 6);
  } finally {
    client.close();
    server.close();
  }
});

Deno.test("HttpClient never sends a POST twice when the server read it and closed without answering", async () => {
  // The server answers a connection's first request, then reads the second and closes without a word:
  // it may have acted on it, so the client fails the request rather than sending it again.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  let requests = 0;
  const served = (async () => {
    for await (const conn of listener) {
      (async () => {
        const buffer = new Uint8Array(65536);
        try {
          for (let n = 0;; n++) {
            if (await conn.read(buffer) === null) break;
            requests++;
            if (n > 0) break;
            await conn.write(encoder.encode("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"));
          }
        } catch { /* reset */ }
        try {
          conn.close();
        } catch { /* closed */ }
      })();
    }
  })();
  const url = `http://127.0.0.1:${(listener.addr as Deno.NetAddr).port}`;
  const client = new HttpClient();
  try {
    const first = await client.request(url, { method: "POST", body: "{}" });
    assertEquals(await first.text(), "ok");
    await assertRejects(() => client.request(url, { method: "POST", body: "{}" }), HttpClientError);
    await new Promise((r) => setTimeout(r, 50));
    assertEquals(requests, 2, "the second POST was sent once");
  } finally {
    client.close();
    listener.close();
    await served.catch(() => {});
  }
});

Deno.test("HttpClient: a body read to the connection's close, a refused connection, a cut body, an abort", async (t) => {
  const client = new HttpClient();
  await t.step("no length: the body ends with the connection, which is not reused", async () => {
    const server = rawServer(() => "HTTP/1.1 200 OK\r\n\r\nuntil the end", "close");
    try {
      assertEquals(await (await client.request(server.url)).text(), "until the end");
      assertEquals(await (await client.request(server.url)).text(), "until the end");
      assertEquals(server.connections(), 2);
    } finally {
      server.close();
    }
  });
  await t.step("refused: Deno.connect's error", async () => {
    const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = (listener.addr as Deno.NetAddr).port;
    listener.close();
    await assertRejects(() => client.request(`http://127.0.0.1:${port}/`), Deno.errors.ConnectionRefused);
  });
  await t.step("a body cut short: HttpClientError", async () => {
    const server = rawServer(() => "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort", "close");
    try {
      const response = await client.request(server.url);
      await assertRejects(() => response.text(), HttpClientError, "closed mid-body");
    } finally {
      server.close();
    }
  });
  await t.step("an abort rejects a pending body read with its reason", async () => {
    const server = rawServer(() => "HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nstarted");
    try {
      const controller = new AbortController();
      const response = await client.request(server.url, { signal: controller.signal });
      const reader = response.body.getReader();
      assertEquals((await reader.read()).done, false);
      const reason = new Error("enough");
      setTimeout(() => controller.abort(reason), 10);
      const error = await reader.read().then(() => undefined, (e) => e);
      assert(error === reason, `rejected with ${error}`);
    } finally {
      server.close();
    }
  });
  client.close();
});
