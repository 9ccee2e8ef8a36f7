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

export interface WriterOptions {
  /** Gives a token, sent as `Authorization: Bearer` on every attempt (again once after a 401). */
  token?: () => Promise<string>;
  /** Backoff in ms between attempts (jittered exponential, min..max) and how many attempts. */
  retry?: { min?: number; max?: number; attempts?: number };
  /** Seconds each GET of an async location asks the server to hold it (`Prefer: wait`); 20. */
  wait?: number;
  /** Send every write with `Prefer: respond-async`. */
  async?: boolean;
  /** Used instead of fetch(). */
  fetch?: (url: string, init: RequestInit) => Promise<Response>;
}

export interface WriteOptions {
  /** The version the write is conditional on: an ETag or a key-form event id. Default: the
   * ETag last read at the path (get() or seen()); null or "" sends no If-Match. */
  ifMatch?: string | null;
  /** The Idempotency-Key (default: a new crypto.randomUUID() per write). Pass the key of a
   * write that failed to send it again as the same write. */
  key?: string;
  /** Same as `key`. */
  idempotencyKey?: string;
  /** `Prefer: respond-async`: a 202 is followed to its Location until the final answer. */
  async?: boolean;
  /** Where a Conflict reads the current value (default: the written path); false: not read. */
  current?: string | false;
  headers?: HeadersInit;
  signal?: AbortSignal;
}

export interface ReadOptions {
  ifNoneMatch?: string;
  /** Seconds the server may hold the request (`Prefer: wait`) for a change or the item. */
  wait?: number;
  headers?: HeadersInit;
  signal?: AbortSignal;
}

export interface Answer<V = unknown> {
  status: number;
  ok: boolean;
  headers: Headers;
  etag: string | null;
  location: string | null;
  text: string;
  /** The body parsed as JSON for a JSON content type; the text otherwise. */
  value: V | string;
  /** How many times the request was sent. */
  attempts: number;
  /** The write's Idempotency-Key (null for a read). */
  idempotencyKey: string | null;
  /** For an async write answered 202: true, the location followed and how many GETs. */
  accepted?: boolean;
  polls?: number;
}

export interface Writer {
  get<V = unknown>(path: string, options?: ReadOptions): Promise<Answer<V>>;
  put<V = unknown>(path: string, body?: unknown, options?: WriteOptions): Promise<Answer<V>>;
  post<V = unknown>(path: string, body?: unknown, options?: WriteOptions): Promise<Answer<V>>;
  patch<V = unknown>(path: string, body?: unknown, options?: WriteOptions): Promise<Answer<V>>;
  delete<V = unknown>(path: string, body?: unknown, options?: WriteOptions): Promise<Answer<V>>;
  /** Remember the version of `path` last seen: an ETag, or a key-form event id; null forgets. */
  seen(path: string, etagOrId: string | null): void;
  /** The ETag remembered for `path`, or null. */
  etag(path: string): string | null;
}

/** A non-2xx answer after the retries. A network error is rethrown as fetch threw it, with
 * `idempotencyKey` set so that the write can be sent again as the same write. */
export class HttpError extends Error {
  readonly status: number;
  readonly answer: Answer;
}

/** A 412: somebody else wrote first. `current` is the value there now (null: gone; undefined:
 * could not be read), `etag` its ETag (also remembered for the path). */
export class Conflict<V = unknown> extends HttpError {
  readonly status: 412;
  readonly current: V | null | undefined;
  readonly etag: string | null;
}

/** The If-Match etag in a key-form event id (`["<base64url key>","<progress>/<etag>"]`). */
export function etagOfId(id: string): string | null;

export function writer(base: string, options?: WriterOptions): Writer;

// ---- tabs.js --------------------------------------------------------------------------------

export interface SharedStreamOptions extends StreamOptions {
  /** How many recent events each tab keeps, to answer a tab that joins and to drop repeats
   * across a handover (default 1000). */
  replay?: number;
}

export interface SharedStream extends Stream {
  /** Whether this tab holds the connection (undefined without Web Locks or BroadcastChannel,
   * where every tab has its own stream). */
  readonly leading?: boolean;
}

/**
 * Same as openStream, but the tabs of one origin reading the same url share one connection: the
 * tab holding the Web Lock "ssekd:stream:<url>" reads it and re-broadcasts each event on
 * BroadcastChannel "ssekd:stream:<url>"; when that tab goes, the next one takes over from the
 * last id it saw. The token (if any) is used by the leading tab only.
 */
export function sharedStream(url: string, options?: SharedStreamOptions): SharedStream;
