/**
 * @module
 * Locks down a Worker before a router plugin is imported into it: the
 * built-in objects our code shares with the plugin cannot be changed (a
 * SES-style "lockdown"), and what a plugin may not do from its Worker — post
 * messages, start Workers, end or signal the process — throws, naming the rule.
 */

/** A plugin did what its Worker forbids (post a message, start a Worker, end its Worker, signal the process). */
export class PluginSandboxError extends Error {
  constructor(what: string) {
    super(`a router plugin may not ${what}`);
    this.name = "PluginSandboxError";
  }
}

/** The start of every error a plugin gets when it changes a built-in object. */
export const BUILT_IN_CHANGE = "a router plugin may not modify built-in objects";

/**
 * Data properties of frozen prototypes that code assigns on its own
 * instances (`this.name = …` in an `Error` subclass, Deno's own errors
 * included). Frozen as they are, such an assignment would throw (JavaScript's
 * "override mistake"); each becomes an accessor pair whose setter gives the
 * instance an own property instead — SES's "override taming", kept to the
 * properties that need it. (`Object.prototype`'s are not frozen: see
 * {@linkcode lockDownWorker}.)
 */
const OVERRIDABLE: readonly (readonly [prototype: object, keys: readonly PropertyKey[]])[] = [
  [Function.prototype, ["toString"]],
  ...[Error, EvalError, RangeError, ReferenceError, SyntaxError, TypeError, URIError, AggregateError].map(
    (type) => [type.prototype, ["constructor", "name", "message", "toString"]] as const,
  ),
];

/** Globals a plugin may not call, and what it is told when it tries. */
const REFUSED_GLOBALS: Readonly<Record<string, string>> = {
  postMessage: "post messages",
  Worker: "start Workers",
  MessageChannel: "open message channels",
  BroadcastChannel: "open message channels",
  close: "call close()",
};

/**
 * Globals left mutable: Deno's `console` keeps state on itself
 * (`console.group`), and Node's `process` is an event emitter Deno's own
 * Node layer writes to. Their bindings are still locked; our Worker code
 * uses neither.
 */
const LEFT_MUTABLE: ReadonlySet<string> = new Set(["console", "process"]);

let lockedDown = false;
let intact: () => boolean = () => true;

/** Whether this Worker has been locked down for a plugin. */
export function isLockedDown(): boolean {
  return lockedDown;
}

/**
 * Locks this Worker down for a router plugin (once; nothing in a main
 * thread). Call it after our own Worker code has taken what it needs (its
 * reply function, `self.close`), and before importing the plugin:
 *
 * - `postMessage` (global and `MessagePort.prototype`'s), `Worker`,
 *   `MessageChannel`, `BroadcastChannel`, `close()`, `Deno.exit` and
 *   `Deno.kill` throw a
 *   {@linkcode PluginSandboxError}: the host hears only our protocol, and a
 *   plugin starts no thread and neither ends nor signals the process
 *   (`Deno.kill(Deno.pid, …)` needs no permission).
 * - Every object reachable from `globalThis` — constructors, prototypes,
 *   namespaces (`Math`, `JSON`, `Deno`…), and the iterator and generator
 *   prototypes only instances reach — is frozen, and the global object's own
 *   properties cannot be replaced: a plugin assigning to them fails (a
 *   `TypeError`: modules are strict).
 * - `Array.prototype` and `Object.prototype` are sealed instead (frozen,
 *   V8 takes a slow path for every store that grows an array: a plugin run
 *   would simulate ~25% slower), and their methods are checked
 *   ({@linkcode assertBuiltInsIntact}) after each call into the plugin and
 *   before each run or delivery: a plugin that replaces one fails there.
 */
export function lockDownWorker(): void {
  if (lockedDown || !("WorkerGlobalScope" in globalThis)) return;
  lockedDown = true;
  // Deno's core takes its native queueMicrotask off the global object on first use: let it now.
  queueMicrotask(() => {});
  refuseCapabilities();
  for (const [prototype, keys] of OVERRIDABLE) for (const key of keys) tameOverride(prototype, key);
  const roots: unknown[] = [...hiddenIntrinsics(), Object.getPrototypeOf(globalThis)];
  for (const key of Reflect.ownKeys(globalThis)) {
    if (LEFT_MUTABLE.has(key as string)) continue;
    const descriptor = Reflect.getOwnPropertyDescriptor(globalThis, key)!;
    // A lazily loaded global (`TextDecoder`, `URL`…) is loaded now, to be frozen too.
    roots.push(
      descriptor.get ? descriptor.get.call(globalThis) : descriptor.value,
      descriptor.get,
      descriptor.set,
    );
  }
  Object.seal(Array.prototype);
  Object.seal(Object.prototype);
  intact = intactCheck({ "Array.prototype": Array.prototype, "Object.prototype": Object.prototype });
  harden(roots, new Set([globalThis, Array.prototype, Object.prototype]));
  lockGlobalObject();
}

