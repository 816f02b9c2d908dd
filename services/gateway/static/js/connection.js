// One WebSocket session at a time, reconnected with exponential backoff when it closes.
//
// Events (EventTarget): 'message' (detail: parsed JSON event), 'frame' (detail: decoded binary frame),
// 'status' (detail: {state: 'connecting'|'open'|'reconnecting'|'closed', retryInMs?, code?}).
// `session.start` is sent first on every socket; media may be sent only after `session.ready`.

import { PROTOCOL_VERSION, decodeFrame, encodeFrame } from "./protocol.js";

const BACKOFF_FIRST_MS = 500;
const BACKOFF_MAX_MS = 15000;

// The gateway wants ?token= on /ws when it listens beyond loopback: the page passes on the one it was opened with.
export function socketUrl() {
  const url = new URL("/ws", location.href);
  url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
  const token = new URLSearchParams(location.search).get("token");
  url.search = token ? new URLSearchParams({ token }).toString() : "";
  return url.toString();
}

export class Connection extends EventTarget {
  constructor(url, sessionStartFields) {
    super();
    this.url = url;
    this.sessionStartFields = sessionStartFields; // () => fields of session.start beyond `protocol`
    this.ws = null;
    this.ready = false;
    this.failures = 0;
    this.retryTimer = null;
    this.stopped = true;
    this.seq = new Map(); // per kind, per session
  }

  start() {
    this.stopped = false;
    this._open();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    if (this.ws) this.ws.close(1000, "bye");
  }

  // Closes the current socket and opens a new session right away (used to apply a new voice).
  restart() {
    clearTimeout(this.retryTimer);
    this.stopped = false;
    this.failures = 0;
    if (this.ws && this.ws.readyState <= WebSocket.OPEN) {
      this.ws.onclose = null;
      this.ws.close(1000, "restart");
      this._closed(null);
    }
    this._open();
  }

  sendJson(message) {
    if (!this.ready) return false;
    this.ws.send(JSON.stringify(message));
    return true;
  }

  sendFrame(kind, timestampMs, payload) {
    if (!this.ready) return false;
    const seq = this.seq.get(kind) ?? 0;
    this.seq.set(kind, seq + 1);
    this.ws.send(encodeFrame(kind, seq, timestampMs, payload));
    return true;
  }

  _open() {
    this._status({ state: "connecting" });
    const ws = new WebSocket(this.url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onopen = () => {
      ws.send(JSON.stringify({ type: "session.start", protocol: PROTOCOL_VERSION, ...this.sessionStartFields() }));
    };
    ws.onmessage = (ev) => this._received(ev.data);
    ws.onclose = (ev) => {
      this._closed(ev);
      if (!this.stopped) this._scheduleRetry(ev.code);
    };
    // onerror is always followed by onclose, which does the work.
  }

  _received(data) {
    if (typeof data !== "string") {
      const frame = decodeFrame(data);
      if (frame) this.dispatchEvent(new CustomEvent("frame", { detail: frame }));
      return;
    }
    let message;
    try {
      message = JSON.parse(data);
    } catch {
      return; // the server only sends JSON text; a broken frame is not ours to fix
    }
    if (message.type === "session.ready") {
      this.ready = true;
      this.failures = 0;
      this.seq.clear();
      this._status({ state: "open" });
    }
    this.dispatchEvent(new CustomEvent("message", { detail: message }));
  }

  _closed(ev) {
    this.ready = false;
    this.ws = null;
    this._status({ state: "closed", code: ev ? ev.code : 1000 });
  }

  _scheduleRetry(code) {
    // 0.5 s, 1 s, 2 s ... capped at 15 s, with up to 20 % jitter so many tabs do not retry in step.
    const base = Math.min(BACKOFF_FIRST_MS * 2 ** this.failures, BACKOFF_MAX_MS);
    const retryInMs = Math.round(base * (1 + Math.random() * 0.2));
    this.failures += 1;
    this._status({ state: "reconnecting", retryInMs, code });
    this.retryTimer = setTimeout(() => this._open(), retryInMs);
  }

  _status(detail) {
    this.dispatchEvent(new CustomEvent("status", { detail }));
  }
}
