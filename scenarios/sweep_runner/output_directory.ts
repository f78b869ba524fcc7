/**
 * @module
 * Where a sweep or a merge writes. Each committed sweep file
 * `scenarios/sweeps/NAME.json` has a home — `results/` for `default.json`,
 * `results/NAME/` for the others — that only that sweep may write; `--out`
 * resolves against the caller's directory and, symlinks resolved, must stay
 * inside `results/`.
 */
import { basename, dirname, extname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { fromCaller } from "../cli/caller_directory.ts";
import { specHash } from "./sweep_journal.ts";
import { UsageError } from "../cli/usage_error.ts";

const REPO = fileURLToPath(new URL("../../", import.meta.url));

/** The repository's `results/` directory (absolute). */
export const RESULTS_DIR = join(REPO, "results");

/** Where the committed sweep files live (absolute). */
export const SWEEPS_DIR = join(REPO, "scenarios", "sweeps");

/** A committed sweep file and the directory its results live in. */
export interface CommittedSweep {
  /** `default`, `quick`, `mooncake_batching`… (the file's stem). */
  readonly name: string;
  /** Absolute path of the sweep file. */
  readonly file: string;
  /** Absolute path of its results: `results/` for `default`, else `results/NAME`. */
  readonly home: string;
  /** Hash of its spec, as a journal records it: equal hashes are the same sweep. */
  readonly specHash: string;
}

/** The home of the committed sweep `name`. */
export function homeOf(name: string): string {
  return name === "default" ? RESULTS_DIR : join(RESULTS_DIR, name);
}

/** Every sweep file in `scenarios/sweeps/`, with its home. */
export async function committedSweeps(): Promise<CommittedSweep[]> {
  const sweeps: CommittedSweep[] = [];
  for await (const entry of Deno.readDir(SWEEPS_DIR)) {
    if (!entry.isFile || extname(entry.name) !== ".json") continue;
    const name = basename(entry.name, ".json");
    const file = await Deno.realPath(join(SWEEPS_DIR, entry.name));
    const spec = JSON.parse(await Deno.readTextFile(file));
    sweeps.push({ name, file, home: homeOf(name), specHash: specHash(spec) });
  }
  return sweeps.sort((a, b) => a.name.localeCompare(b.name));
}

/** What identifies the sweep being written, to pick and check its output directory. */
export interface OutputDirectoryOptions {
  /** `--out` as the user gave it, if given. */
  readonly out?: string;
  /** Hash of the sweep's spec (`specHash`). */
  readonly specHash: string;
  /** The router plugin the sweep adds, as a path or `file:` URL, if any. */
  readonly plugin?: string;
  /** The sweep file, as given or absolute, when there is one (not for `merge`). */
  readonly specFile?: string;
}

/**
 * The output directory of a sweep, checked but not created — relative to the
 * working directory when inside it (`results/quick`), else absolute:
 * `--out` resolved against the caller's directory, or the sweep's own default
 * — a committed sweep's home, `results/plugin-<plugin>[-<spec>]` for a sweep
 * with a plugin, `results/<stem>` for another sweep file.
 * @throws {UsageError} for an empty `--out`, one that names a file, one that
 *   is the home of a different committed sweep, or one whose real path
 *   (symlinks resolved) is outside `results/`.
 */
export async function outputDirectory(options: OutputDirectoryOptions): Promise<string> {
  const committed = await committedSweeps();
  // A committed sweep is itself when run from its file (edited or not) or from an identical spec.
  const specFile = options.specFile === undefined
    ? undefined
    : await Deno.realPath(fromCaller(options.specFile)).catch(() => undefined);
  const matched = committed.find((c) => c.file === specFile) ??
    committed.find((c) => c.specHash === options.specHash);
  const own = options.plugin !== undefined ? undefined : matched;
  const described = own ? `scenarios/sweeps/${own.name}.json` : describeSweep(options);
  let out: string;
  if (options.out === undefined) {
    out = defaultDirectory(options, own, matched);
  } else {
    if (options.out.trim() === "") throw new UsageError(`--out: expected a directory, got "${options.out}"`);
    out = fromCaller(options.out);
  }
  const shown = options.out ?? relative(REPO, out);
  const realOut = await realPathOf(out, `--out ${shown}`);
  for (const other of committed) {
    if (other === own || realOut !== await realPathOf(other.home, other.home)) continue;
    throw new UsageError(
      `${options.out === undefined ? "the default output directory" : "--out"} ${shown} ` +
        `is the home of scenarios/sweeps/${other.name}.json; ` +
        `${described} must not overwrite its results: give another --out under results/`,
    );
  }
  const info = await Deno.stat(out).catch(() => undefined);
  if (info !== undefined && !info.isDirectory) {
    throw new UsageError(`--out: "${shown}" is a file, expected a directory`);
  }
  await assertInsideResults(out, `--out ${shown}`);
  const fromWorkingDirectory = relative(Deno.cwd(), out);
  return fromWorkingDirectory.startsWith("..") || fromWorkingDirectory === "" ? out : fromWorkingDirectory;
}

function describeSweep(options: OutputDirectoryOptions): string {
  if (options.plugin !== undefined) return `a sweep with the plugin ${stem(options.plugin)}`;
  return options.specFile !== undefined ? `the sweep ${basename(options.specFile)}` : "this sweep";
}

/**
 * The home of a sweep run without `--out`: its own when it is a committed
 * sweep; `results/<stem>` for another sweep file; for a sweep with a plugin,
 * a home named from the plugin and the spec (see {@linkcode pluginHome}).
 */
function defaultDirectory(
  options: OutputDirectoryOptions,
  own: CommittedSweep | undefined,
  matched: CommittedSweep | undefined,
): string {
  if (options.plugin !== undefined) return pluginHome(options.plugin, matched, options.specFile);
  if (own !== undefined) return own.home;
  if (options.specFile === undefined) {
    throw new UsageError(
      "--out: needed, because this sweep is none of scenarios/sweeps/*.json (give --out results/NAME)",
    );
  }
  return homeOf(stem(options.specFile));
}

/**
 * A plugin sweep's home, named from the plugin and the spec, so two plugin
 * sweeps of different specs never share one: `results/plugin-<plugin>` for
 * the default study, `results/plugin-<plugin>-<NAME>` for the committed sweep
 * `NAME.json` (`--quick`: `-quick`), `results/plugin-<plugin>-<stem>` for
 * another sweep file. Without a sweep file (`merge` of a sweep that is none
 * of the committed ones) there is no name to give: `--out` is needed.
 */
function pluginHome(
  plugin: string,
  matched: CommittedSweep | undefined,
  specFile: string | undefined,
): string {
  const spec = matched?.name ?? (specFile === undefined ? undefined : stem(specFile));
  if (spec === undefined) {
    throw new UsageError(
      `--out: needed, because this sweep with the plugin ${
        stem(plugin)
      } is none of scenarios/sweeps/*.json ` +
        `(give --out results/NAME)`,
    );
  }
  return join(RESULTS_DIR, spec === "default" ? `plugin-${stem(plugin)}` : `plugin-${stem(plugin)}-${spec}`);
}

/** A file's name without directory or extension; accepts `file:` URLs. */
function stem(pathOrUrl: string): string {
  const path = pathOrUrl.startsWith("file:") ? fileURLToPath(pathOrUrl) : pathOrUrl;
  return basename(path, extname(path));
}

/**
 * Refuses a write to `path` unless its real path (every symlink resolved; for
 * a path not yet created, that of its nearest existing ancestor) lies inside
 * the real path of `results/` — or inside a directory this process was
 * explicitly granted write access to (the tests write to temporary
 * directories). The check is on the real path, where Deno's own permission
 * check reads only the path as written, which a symlink can send anywhere.
 * @throws {UsageError} naming `what` and where it leads.
 */
export async function assertInsideResults(path: string, what: string): Promise<void> {
  const real = await realPathOf(path, what);
  const root = await realPathOf(RESULTS_DIR, RESULTS_DIR);
  if (real === root || real.startsWith(root + sep)) return;
  if (Deno.permissions.querySync({ name: "write", path: real }).state === "granted") return;
  const written = resolve(path);
  throw new UsageError(
    written === real
      ? `${what}: outside results/ (the tasks write only under results/; use results/NAME)`
      : `${what}: leads through a symlink to ${real}, outside results/; refusing to write there`,
  );
}

/**
 * Creates directory `path` (and its parents), then checks that it is inside
 * `results/` (see {@linkcode assertInsideResults}).
 */
export async function makeDirectoryInside(path: string, what: string): Promise<void> {
  await assertInsideResults(path, what);
  await Deno.mkdir(path, { recursive: true });
  await assertInsideResults(path, what); // a symlink may have appeared meanwhile
}

/**
 * The real path of `path`, or, when it does not exist yet, the real path of
 * its nearest existing ancestor joined with the rest.
 * @throws {UsageError} when a part of the path is a file or a dangling symlink.
 */
async function realPathOf(path: string, what: string): Promise<string> {
  // Paths here are already resolved (outputDirectory resolved --out against the caller):
  // relative ones are relative to the working directory, where the files are written.
  let existing = resolve(path);
  const rest: string[] = [];
  for (;;) {
    try {
      return join(await Deno.realPath(existing), ...rest);
    } catch (error) {
      if (error instanceof Deno.errors.NotADirectory) {
        throw new UsageError(`${what}: a part of the path is a file, not a directory`);
      }
      if (!(error instanceof Deno.errors.NotFound)) throw error;
      if (await Deno.lstat(existing).then(() => true, () => false)) {
        throw new UsageError(
          `${what}: leads through a dangling symlink (${existing}); refusing to write there`,
        );
      }
      const parent = dirname(existing);
      if (parent === existing) throw error;
      rest.unshift(basename(existing));
      existing = parent;
    }
  }
}

/**
 * A tool's `--out` directory, created: `out` resolved against the caller's
 * directory, or `results/<name>` when absent; it must lie inside `results/`
 * (see {@linkcode makeDirectoryInside}).
 * @throws {UsageError} for an empty `--out`, or one outside `results/`.
 */
export async function toolOutputDirectory(out: string | undefined, name: string): Promise<string> {
  if (out !== undefined && out.trim() === "") {
    throw new UsageError(`--out: expected a directory, got "${out}"`);
  }
  const path = out === undefined ? join(RESULTS_DIR, name) : fromCaller(out);
  await makeDirectoryInside(path, `--out ${out ?? `results/${name}`}`);
  return path;
}
