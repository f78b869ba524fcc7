/**
 * @module
 * Worker entry for the model's actors in real-time mode: offers the factories
 * of `actor_factories.ts` to the runtime's host.
 */
import * as factories from "./actor_factories.ts";
import { serveActor } from "./runtime/worker_host.ts";

serveActor(factories);
