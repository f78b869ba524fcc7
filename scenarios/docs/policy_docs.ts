/**
 * @module
 * The built-in policies as actors/policies/README.md documents them: a
 * markdown table rendered from the registry (actors/policies/mod.ts), which a
 * test keeps that page equal to. `deno run scenarios/docs/policy_docs.ts` prints it.
 */
import {
  describeBounds,
  POLICIES,
  type PolicyDescriptor,
  type PolicyReads,
} from "../../actors/policies/mod.ts";
import { parameterFlag } from "../scenario/command_line.ts";
import { markdownTable, markedSection } from "./markdown.ts";

/** The comments actors/policies/README.md's generated policy table sits between. */
export const POLICY_TABLE_MARKERS = {
  begin: "<!-- policies:begin -->",
  end: "<!-- policies:end -->",
} as const;

/**
 * The policy table: one row per built-in policy, in registry order — its
 * name, what it reads from the instances' reports beyond queue counts, its
 * parameters (name, flag, default, bounds) and its rule. Columns are padded
 * the way `deno fmt` pads them, so the page stays formatted.
 */
export function policyTable(): string {
  return markdownTable([
    ["policy", "reads (beyond queue counts)", "parameters: default, bounds", "rule"],
    ...POLICIES.map((descriptor) => [
      `\`${descriptor.name}\``,
      readsCell(descriptor.reads),
      parametersCell(descriptor),
      descriptor.summary,
    ]),
  ]);
}

/** The table between its markers, as actors/policies/README.md should hold it. */
export function policyTableSection(): string {
  return markedSection(POLICY_TABLE_MARKERS, policyTable());
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

if (import.meta.main) console.log(policyTableSection());