/**
 * Throws when a plugin has replaced a method of `Array.prototype` or
 * `Object.prototype` (sealed, not frozen: see {@linkcode lockDownWorker}).
 * Costs about a nanosecond (V8 tracks the fields as constant). Does nothing
 * in a Worker not locked down.
 * @throws {PluginSandboxError} naming the first method replaced.
 */
export function assertBuiltInsIntact(): void {
  if (intact()) return;
  // Found with index loops only: the replaced method may be the one a for-of would call.
  for (let i = 0; i < snapshot.length; i++) {
    const { name, target, properties } = snapshot[i];
    for (let k = 0; k < properties.length; k++) {
      const key = properties[k][0];
      if (Reflect.get(target, key) !== properties[k][1]) {
        throw new PluginSandboxError(`modify built-in objects: ${name}.${String(key)} was replaced`);
      }
    }
  }
}

/** Each sealed prototype's writable properties as the lockdown found them. */
const snapshot: { name: string; target: object; properties: (readonly [PropertyKey, unknown])[] }[] = [];

/**
 * A function that tells whether every writable property of `objects` still
 * holds its value, compiled to one expression of named loads: V8 turns it
 * into constant checks (a loop over the keys costs ~600 ns, this ~1 ns).
 */
function intactCheck(objects: Readonly<Record<string, object>>): () => boolean {
  const names: string[] = [], values: unknown[] = [], tests: string[] = [];
  const bind = (value: unknown) => {
    names.push(`v${values.length}`);
    values.push(value);
    return names[names.length - 1];
  };
  for (const [name, object] of Object.entries(objects)) {
    const target = bind(object);
    const kept: (readonly [PropertyKey, unknown])[] = [];
    for (const key of Reflect.ownKeys(object)) {
      const descriptor = Reflect.getOwnPropertyDescriptor(object, key)!;
      if (!("value" in descriptor) || !descriptor.writable) continue;
      kept.push([key, descriptor.value]);
      const property = typeof key === "symbol" ? `[${bind(key)}]` : `[${JSON.stringify(key)}]`;
      tests.push(`${target}${property} === ${bind(descriptor.value)}`);
    }
    snapshot.push({ name, target: object, properties: kept });
  }
  const make = new Function(
    ...names,
    `"use strict"; return function intact() { return ${tests.join(" && ")}; };`,
  );
  return make(...values);
}

/** Replaces what a plugin may not call by functions that throw, before anything is frozen. */
function refuseCapabilities(): void {
  const refuse = (what: string) =>
    function refused(): never {
      throw new PluginSandboxError(what);
    };
  const replace = (target: object, key: string, value: unknown) => {
    if (Object.getOwnPropertyDescriptor(target, key)?.configurable === false) return;
    Object.defineProperty(target, key, { value, writable: false, configurable: false });
  };
  for (const [key, what] of Object.entries(REFUSED_GLOBALS)) replace(globalThis, key, refuse(what));
  replace(MessagePort.prototype, "postMessage", refuse("post messages"));
  replace(Deno, "exit", refuse("call Deno.exit"));
  replace(Deno, "kill", refuse("call Deno.kill"));
  // Deno's internals (its `core`: error classes, promise hooks, a few ops) are no plugin's business.
  const internal = (Deno as unknown as { internal: symbol }).internal;
  delete (Deno as unknown as Record<symbol, unknown>)[internal];
}

