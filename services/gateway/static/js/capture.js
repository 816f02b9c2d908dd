// The microphone and the in-page Silero VAD (@ricky0123/vad-web MicVAD, served from /vendor/).
//
// SpeechCapture turns VAD callbacks into what the session needs:
//   onSpeechStart()       the VAD heard a first speech frame (maybe a cough): do not send yet
//   onSpeechConfirmed()   speech lasted minSpeechMs: it is a real utterance (first camera frame)
//   onMisfire()           it was too short, or held back by the barge-in gate: nothing was sent
//   onBargeIn()           while an answer plays, speech passed the barge-in gate: stop the answer
//   onAudio(frame, ts)    a 16 kHz Float32 frame to send, in order, starting with ~300 ms of pre-roll
//   onSpeechEnd(ms)       the VAD heard the end of speech (after a short silence): send audio.end
// Audio leaves the page only between onSpeechConfirmed and onSpeechEnd (plus the pre-roll), so a misfire sends nothing;
// and while the server holds the utterance open (hold(), after turn.hold), until finish() (speech.ended).
//
// The barge-in gate: while an answer plays (setGate(true)) residual echo of it can reach the VAD despite the
// browser's echo cancellation. Speech then interrupts only once it holds bargeInMinSpeechMs of frames at
// bargeInThreshold (the server's settings, from session.ready) that are also within bargeInLevelDb of the user's own
// speech level; until then a confirmed segment is held back, and one that dies first is counted as suppressed.
// Silero rates clean speech as speech at almost any level, so the level is what tells a faint echo of the answer
// from the user: the reference is the median frame level of the user's recent speech heard while nothing played, nor
// had just played (until the user has spoken once, the probability alone gates). Short words add up, across the pauses between
// them ("Wait, ... what"): the count starts again only after GATE_GAP_MS without counted speech.

import { createAudioContext } from "./audio-context.js";
import { describeMediaError, UserFacingError } from "./media-errors.js";

const VENDOR = "/vendor/";
const FRAME_SAMPLES = 512; // Silero v5 at 16 kHz
const FRAME_MS = (FRAME_SAMPLES / 16000) * 1000; // 32 ms
const PREROLL_FRAMES = Math.ceil(300 / FRAME_MS); // ~300 ms before the first speech frame
const MAX_PENDING_FRAMES = Math.ceil(3000 / FRAME_MS); // bound the buffer while speech is unconfirmed
const MAX_AFTER_END_FRAMES = Math.ceil(2000 / FRAME_MS); // kept after audio.end, in case the server holds the turn
const LEVEL_FRAMES = Math.ceil(10000 / FRAME_MS); // the user's speech level: the last ~10 s of their speech
const GATE_GAP_MS = 600; // a pause between the words of one interruption, longer than the VAD's end of segment
// The answer's echo goes on reaching the VAD for a while after playback stops (the echo path, the room, the VAD's own
// lag): speech heard within this time of it is not taken as the user's level.
const ECHO_TAIL_FRAMES = Math.ceil(500 / FRAME_MS);

// Browser audio processing, chosen deliberately:
// - echoCancellation ON: with speakers the assistant's own voice reaches the mic; without AEC the VAD would hear it
//   and barge in on itself. (Headphone users lose nothing.)
// - noiseSuppression ON: steady noise (fans, keyboard hum) is the main source of false speech starts, which here
//   mean false barge-ins; browser NS is mild on speech.
// - autoGainControl OFF: AGC raises the gain during pauses, so background noise creeps toward the VAD threshold and
//   the level of the audio sent to the model pumps within an utterance; Silero is robust to the input level anyway.
export const MIC_CONSTRAINTS = {
  channelCount: 1,
  echoCancellation: true,
  noiseSuppression: true,
  autoGainControl: false,
};

export async function openMicrophone() {
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    throw new UserFacingError(
      "This page cannot use the microphone here: open it as http://127.0.0.1 (or localhost), or over HTTPS.");
  }
  try {
    return await navigator.mediaDevices.getUserMedia({ audio: MIC_CONSTRAINTS });
  } catch (err) {
    throw new UserFacingError(describeMediaError(err, "microphone"));
  }
}

export class SpeechCapture {
  constructor(handlers) {
    this.handlers = handlers;
    // quiet | pending | gated (confirmed, waiting for the barge-in gate) | speaking | ending (audio.end sent) |
    // continuing (the server holds the utterance: every frame is sent)
    this.state = "quiet";
    this.ring = [];
    this.pending = [];
    this.afterEnd = [];
    this.gate = { on: false, threshold: 0.7, minMs: 160, levelDb: 6, floorDb: -Infinity, runMs: 0, gapMs: 0,
                  passed: false };
    this.userLevels = []; // dBFS of the user's speech frames heard while no answer played
    this.gateOffFrame = -Infinity; // frameIndex when the last answer stopped playing
    this.suppressed = 0;
    this.sentFrames = 0;
    this.frameIndex = 0;
    this.micVad = null;
    this.context = null;
  }

