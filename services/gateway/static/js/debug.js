// A read-only view of the page's state for tests and for curious users (window.sottoDebug in the console).

const MAX_EVENTS = 500;
const events = [];

export const counters = { audio: 0, jpeg: 0 };

// direction: 'in' (from the server) or 'out' (to the server); message: the JSON event or a short description.
export function logEvent(direction, message) {
  events.push({ dir: direction, t: Date.now(), ...message });
  if (events.length > MAX_EVENTS) events.shift();
}

export function exposeDebug(read) {
  window.sottoDebug = Object.freeze({
    get playedSamples() { return read.playedSamples(); },
    get playback() { return read.playback(); },
    get gain() { return read.gain(); },
    get framesSent() { return { ...counters }; },
    get state() { return read.state(); },
    get vad() { return read.vad(); },
    get suppressedBargeIns() { return read.suppressedBargeIns(); },
    get receivedSamples() { return read.receivedSamples(); },
    get events() { return events.map((e) => ({ ...e })); },
  });
}