/** Turns `prototype[key]`, a data property, into a getter, and a setter that shadows it on the instance. */
function tameOverride(prototype: object, key: PropertyKey): void {
  const descriptor = Object.getOwnPropertyDescriptor(prototype, key);
  if (descriptor === undefined || !("value" in descriptor)) return;
  const value = descriptor.value;
  Object.defineProperty(prototype, key, {
    get: function get() {
      return value;
    },
    set: function set(this: object, replacement: unknown) {
      if (this === prototype) {
        throw new TypeError(`${BUILT_IN_CHANGE}: cannot assign to ${String(key)} of a shared prototype`);
      }
      if (Object.hasOwn(this, key)) {
        (this as Record<PropertyKey, unknown>)[key] = replacement;
      } else {
        Object.defineProperty(this, key, {
          value: replacement,
          writable: true,
          enumerable: true,
          configurable: true,
        });
      }
    },
    enumerable: descriptor.enumerable,
    configurable: false,
  });
}

/** The intrinsics no global names, reached from instances (iterators, generators, async functions). */
function* hiddenIntrinsics(): Generator<unknown> {
  const proto = Object.getPrototypeOf;
  yield proto([][Symbol.iterator]());
  yield proto(new Map()[Symbol.iterator]());
  yield proto(new Set()[Symbol.iterator]());
  yield proto(""[Symbol.iterator]());
  yield proto("".matchAll(/(?:)/g));
  yield proto(function* () {});
  yield proto(async function () {});
  yield proto(async function* () {});
  yield proto(proto(async function* () {}).prototype);
  yield proto(Iterator.from([]).map((x) => x));
  yield proto(Iterator.from({ next: () => ({ done: true, value: undefined }) }));
  yield proto(new Intl.Segmenter().segment(""));
  yield proto(new Intl.Segmenter().segment("")[Symbol.iterator]());
  yield Object.getOwnPropertyDescriptor(Function.prototype, "caller")?.get; // %ThrowTypeError%
}

/**
 * Freezes every object reachable from `roots` through prototypes and own
 * properties (values, getters, setters), except those in `except` (which are
 * still walked through).
 */
function harden(roots: readonly unknown[], except: ReadonlySet<unknown>): void {
  const seen = new Set<unknown>();
  const queue: object[] = [];
  const visit = (value: unknown) => {
    if (((typeof value === "object" && value !== null) || typeof value === "function") && !seen.has(value)) {
      seen.add(value);
      queue.push(value);
    }
  };
  roots.forEach(visit);
  while (queue.length > 0) {
    const object = queue.pop()!;
    if (object === globalThis) continue;
    if (!except.has(object)) {
      try {
        Object.freeze(object);
      } catch {
        // A typed array with elements cannot be frozen (none is reachable from the globals).
      }
    }
    visit(Object.getPrototypeOf(object));
    for (const key of Reflect.ownKeys(object)) {
      const descriptor = Reflect.getOwnPropertyDescriptor(object, key);
      visit(descriptor?.value);
      visit(descriptor?.get);
      visit(descriptor?.set);
    }
  }
}

/**
 * The global object stays extensible (a plugin may add names of its own),
 * but none of its properties can be replaced or deleted. Accessors keep their
 * setters (`onmessage` still works) but cannot be redefined.
 */
function lockGlobalObject(): void {
  for (const key of Reflect.ownKeys(globalThis)) {
    const descriptor = Reflect.getOwnPropertyDescriptor(globalThis, key)!;
    if (!descriptor.configurable) continue;
    Object.defineProperty(
      globalThis,
      key,
      "value" in descriptor ? { writable: false, configurable: false } : { configurable: false },
    );
  }
}

/** The sandbox a plugin loader takes (actors/policies/plugin_policy.ts's `PluginSandbox`). */
export const PLUGIN_SANDBOX: { readonly lockDown: () => void; readonly check: () => void } = Object.freeze({
  lockDown: lockDownWorker,
  check: assertBuiltInsIntact,
});

/** What V8 says when code assigns to, adds to, redefines or deletes from a frozen or sealed object. */
const FROZEN_COMPLAINT =
  /^Cannot (assign to read only property|add property|redefine property|delete property|define property|freeze|set property)/;

/**
 * `message` with the rule it broke named, when it is V8's complaint about a
 * frozen built-in (`Cannot assign to read only property 'max' of object
 * '#<Object>'`); else `message` unchanged. Applies only in a locked-down
 * Worker, where our own code makes no such assignment.
 */
export function explainLockdown(message: string): string {
  return lockedDown && FROZEN_COMPLAINT.test(message) ? `${BUILT_IN_CHANGE}: ${message}` : message;
}
