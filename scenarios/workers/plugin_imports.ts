/**
 * @module
 * The check a router plugin's import graph passes before anything loads it:
 * every module it reaches must be a file under the plugin's own directory or
 * our `actors/`, an entry of the import map, or an `npm:` package the lock
 * already pins. Remote URLs, other `npm:`/`jsr:`/`node:` specifiers, files
 * elsewhere on disk and computed `import()` calls are refused up front.
 * A hidden file or directory (`.ssh`, `.env`) is never a plugin's, even
 * under its directory. (The plugin's Worker may read exactly the files of the
 * graph, ours included; this check turns a violation into a clear usage
 * error before any code runs.)
 */
import { dirname, extname, isAbsolute, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { UsageError } from "../cli/usage_error.ts";

/** What a plugin may import. */
export interface ImportRules {
  /** Absolute directories a plugin may import files from. */
  readonly roots: readonly string[];
  /** Roots whose files are ours: checked as targets, not scanned further. */
  readonly trustedRoots: readonly string[];
  /** The import map (bare specifier → target), from deno.json. */
  readonly importMap: Readonly<Record<string, string>>;
  /** Directory the import map's relative targets are relative to. */
  readonly importMapDir: string;
  /** `npm:` specifiers pinned by the lock file, as written there (e.g. `npm:zod@4.6.7`). */
  readonly lockedNpm: ReadonlySet<string>;
}

const REPO = fileURLToPath(new URL("../../", import.meta.url));

/** The rules for a plugin at `pluginPath`: its own directory and `actors/`, this repository's import map and lock. */
export async function pluginImportRules(pluginPath: string): Promise<ImportRules> {
  const config = JSON.parse(await Deno.readTextFile(resolve(REPO, "deno.json")));
  const lock = JSON.parse(await Deno.readTextFile(resolve(REPO, "deno.lock")));
  const actors = resolve(REPO, "actors");
  return {
    roots: [dirname(pluginPath), actors],
    trustedRoots: [actors],
    importMap: config.imports ?? {},
    importMapDir: REPO,
    lockedNpm: new Set(Object.keys(lock.specifiers ?? {}).filter((s) => s.startsWith("npm:"))),
  };
}

/** How {@linkcode checkPluginImports} names files in its errors. */
export interface PluginNamingOptions {
  /** The plugin's path as the user typed it, for the entry file. @default the entry path */
  readonly typedPath?: string;
  /** Directory the user typed it in: other files are named relative to it. @default the working directory */
  readonly baseDir?: string;
  /** The flag that named the plugin. @default "--router" */
  readonly flag?: string;
}

/** Largest module file a plugin may import: a router is code, not data. */
const MAX_MODULE_BYTES = 5 * 2 ** 20;

/**
 * Walks the plugin's import graph from `entryPath` and throws on the first
 * import outside the rules. Every file reached must be a regular file of at
 * most 5 MiB whose real path (symlinks followed) is inside the real path of a
 * root, and no hidden file: a symlink in the plugin's directory cannot lead
 * outside it, and a plugin kept in `$HOME` cannot import `.ssh/id_rsa` as text.
 * Files of the trusted roots (ours) are walked too, to learn what the plugin
 * reaches, but their imports are not judged.
 *
 * @returns what the plugin's Worker must be able to read: each file of the
 *   graph (as written and as real path), ours included, and no directory.
 *   Granting files keeps a symlink beside the plugin from opening the rest of
 *   the disk, and the files beside it, which it does not import, from it.
 * @throws {UsageError} naming the importing file, the specifier and why it is refused.
 */
export async function checkPluginImports(
  entryPath: string,
  rules: ImportRules,
  naming: PluginNamingOptions = {},
): Promise<string[]> {
  const entry = resolve(entryPath);
  const flag = naming.flag ?? "--router";
  const name = (file: string) =>
    file === entry && naming.typedPath !== undefined
      ? naming.typedPath
      : relativeName(file, naming.baseDir ?? Deno.cwd());
  const realRoots = await Promise.all(rules.roots.map((root) => Deno.realPath(root).catch(() => root)));
  const realTrusted = await Promise.all(
    rules.trustedRoots.map((root) => Deno.realPath(root).catch(() => root)),
  );
  const readable = new Set<string>();
  const seen = new Set<string>();
  const queue: { file: string; where: string }[] = [{ file: entry, where: flag }];
  while (queue.length > 0) {
    const { file, where } = queue.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    const real = await checkedFile(file, realRoots, where, name);
    if (file !== entry && (isHidden(file, rules.roots) || isHidden(real, realRoots))) {
      throw new UsageError(
        `${where}: "${name(file)}" is hidden (a name starting with "."), which a plugin may not import`,
      );
    }
    readable.add(file).add(real);
    if (!isScript(file)) continue;
    if (within(real, realTrusted)) {
      queue.push(...(await ourImports(real)).map((target) => ({ file: target, where })));
      continue;
    }
    if (/\.c[jt]s$/.test(file)) {
      throw new UsageError(
        `${where}: "${name(file)}" is CommonJS, which a plugin may not use (require() escapes the check)`,
      );
    }
    const source = await Deno.readTextFile(real);
    for (const found of findImports(source)) {
      if (found.typeOnly) continue;
      const at = `${flag}: "${name(file)}"`;
      if (found.specifier === undefined) {
        throw new UsageError(
          `${at}: import() with a computed specifier cannot be checked before loading; import a string literal`,
        );
      }
      const target = resolveTarget(found.specifier, file, rules, at, name);
      if (target !== undefined) queue.push({ file: target, where: `${at}: import "${found.specifier}"` });
    }
  }
  return [...readable];
}

/**
 * The local files one of our modules imports (relative specifiers only: our
 * packages come from the import map or `npm:`, which the Worker loads without
 * reading the disk; a computed `import()` is the plugin loader's own).
 */
async function ourImports(path: string): Promise<string[]> {
  const source = await Deno.readTextFile(path);
  return findImports(source)
    .filter((found) => !found.typeOnly && found.specifier !== undefined && /^\.\.?\//.test(found.specifier))
    .map((found) => resolve(dirname(path), found.specifier!));
}

/** The real path of `file`, checked: a regular file, not too large, inside a root. */
async function checkedFile(
  file: string,
  realRoots: readonly string[],
  where: string,
  name: (file: string) => string,
): Promise<string> {
  let real: string, info: Deno.FileInfo;
  try {
    real = await Deno.realPath(file);
    info = await Deno.stat(real);
  } catch (error) {
    const reason = error instanceof Deno.errors.NotFound ? "no such file" : (error as Error).message;
    throw new UsageError(`${where}: cannot read "${name(file)}": ${reason}`);
  }
  if (!within(real, realRoots)) {
    throw new UsageError(
      `${where}: "${
        name(file)
      }" leads through a symlink outside the plugin's directory and actors/ (to ${real})`,
    );
  }
  if (!info.isFile) throw new UsageError(`${where}: "${name(file)}" is not a regular file`);
  if (info.size > MAX_MODULE_BYTES) {
    throw new UsageError(
      `${where}: "${name(file)}" is ${info.size} bytes, over the 5 MiB a plugin module may have`,
    );
  }
  return real;
}

/** The file a specifier resolves to, `undefined` for an allowed package; throws when refused. */
function resolveTarget(
  specifier: string,
  from: string,
  rules: ImportRules,
  where: string,
  name: (file: string) => string,
): string | undefined {
  const refuse = (why: string): never => {
    throw new UsageError(`${where}: import "${specifier}" refused: ${why}`);
  };
  let path: string | undefined;
  if (specifier.startsWith("./") || specifier.startsWith("../") || isAbsolute(specifier)) {
    path = resolve(dirname(from), specifier);
  } else if (specifier.startsWith("file:")) {
    path = fileURLToPath(specifier);
  } else if (/^npm:/.test(specifier)) {
    const bare = /^npm:(@[^/]+\/[^/@]+|[^/@]+)(@[^/]+)?/.exec(specifier);
    if (bare && rules.lockedNpm.has(`npm:${bare[1]}${bare[2] ?? ""}`)) return undefined;
    refuse("npm packages a plugin uses must already be pinned in deno.lock (add them to the project first)");
  } else if (/^[a-z][a-z0-9+.-]*:/i.test(specifier)) {
    refuse(
      "a plugin may import only local files, the import map and locked npm packages (no network, no built-ins)",
    );
  } else {
    const mapped = importMapTarget(specifier, rules.importMap);
    if (mapped === undefined) refuse("not in the import map of deno.json");
    if (mapped!.startsWith("npm:")) return undefined;
    path = resolve(rules.importMapDir, mapped!);
  }
  if (!within(path!, rules.roots)) {
    refuse(`outside the plugin's directory and actors/ (${name(path!)})`);
  }
  return path;
}

function importMapTarget(specifier: string, map: Readonly<Record<string, string>>): string | undefined {
  if (specifier in map) return map[specifier];
  for (const [key, target] of Object.entries(map)) {
    if (key.endsWith("/") && specifier.startsWith(key)) return target + specifier.slice(key.length);
  }
  return undefined;
}

function within(path: string, roots: readonly string[]): boolean {
  return roots.some((root) => {
    const rel = relative(root, path);
    return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel));
  });
}

