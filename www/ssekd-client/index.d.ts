// TypeScript declarations of ssekd-client (docs/client.md describes every option).

// ---- stream.js ------------------------------------------------------------------------------

/** Where the last event id of each stream is kept (sessionStorage by default). */
export interface IdStorage {
  getItem(key: string): string | null;
  setItem(key: string, value: string): void;
  removeItem(key: string): void;
}

/** A fetch()-like function: openStream reads the stream and posts renewals through it. */
export type Transport = (url: string, init: RequestInit) => Promise<Response>;

export interface StreamOptions {
  /** Keeps the last id under "ssekd:last-id:" + url; null keeps it in memory only. */
  storage?: IdStorage | null;
  /** Gives a token for `Authorization: Bearer`; called again on a 401/403 and on a challenge. */
  token?: () => Promise<string>;
  /** Reconnect backoff in ms: min is the base when the server sends no `retry:`, max the cap. */
  retry?: { min?: number; max?: number };
  /** Start from this id instead of the stored one. */
  lastEventId?: string;
  /** Used instead of fetch(). */
  transport?: Transport;
  /** Extra request headers for the stream. */
  headers?: Record<string, string>;
}

export interface StreamEvent {
  /** The SSE event type: "message" by default, "delete" for a tombstone, or custom. */
  type: string;
  data: string;
  /** The last event id (the stream's position after this event), or null. */
  id: string | null;
  /** On several-topic routes: the topic this event is of. */
  topic?: string;
}

export type StreamState = "connecting" | "open" | "waiting" | "closed";

export interface StateInfo {
  /** Why the stream waits or closed. */
  reason?: string;
  /** The HTTP status that closed it, or of a renewal POST. */
  status?: number;
  /** How long it waits before it reconnects, in ms ("waiting"). */
  delay?: number;
  /** After a challenge: whether the renewal was accepted (204). */
  renewed?: boolean;
}

export interface Stream {
  /**
   * Listen for an event type ("message", "delete", custom), "topic:<name>" for one topic of a
   * several-topic route, "*" for every event, or ":" for comments. Returns an unsubscribe.
   */
  on(type: string, handler: (event: StreamEvent) => void): () => void;
  onState(handler: (state: StreamState, info: StateInfo) => void): () => void;
  readonly state: StreamState;
  readonly info: StateInfo;
  readonly lastEventId: string | null;
  close(): void;
}

export function openStream(url: string, options?: StreamOptions): Stream;

// ---- collection.js --------------------------------------------------------------------------

export interface CollectionOptions<V = unknown> {
  /** Take the key from this JSON field of the value ("id", or a JSON pointer "/owner/id")
   * instead of the key-form id. */
  key?: string;
  /** How the route's key-form ids write the key: "base64" (`["${base64(key)}","${etag}"]`,
   * the default) or "text" (`["${key}","${etag}"]`). */
  keys?: "base64" | "text";
  /** On a several-topic stream: the topic the collection is of. */
  topic?: string;
  /** Turns an event's data into the value; by default JSON when it is JSON, else the text. */
  parse?: (data: string) => V;
  /** openStream options, when the collection is given a url (storage defaults to null). */
  stream?: StreamOptions;
}

export interface Collection<V = unknown> {
  /** The live map key -> value. */
  readonly map: Map<string, V>;
  /** The stream the collection reads. */
  readonly stream: Stream;
  /** Called for each change: the new value, or undefined when the key was deleted. */
  onChange(handler: (key: string, value: V | undefined) => void): () => void;
  /** Resolves on the first catch-up signal (the route's `with.event.caught-up`): the map holds
   * what the cache held when the stream connected. */
  readonly caughtUp: Promise<void>;
  /** True from a catch-up signal until the stream drops (it comes again after a reconnect). */
  readonly isCaughtUp: boolean;
  /** Called on every catch-up signal: the first, and the one after each reconnect. */
  onCaughtUp(handler: () => void): () => void;
  /** Stops updating the map (and closes the stream the collection opened from a url). */
  close(): void;
}

/** A live map of a keyed stream: a Stream, or a url to open one with no stored last id. */
export function collection<V = unknown>(source: Stream | string,
                                        options?: CollectionOptions<V>): Collection<V>;

// ---- writes.js ------------------------------------------------------------------------------

export interface WriteOptions {
  ifMatch?: string;
  key?: string;
}

export interface Writer {
  put(path: string, body?: unknown, options?: WriteOptions): Promise<Response>;
  post(path: string, body?: unknown, options?: WriteOptions): Promise<Response>;
  delete(path: string, body?: unknown, options?: WriteOptions): Promise<Response>;
}

/** A 412: somebody else wrote first; `current` is the value that is there now. */
export class Conflict extends Error {
  readonly status: 412;
  readonly current: unknown;
}

export function writer(base: string, options?: Record<string, unknown>): Writer;

// ---- tabs.js --------------------------------------------------------------------------------

/** Same as openStream, but the tabs of one origin reading the same url share one connection. */
export function sharedStream(url: string, options?: StreamOptions): Stream;
