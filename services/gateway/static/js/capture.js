// The microphone and the in-page Silero VAD (@ricky0123/vad-web MicVAD, served from /vendor/).
//
// SpeechCapture turns VAD callbacks into what the session needs:
//   onSpeechStart()       the VAD heard a first speech frame (maybe a cough): pause playback, do not send yet
//   onSpeechConfirmed()   speech lasted minSpeechMs: it is a real utterance (barge-in, first camera frame)
//   onMisfire()           it was too short: resume playback, nothing was sent
//   onAudio(frame, ts)    a 16 kHz Float32 frame to send, in order, starting with ~300 ms of pre-roll
//   onSpeechEnd(ms)       the VAD heard the end of speech: send audio.end
// Audio leaves the page only between onSpeechConfirmed and onSpeechEnd (plus the pre-roll), so a misfire sends nothing.

import { createAudioContext } from "./audio-context.js";
import { describeMediaError, UserFacingError } from "./media-errors.js";

const VENDOR = "/vendor/";
const FRAME_SAMPLES = 512; // Silero v5 at 16 kHz
const FRAME_MS = (FRAME_SAMPLES / 16000) * 1000; // 32 ms
const PREROLL_FRAMES = Math.ceil(300 / FRAME_MS); // ~300 ms before the first speech frame
const MAX_PENDING_FRAMES = Math.ceil(3000 / FRAME_MS); // bound the buffer while speech is unconfirmed

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
    this.state = "quiet"; // quiet | pending | speaking
    this.ring = [];
    this.pending = [];
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
      redemptionMs: 400,
      preSpeechPadMs: PREROLL_FRAMES * FRAME_MS,
      onFrameProcessed: (_probs, frame) => this._frame(frame),
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
  _frame(frame) {
    const entry = { frame, ts: this._captureTime() };
    if (this.state === "speaking") {
      this._emit(entry);
    } else if (this.state === "pending") {
      this.pending.push(entry);
      if (this.pending.length > MAX_PENDING_FRAMES) this.pending.shift();
    } else {
      this.ring.push(entry);
      if (this.ring.length > PREROLL_FRAMES) this.ring.shift();
    }
  }

  _speechStart() {
    this.state = "pending";
    this.pending = this.ring;
    this.ring = [];
    this.handlers.onSpeechStart();
  }

  _speechConfirmed() {
    this.state = "speaking";
    this.sentFrames = 0;
    this.handlers.onSpeechConfirmed();
    for (const entry of this.pending) this._emit(entry);
    this.pending = [];
  }

  _misfire() {
    const wasSpeaking = this.state === "speaking";
    this.ring = this.pending.slice(-PREROLL_FRAMES);
    this.pending = [];
    this.state = "quiet";
    if (wasSpeaking) this.handlers.onSpeechEnd(this.sentFrames * FRAME_MS);
    else this.handlers.onMisfire();
  }

  _speechEnd() {
    this.state = "quiet";
    this.handlers.onSpeechEnd(this.sentFrames * FRAME_MS);
  }

  _emit(entry) {
    this.sentFrames += 1;
    this.handlers.onAudio(entry.frame, entry.ts);
  }
}