/** Whether a component of `path` below its root (`.ssh`, `.env`) starts with a dot. */
function isHidden(path: string, roots: readonly string[]): boolean {
  const root = roots.find((r) => within(path, [r]));
  if (root === undefined) return false;
  return relative(root, path).split(sep).some((part) =>
    part.startsWith(".") && part !== "." && part !== ".."
  );
}

function isScript(path: string): boolean {
  return [".ts", ".tsx", ".mts", ".cts", ".js", ".jsx", ".mjs", ".cjs"].includes(extname(path));
}

/**
 * `path` as the user would type it from `baseDir`: relative to it, unless
 * that climbs more than one directory (then absolute).
 */
function relativeName(path: string, baseDir: string): string {
  const rel = relative(baseDir, path);
  return rel === "" || rel.startsWith(`..${sep}..`) || isAbsolute(rel) ? path : rel;
}

/** One import found in a source: its specifier, or `undefined` for a computed `import(...)`. */
export interface FoundImport {
  readonly specifier: string | undefined;
  /** `import type …` / `export type … from`: erased before the module runs, so never loaded. */
  readonly typeOnly?: boolean;
}

/**
 * The imports of a module's source: static `import`/`export … from`,
 * side-effect imports and `import(...)` calls, outside comments and strings.
 */
