/**
 * @module
 * The built-in policies as README documents them: a markdown table rendered
 * from the registry (actors/policies/mod.ts), which a test keeps README equal
 * to. `deno run scenarios/policy_docs.ts` prints it.
 */
import { describeBounds, POLICIES, type PolicyDescriptor, type PolicyReads } from "../actors/policies/mod.ts";
import { parameterFlag } from "./command_line.ts";

/** The comments README's generated policy table sits between. */
export const POLICY_TABLE_MARKERS = {
  begin: "<!-- policies:begin -->",
  end: "<!-- policies:end -->",
} as const;

/**
 * The policy table: one row per built-in policy, in registry order — its
 * name, what it reads from the instances' reports beyond queue counts, its
 * parameters (name, flag, default, bounds) and its rule. Columns are padded
 * the way `deno fmt` pads them, so README stays formatted.
 */
export function policyTable(): string {
  const rows = [
    ["policy", "reads (beyond queue counts)", "parameters: default, bounds", "rule"],
    ...POLICIES.map((descriptor) =>
      [
        `\`${descriptor.name}\``,
        readsCell(descriptor.reads),
        parametersCell(descriptor),
        descriptor.summary,
      ].map(escapeCell)
    ),
  ];
  const widths = rows[0].map((_, column) => Math.max(3, ...rows.map((row) => width(row[column]))));
  const line = (cells: readonly string[]) =>
    `| ${cells.map((cell, column) => cell + " ".repeat(widths[column] - width(cell))).join(" | ")} |`;
  return [line(rows[0]), line(widths.map((w) => "-".repeat(w))), ...rows.slice(1).map(line)].join("\n");
}

/** The table between README's markers, as README should hold it. */
export function policyTableSection(): string {
  return `${POLICY_TABLE_MARKERS.begin}\n\n${policyTable()}\n\n${POLICY_TABLE_MARKERS.end}`;
}

function readsCell(reads: PolicyReads): string {
  const what = [
    reads.blocks && "prefix matches",
    reads.load && "engine load",
    reads.requests && "its own per-request load",
  ].filter(Boolean);
  return what.length > 0 ? what.join(", ") : "—";
}

function parametersCell(descriptor: PolicyDescriptor): string {
  const parameters = Object.entries(descriptor.params).map(([key, parameter]) =>
    `\`${key}\` (\`--${parameterFlag(key)}\`): ${parameter.default}, ${describeBounds(parameter)}`
  );
  return parameters.length > 0 ? parameters.join("<br>") : "—";
}

function escapeCell(text: string): string {
  return text.replaceAll("|", "\\|");
}

/** Characters as `deno fmt` counts them when it pads a table (code points). */
function width(text: string): number {
  return [...text].length;
}

if (import.meta.main) console.log(policyTableSection());
