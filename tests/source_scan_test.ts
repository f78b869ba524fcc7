import { assertEquals } from "@std/assert";

const FORBIDDEN = /\b(Date\.now|performance\.now|setTimeout|setInterval|Math\.random)\b/;

async function* typescriptFiles(dir: string): AsyncGenerator<string> {
  for await (const entry of Deno.readDir(dir)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) yield* typescriptFiles(path);
    else if (entry.name.endsWith(".ts")) yield path;
  }
}

Deno.test("nothing under actors/ reads the wall clock, sets timers or uses Math.random", async () => {
  const offenders: string[] = [];
  let files = 0;
  for await (const path of typescriptFiles(new URL("../actors", import.meta.url).pathname)) {
    files++;
    (await Deno.readTextFile(path)).split("\n").forEach((line, i) => {
      if (FORBIDDEN.test(line)) offenders.push(`${path}:${i + 1}: ${line.trim()}`);
    });
  }
  assertEquals(offenders, []);
  assertEquals(files > 10, true);
});
