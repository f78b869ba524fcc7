/**
 * @module
 * The actor runtime: kernel, event queue, clocks, random streams and errors.
 */
export * from "./kernel.ts";
export * from "./event_queue.ts";
export * from "./clock.ts";
export * from "./random_stream.ts";
export * from "./simulation_error.ts";
