/**
 * @module
 * A waiting queue served highest priority first and first in, first out
 * within a priority: the FIFO model's queue, where request classes set priorities.
 */
import { Queue } from "mnemonist";

/** One priority's items, in arrival order. */
interface Level<T> {
  readonly priority: number;
  readonly queue: Queue<T>;
}

/**
 * Items dequeue highest priority first, FIFO within a priority; an item
 * without a priority counts as priority 0. With one priority only it is a
 * plain FIFO queue.
 *
 * @example
 * ```ts
 * const queue = new PriorityFifo<{ id: number; priority?: number }>((item) => item.priority);
 * queue.enqueue({ id: 0 });
 * queue.enqueue({ id: 1, priority: 2 });
 * queue.dequeue(); // { id: 1, priority: 2 }
 * ```
 */
export class PriorityFifo<T> {
  readonly #priorityOf: (item: T) => number | undefined;
  /** Highest priority first; never empty. */
  readonly #levels: Level<T>[] = [{ priority: 0, queue: new Queue<T>() }];
  #size = 0;

  /** @param priorityOf An item's priority (higher is served first); undefined counts as 0. */
  constructor(priorityOf: (item: T) => number | undefined) {
    this.#priorityOf = priorityOf;
  }

  /** Items waiting. */
  get size(): number {
    return this.#size;
  }

  /** Adds `item` behind every item of its priority and ahead of every lower one. */
  enqueue(item: T): void {
    const priority = this.#priorityOf(item) ?? 0;
    const levels = this.#levels;
    let i = 0;
    while (i < levels.length && levels[i].priority > priority) i++;
    if (i === levels.length || levels[i].priority !== priority) {
      levels.splice(i, 0, { priority, queue: new Queue<T>() });
    }
    levels[i].queue.enqueue(item);
    this.#size++;
  }

  /** Removes and returns the first item of the highest priority waiting, or undefined when empty. */
  dequeue(): T | undefined {
    if (this.#size === 0) return undefined;
    this.#size--;
    const levels = this.#levels;
    if (levels.length === 1) return levels[0].queue.dequeue();
    for (const level of levels) if (level.queue.size > 0) return level.queue.dequeue();
    return undefined;
  }
}
