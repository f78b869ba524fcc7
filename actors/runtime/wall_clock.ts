/**
 * @module
 * The wall clock: paces deliveries so that simulated time runs `speed`
 * simulated ms per wall ms. The world's time source is injected, so nothing
 * under `actors/` reads the wall clock itself.
 */
/** A source of wall time, supplied by the program that runs the simulation. */
export interface WallTime {
  /** Monotonic wall time in ms (the host's high-resolution clock). */
  now(): number;
  /**
   * Resolves after `ms` wall milliseconds (a host timer), or as soon
   * as `signal` aborts — and then must leave no timer behind.
   */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

/**
 * Maps simulated time onto the wall: simulated time t is due at wall time
 * `start + t / speed`.
 */
export class WallClock {
  readonly speed: number;
  readonly #time: WallTime;
  #startWallMs: number;

  /**
   * @param time The wall time source.
   * @param speed Simulated ms per wall ms; 1 is real time.
   * @throws {RangeError} when speed is not a finite number > 0.
   */
  constructor(time: WallTime, speed: number) {
    if (!(speed > 0 && Number.isFinite(speed))) {
      throw new RangeError(`WallClock: speed must be a finite number > 0, got ${speed}`);
    }
    this.#time = time;
    this.speed = speed;
    this.#startWallMs = time.now();
  }

  /** Makes simulated time 0 due now. */
  restart(): void {
    this.#startWallMs = this.#time.now();
  }

  /** The simulated time the wall has reached. */
  simNowMs(): number {
    return (this.#time.now() - this.#startWallMs) * this.speed;
  }

  /** Wall ms until simulated `timeMs` is due (<= 0 when it is). */
  wallMsUntil(timeMs: number): number {
    return this.#startWallMs + timeMs / this.speed - this.#time.now();
  }

  /** Sleeps `ms` of wall time, or until `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return this.#time.sleep(ms, signal);
  }

  /** Wall time now, from the injected source. */
  wallNowMs(): number {
    return this.#time.now();
  }
}
