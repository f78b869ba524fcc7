/**
 * @module
 * A status report with every field, for tests that only care about a few.
 */
import type { InstanceStatus } from "../actors/protocol.ts";

/** A status report of `instance`; unspecified counts are 0. */
export function status(
  instance: number,
  fields: Partial<Omit<InstanceStatus, "type" | "instance">> = {},
): InstanceStatus {
  return {
    type: "status",
    instance,
    waiting: 0,
    running: 0,
    queued: fields.waiting ?? 0,
    finished: 0,
    pendingPrefillTokens: 0,
    decodeBlocks: 0,
    kvUtilization: 0,
    ...fields,
  };
}
