// AudioWorklet processor that plays the assistant's PCM as it arrives and counts the samples actually played.
//
// Messages in:  {type:'turn', turnId, rate}  a new turn's audio follows at `rate` Hz (resets the count)
//               {type:'pcm', samples}        Float32 samples of the current turn, in order
//               {type:'end'}                 no more audio for this turn: report 'drained' once it has all played
//               {type:'stop'}                drop everything queued now; replies {type:'stopped', turnId, played}
// Messages out: {type:'progress'|'drained'|'stopped', turnId, played, playing}
//               {type:'gap', turnId, ms}  the turn's audio ran out before its end and has resumed: the listener
//                                         heard `ms` of silence the answer did not contain (an underrun)
// `played` counts source samples (the turn's rate), the unit of the protocol's played_samples.
// When the turn's rate differs from the context's, samples are resampled here by linear interpolation.

const REPORT_EVERY_S = 0.05;

class SottoPcmPlayer extends AudioWorkletProcessor {
  constructor() {
    super();
    this.buffer = new Float32Array(1 << 16); // ring of source samples, grown on demand
    this.readPos = 0; // absolute source-sample positions
    this.writePos = 0;
    this.frac = 0;
    this.step = 1;
    this.turnId = null;
    this.turnStart = 0;
    this.ended = false;
    this.sinceReport = 0;
    this.dryFrames = 0; // output frames of silence since the current turn's audio ran out mid-turn
    this.port.onmessage = (ev) => this.onMessage(ev.data);
  }

  onMessage(msg) {
    switch (msg.type) {
      case "turn":
        this.readPos = this.writePos;
        this.frac = 0;
        this.turnStart = this.readPos;
        this.turnId = msg.turnId;
        this.step = msg.rate / sampleRate;
        this.ended = false;
        this.dryFrames = 0;
        break;
      case "pcm":
        this.append(msg.samples);
        break;
      case "end":
        this.ended = true;
        break;
      case "stop":
        this.post("stopped"); // before dropping the queue: `played` is what was heard
        this.readPos = this.writePos;
        this.ended = false;
        this.turnId = null;
        this.dryFrames = 0;
        break;
    }
  }

  append(samples) {
    const queued = this.writePos - this.readPos;
    if (queued + samples.length > this.buffer.length) {
      let size = this.buffer.length;
      while (size < queued + samples.length) size *= 2;
      const grown = new Float32Array(size);
      for (let i = 0; i < queued; i++) grown[(this.readPos + i) % size] = this.buffer[(this.readPos + i) % this.buffer.length];
      this.buffer = grown;
    }
    const size = this.buffer.length;
    for (let i = 0; i < samples.length; i++) this.buffer[(this.writePos + i) % size] = samples[i];
    this.writePos += samples.length;
  }

  get played() {
    return this.readPos - this.turnStart;
  }

  get playing() {
    return this.turnId !== null && this.writePos > this.readPos;
  }

  post(type) {
    this.port.postMessage({ type, turnId: this.turnId, played: this.played, playing: this.playing });
  }

  process(_inputs, outputs) {
    const out = outputs[0][0];
    const size = this.buffer.length;
    if (this.dryFrames > 0 && this.readPos < this.writePos) {
      this.port.postMessage({ type: "gap", turnId: this.turnId, ms: (this.dryFrames * 1000) / sampleRate });
      this.dryFrames = 0;
    }
    let i = 0;
    for (; i < out.length && this.readPos < this.writePos; i++) {
      const s0 = this.buffer[this.readPos % size];
      const s1 = this.readPos + 1 < this.writePos ? this.buffer[(this.readPos + 1) % size] : s0;
      out[i] = s0 + (s1 - s0) * this.frac;
      this.frac += this.step;
      const whole = Math.floor(this.frac);
      this.readPos = Math.min(this.readPos + whole, this.writePos);
      this.frac -= whole;
    }
    out.fill(0, i); // silence on underrun
    if (this.turnId !== null) {
      // Playback has started and more audio is due: silence now is a gap, reported when the audio resumes.
      if (i < out.length && this.played > 0 && !this.ended) this.dryFrames += out.length - i;
      if (this.ended && this.readPos >= this.writePos) {
        this.post("drained");
        this.turnId = null;
        this.dryFrames = 0;
      } else if ((this.sinceReport += out.length) >= REPORT_EVERY_S * sampleRate) {
        this.sinceReport = 0;
        this.post("progress");
      }
    }
    return true; // keep the node alive between turns
  }
}

registerProcessor("sotto-pcm-player", SottoPcmPlayer);
