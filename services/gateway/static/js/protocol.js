// The wire format of docs/protocol.md (version 1): binary frame header and PCM16 conversion.
// Pure functions only; nothing here touches the DOM or the socket.

export const PROTOCOL_VERSION = 1;
export const SAMPLE_RATE_IN = 16000;

export const Kind = Object.freeze({ AUDIO_IN: 1, JPEG: 2, AUDIO_OUT: 3 });

export const HEADER_BYTES = 16;

// offset 0 kind u8 | 1 flags u8 | 2 reserved u16 LE | 4 seq u32 LE | 8 timestamp ms f64 LE | 16 payload
export function encodeFrame(kind, seq, timestampMs, payload) {
  const bytes = new Uint8Array(HEADER_BYTES + payload.byteLength);
  const view = new DataView(bytes.buffer);
  view.setUint8(0, kind);
  view.setUint8(1, 0);
  view.setUint16(2, 0, true);
  view.setUint32(4, seq >>> 0, true);
  view.setFloat64(8, timestampMs, true);
  bytes.set(new Uint8Array(payload.buffer, payload.byteOffset, payload.byteLength), HEADER_BYTES);
  return bytes.buffer;
}

export function decodeFrame(buffer) {
  if (buffer.byteLength < HEADER_BYTES) return null;
  const view = new DataView(buffer);
  return {
    kind: view.getUint8(0),
    seq: view.getUint32(4, true),
    timestampMs: view.getFloat64(8, true),
    payload: new DataView(buffer, HEADER_BYTES),
  };
}

// Float samples in [-1, 1] -> 16-bit little-endian PCM bytes (DataView, so the byte order never depends on the CPU).
export function floatToPcm16(samples) {
  const view = new DataView(new ArrayBuffer(samples.length * 2));
  for (let i = 0; i < samples.length; i++) {
    const s = Math.max(-1, Math.min(1, samples[i]));
    view.setInt16(i * 2, s < 0 ? s * 0x8000 : s * 0x7fff, true);
  }
  return new Uint8Array(view.buffer);
}

export function pcm16ToFloat(view) {
  const count = view.byteLength >> 1;
  const samples = new Float32Array(count);
  for (let i = 0; i < count; i++) samples[i] = view.getInt16(i * 2, true) / 0x8000;
  return samples;
}
