// ssekd-client: one import for every part. Each part is also its own module
// (ssekd-client/stream.js, ...), so a page that needs one part loads only that.
export { openStream } from "./stream.js";
export { collection } from "./collection.js";
export { writer, Conflict, HttpError, etagOfId } from "./writes.js";
export { sharedStream } from "./tabs.js";