export function findImports(source: string): FoundImport[] {
  const code = blankCommentsAndStrings(source);
  const found: FoundImport[] = [];
  const literalAt = (index: number): string | undefined => {
    const quote = source[index];
    if (quote !== '"' && quote !== "'" && quote !== "`") return undefined;
    const end = source.indexOf(quote, index + 1);
    const text = source.slice(index + 1, end);
    return quote === "`" && text.includes("${") ? undefined : text;
  };
  // `from "x"` ends every static import/export with a module; `import "x"` is a side-effect import.
  const patterns = [/\bfrom\s*(?=["'])/g, /\bimport\s*(?=["'])/g];
  for (const pattern of patterns) {
    for (const m of code.matchAll(pattern)) {
      if (!isKeyword(code, m.index!)) continue;
      found.push({ specifier: literalAt(m.index! + m[0].length), typeOnly: isTypeOnly(code, m.index!) });
    }
  }
  for (const m of code.matchAll(/\bimport\s*\(\s*/g)) {
    if (!isKeyword(code, m.index!)) continue;
    const start = m.index! + m[0].length;
    const specifier = literalAt(start);
    // Only a lone literal argument (plus optional attributes) is a checked import.
    const after = specifier === undefined ? "" : code.slice(start + specifier.length + 2).trimStart();
    found.push({ specifier: after.startsWith(")") || after.startsWith(",") ? specifier : undefined });
  }
  return found;
}

/** Whether the statement ending in `from` at `index` is `import type …` or `export type …`. */
function isTypeOnly(code: string, index: number): boolean {
  const before = code.slice(0, index);
  const start = Math.max(before.lastIndexOf("import"), before.lastIndexOf("export"));
  if (start < 0) return false;
  // `import type from "../x.ts"` imports a default export named `type`: not type-only.
  return /^(import|export)\s+type\s+(?!from\b)[\w${*]/.test(code.slice(start, index + 4));
}

/** Not a property (`x.import`, `x.from`) and not part of a longer name. */
function isKeyword(code: string, index: number): boolean {
  const before = code.slice(0, index).trimEnd();
  return !before.endsWith(".") && !/[\w$]$/.test(code.slice(0, index));
}

/**
 * Replaces comments with spaces and the contents of string and template
 * literals with placeholders, keeping every offset, so the import patterns
 * see only code (a quote stays where the literal starts).
 */
function blankCommentsAndStrings(source: string): string {
  const out = source.split("");
  let i = 0;
  const blank = (from: number, to: number) => {
    for (let k = from; k < to; k++) if (out[k] !== "\n") out[k] = " ";
  };
  const templateDepth: number[] = [];
  let braceDepth = 0;
  while (i < source.length) {
    const c = source[i], next = source[i + 1];
    if (c === "/" && next === "/") {
      const end = source.indexOf("\n", i);
      const stop = end === -1 ? source.length : end;
      blank(i, stop);
      i = stop;
    } else if (c === "/" && next === "*") {
      const end = source.indexOf("*/", i + 2);
      const stop = end === -1 ? source.length : end + 2;
      blank(i, stop);
      i = stop;
    } else if (c === '"' || c === "'") {
      let k = i + 1;
      while (k < source.length && source[k] !== c && source[k] !== "\n") k += source[k] === "\\" ? 2 : 1;
      blank(i + 1, k);
      i = k + 1;
    } else if (c === "`" || (c === "}" && templateDepth.at(-1) === braceDepth)) {
      if (c === "}") templateDepth.pop();
      let k = i + 1;
      while (k < source.length && source[k] !== "`" && !(source[k] === "$" && source[k + 1] === "{")) {
        k += source[k] === "\\" ? 2 : 1;
      }
      blank(i + 1, k);
      if (source[k] === "$") {
        templateDepth.push(braceDepth);
        i = k + 2;
      } else {
        i = k + 1;
      }
    } else {
      if (c === "{") braceDepth++;
      else if (c === "}") braceDepth--;
      i++;
    }
  }
  return out.join("");
}
