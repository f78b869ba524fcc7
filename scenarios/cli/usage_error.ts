/**
 * @module
 * The error for a user's mistake (bad flag, bad scenario, missing file): the
 * command-line tools print its message on one line and exit 2.
 */

/** A mistake in what the user asked for; its message names field, value and expectation. */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}