  // Loads the model and the WASM runtime before any microphone is open, so Start is quick.
  preload() {
    if (!window.vad || !window.ort) {
      return Promise.reject(new UserFacingError("The voice detector files did not load from /vendor/."));
    }
    this.loading ??= window.vad.MicVAD.new(this._options()).catch((err) => {
      this.loading = null; // let Start try again
      throw err;
    });
    return this.loading;
  }

  async start(stream) {
    // At 16 kHz where possible: the browser's band-limited resampler then converts the mic rate, and vad-web's
    // worklet resampler (a plain average of neighbouring samples) has nothing to do. Created after getUserMedia:
    // some browsers settle the device rate only once capture is open.
    for (const rate of [16000, undefined]) {
      const micVad = await this.preload();
      this.loading = null; // a failed start leaves a MicVAD unusable; a retry loads a fresh one (HTTP-cached)
      this.context = createAudioContext(rate);
      // MicVAD reads these two options only in start(); they exist only now.
      micVad.options.audioContext = this.context;
      micVad.options.getStream = async () => stream;
      try {
        await micVad.start();
        this.micVad = micVad;
        break;
      } catch (err) {
        await this.context.close();
        if (rate === undefined || this.context.sampleRate !== rate) throw err;
        // a browser that cannot feed the mic into a 16 kHz context: retry at the device rate
      }
    }
    await this.context.resume();
  }

  // The server's turn settings (session.ready): the server judges the end of turn after a short silence, so this
  // VAD ends its segment after that silence too, and gates barge-ins as the server does.
  configure(turn) {
    if (!turn) return;
    if (turn.silence_ms) this.micVad?.setOptions({ redemptionMs: Math.max(turn.silence_ms, 2 * FRAME_MS) });
    this.gate.threshold = turn.barge_in_threshold ?? this.gate.threshold;
    this.gate.minMs = turn.barge_in_min_speech_ms ?? this.gate.minMs;
    this.gate.levelDb = turn.barge_in_level_db ?? this.gate.levelDb;
  }

  setGate(on) {
    if (on === this.gate.on) return;
    // The held segment is the user's once it stopped the answer (onBargeIn) or has any frame at their level.
    const theirs = this.gate.passed || this.gate.runMs > 0;
    Object.assign(this.gate, { on, runMs: 0, gapMs: 0, passed: false, floorDb: this._levelFloor() });
    if (!on) this.gateOffFrame = this.frameIndex;
    if (!on && this.state === "gated") {
      // Otherwise the answer ended while a segment was held back that is only that answer's echo: sending it now
      // would answer the echo. Only its last pre-roll is kept, sent once speech goes on past the echo's tail.
      if (theirs) this._confirm();
      else this.pending = this.pending.slice(-PREROLL_FRAMES);
    }
  }

  // The server holds the utterance open (turn.hold): send what was captured since audio.end, then every frame.
  hold() {
    if (this.state !== "ending") return;
    this.state = "continuing";
    for (const entry of this.afterEnd) this._emit(entry);
    this.afterEnd = [];
  }

  // The server ended the utterance (speech.ended): stop sending.
  finish() {
    if (this.state === "ending" || this.state === "continuing") this.state = "quiet";
    this.afterEnd = [];
  }

  _options() {
    return {
      model: "v5",
      baseAssetPath: VENDOR,
      onnxWASMBasePath: VENDOR,
      pauseStream: async () => {},
      resumeStream: async (s) => s,
      startOnLoad: false,
      ortConfig: (ort) => {
        ort.env.logLevel = "error";
        ort.env.wasm.numThreads = 1; // a tiny model; threads would need cross-origin isolation for no gain
      },
      // The design's VAD parameters (threshold 0.5, min speech 300 ms, min silence 400 ms), with hysteresis.
      positiveSpeechThreshold: 0.5,
      negativeSpeechThreshold: 0.35,
      minSpeechMs: 300,
      redemptionMs: 200, // until session.ready gives the server's turn silence (configure)
      preSpeechPadMs: PREROLL_FRAMES * FRAME_MS,
      onFrameProcessed: (probs, frame) => this._frame(frame, probs.isSpeech),
      onSpeechStart: () => this._speechStart(),
      onSpeechRealStart: () => this._speechConfirmed(),
      onVADMisfire: () => this._misfire(),
      onSpeechEnd: () => this._speechEnd(),
    };
  }

