// Plays the assistant's audio through the sotto-pcm-player AudioWorklet and tracks what was actually heard.
//
// Events (EventTarget): 'progress', 'drained', 'stopped' with detail {turnId, played, playing}.
// Underruns (the audio ran out mid-answer, then resumed) are counted with their lengths: `playback`.

import { createAudioContext } from "./audio-context.js";

const WORKLET_URL = "/static/js/player-worklet.js";
// Kokoro's rate. The context runs at the reply's rate where that is safe (audio-context.js), so the browser's
// band-limited resampler converts to the device rate; otherwise the worklet interpolates.
const PREFERRED_RATE = 24000;
const KEPT_GAPS = 200; // the most recent gap lengths kept for the debug read-out
// Ducking ramps the gain exponentially (no click): down fast, so a backchannel is heard over less of the answer; back
// up more gently, as a broadcaster's ducker does.
const DUCK_TIME_CONSTANT_S = 0.015;
const UNDUCK_TIME_CONSTANT_S = 0.06;

export class Player extends EventTarget {
  constructor() {
    super();
    this.context = null;
    this.node = null;
    this.turnId = null;
    this.played = 0; // samples of the current turn played so far (last report)
    this.totalPlayed = 0; // over all turns, for the debug read-out
    this.received = {}; // turn_id -> samples of its answer pushed, for the debug read-out
    this.playing = false;
    this.stopWaiters = [];
    this.underruns = 0;
    this.gapsMs = [];
  }

  // Call from a user gesture (the Start button) so autoplay policies let the context run.
  async init() {
    this.context = createAudioContext(PREFERRED_RATE);
    if (!this.context.audioWorklet || typeof AudioWorkletNode !== "function") {
      throw new Error("This browser cannot play the answers (no AudioWorklet: Chrome 66+ or Safari 14.1+ needed).");
    }
    await this.context.audioWorklet.addModule(WORKLET_URL);
    this.node = new AudioWorkletNode(this.context, "sotto-pcm-player", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
    });
    this.node.port.onmessage = (ev) => this._report(ev.data);
    this.gainNode = this.context.createGain(); // the answer's volume: lowered while the user may be speaking over it
    this.node.connect(this.gainNode).connect(this.context.destination);
    await this.context.resume();
  }

  get sampleRate() {
    return this.context ? this.context.sampleRate : null;
  }

  startTurn(turnId, rate) {
    this.turnId = turnId;
    this.played = 0;
    this._rampTo(1, 0);
    this.node.port.postMessage({ type: "turn", turnId, rate });
  }

  push(samples) {
    if (this.turnId === null) return;
    this.received[this.turnId] = (this.received[this.turnId] ?? 0) + samples.length;
    this.node.port.postMessage({ type: "pcm", samples }, [samples.buffer]);
  }

  endTurn() {
    if (this.turnId !== null) this.node.port.postMessage({ type: "end" });
  }

  // Samples of `turnId` played so far, as last reported (0 for a turn whose audio never started).
  playedOf(turnId) {
    return this.lastReport && this.lastReport.turnId === turnId ? this.lastReport.played : 0;
  }

  // Stops at once; resolves to {turnId, played} as counted by the worklet at the moment it stopped.
  stop() {
    const turnId = this.turnId;
    this.turnId = null;
    if (!this.node || turnId === null) return Promise.resolve({ turnId, played: this.playedOf(turnId) });
    return new Promise((resolve) => {
      this.stopWaiters.push(resolve);
      this.node.port.postMessage({ type: "stop" });
    });
  }

  // Lowers the answer to `db` (negative) without stopping it: speech over it may be a backchannel or a cough.
  duck(db) {
    this._rampTo(10 ** (db / 20), DUCK_TIME_CONSTANT_S);
  }

  // Back to full volume; the answer never paused, so it goes on where it is.
  unduck() {
    this._rampTo(1, UNDUCK_TIME_CONSTANT_S);
  }

  // The gain applied now (1: full volume), for the debug read-out.
  get gain() {
    return this.gainNode ? this.gainNode.gain.value : 1;
  }

  _rampTo(value, timeConstant) {
    if (!this.gainNode) return;
    const gain = this.gainNode.gain;
    const now = this.context.currentTime;
    gain.cancelScheduledValues(now);
    if (timeConstant > 0) gain.setTargetAtTime(value, now, timeConstant);
    else gain.setValueAtTime(value, now);
  }

  // Gaps heard once playback had started, over all turns: their count and the most recent lengths in ms.
  get playback() {
    return { underruns: this.underruns, gapsMs: [...this.gapsMs], longestGapMs: Math.max(0, ...this.gapsMs) };
  }

  _report(report) {
    if (report.type === "gap") {
      this.underruns += 1;
      this.gapsMs.push(report.ms);
      if (this.gapsMs.length > KEPT_GAPS) this.gapsMs.shift();
      return;
    }
    if (report.type === "stopped") for (const resolve of this.stopWaiters.splice(0)) resolve(report);
    if (report.turnId === null) return;
    const delta = report.played - (this.lastReport && this.lastReport.turnId === report.turnId ? this.lastReport.played : 0);
    this.totalPlayed += Math.max(0, delta);
    this.lastReport = report;
    this.played = report.played;
    this.playing = report.type === "progress" && report.playing;
    if (report.type === "drained" && report.turnId === this.turnId) this.turnId = null;
    this.dispatchEvent(new CustomEvent(report.type, { detail: report }));
  }
}