  // Capture time of a frame's first sample. Frames reach this thread late and in bursts when it is busy, so the
  // time comes from the audio clock (frame count x 32 ms), anchored to the wall clock by the least-delayed frame
  // seen (a frame can arrive late, never early); a gap of over a second in the stream re-anchors.
  _captureTime() {
    const index = this.frameIndex++;
    const earliestStart = Date.now() - (index + 1) * FRAME_MS;
    if (this.anchor === undefined || earliestStart < this.anchor || earliestStart - this.anchor > 1000) {
      this.anchor = earliestStart;
    }
    this.lastTs = Math.max(this.anchor + index * FRAME_MS, this.lastTs ?? -Infinity);
    return this.lastTs;
  }

  // vad-web reports each frame before the speech event it triggers, so the ring always holds the current frame.
  _frame(frame, probability) {
    const entry = { frame, ts: this._captureTime() };
    this._gateFrame(frame, probability);
    if (this.state === "speaking" || this.state === "continuing") {
      this._emit(entry);
    } else if (this.state === "pending" || this.state === "gated") {
      this.pending.push(entry);
      if (this.pending.length > MAX_PENDING_FRAMES) this.pending.shift();
    } else {
      if (this.state === "ending") {
        this.afterEnd.push(entry);
        if (this.afterEnd.length > MAX_AFTER_END_FRAMES) this.afterEnd.shift();
      }
      this.ring.push(entry);
      if (this.ring.length > PREROLL_FRAMES) this.ring.shift();
    }
  }

  // The lowest level a barge-in frame may have: levelDb below the median of the user's recent speech.
  _levelFloor() {
    if (!this.gate.levelDb || this.userLevels.length < 8) return -Infinity;
    const sorted = [...this.userLevels].sort((a, b) => a - b);
    return sorted[sorted.length >> 1] - this.gate.levelDb;
  }

  _gateFrame(frame, probability) {
    const gate = this.gate;
    const speech = this.state !== "quiet" && this.state !== "ending";
    if (!gate.on) {
      const pastEcho = this.frameIndex - this.gateOffFrame > ECHO_TAIL_FRAMES;
      if (speech && probability >= gate.threshold && pastEcho) {
        this.userLevels.push(levelDb(frame));
        if (this.userLevels.length > LEVEL_FRAMES) this.userLevels.shift();
      }
      if (this.state === "gated" && pastEcho) { // held back while an answer played: the user still speaking
        if (probability >= gate.threshold) gate.runMs += FRAME_MS;
        if (gate.runMs >= Math.max(gate.minMs, FRAME_MS)) this._confirm();
      }
      return;
    }
    if (gate.passed) return;
    if (speech && probability >= gate.threshold && levelDb(frame) >= gate.floorDb) {
      gate.runMs += FRAME_MS;
      gate.gapMs = 0;
    } else if ((gate.gapMs += FRAME_MS) >= GATE_GAP_MS) {
      gate.runMs = 0;
    }
    if (gate.runMs < Math.max(gate.minMs, FRAME_MS)) return;
    gate.passed = true;
    this.handlers.onBargeIn();
    if (this.state === "gated") this._confirm();
  }

  _speechStart() {
    if (this.state === "continuing") return; // the held utterance goes on: its frames are already being sent
    if (this.state === "ending") this.afterEnd = []; // a new utterance: the server ended the last one
    this.state = "pending";
    this.pending = this.ring;
    this.ring = [];
    this.handlers.onSpeechStart();
  }

  _speechConfirmed() {
    if (this.state === "continuing") {
      this.state = "speaking"; // its end sends audio.end again: the server judges the longer utterance
      return;
    }
    if (this.gate.on && !this.gate.passed) {
      this.state = "gated"; // frames keep buffering until the gate passes or the segment dies
      return;
    }
    this._confirm();
  }

  _confirm() {
    this.state = "speaking";
    this.sentFrames = 0;
    this.handlers.onSpeechConfirmed();
    for (const entry of this.pending) this._emit(entry);
    this.pending = [];
  }

  _misfire() {
    if (this.state === "continuing") return;
    if (this.state === "speaking") {
      this._speechEnd();
      return;
    }
    if (this.state === "gated") this.suppressed += 1;
    this.ring = this.pending.slice(-PREROLL_FRAMES);
    this.pending = [];
    this.state = "quiet";
    this.handlers.onMisfire();
  }

  _speechEnd() {
    if (this.state === "gated" || this.state === "pending") {
      this._misfire();
      return;
    }
    if (this.state !== "speaking") return;
    this.state = "ending";
    this.afterEnd = [];
    this.handlers.onSpeechEnd(this.sentFrames * FRAME_MS);
  }

  _emit(entry) {
    this.sentFrames += 1;
    this.handlers.onAudio(entry.frame, entry.ts);
  }
}

function levelDb(frame) {
  let power = 0;
  for (const v of frame) power += v * v;
  return 10 * Math.log10(power / frame.length + 1e-12);
}
