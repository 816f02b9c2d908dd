"""The page in headless Chromium with a microphone that hears the page's own answers: the echo evaluation's browser
side (tools/eval/echo.py) and the browser test of the barge-in gate.

The microphone (ECHO_MIC, run before the page's scripts) is a WebAudio destination that carries two things: what
the driver says (`say`, a real user talking) and the page's own answer, tapped after the player's volume (a ducked
answer's echo is lowered as the loudspeaker's sound is), delayed and attenuated (`set_echo`): a speaker feeding the
microphone. Chromium's echo cancellation works on real capture tracks only, so none is applied here: the echo stands
for what is left after the browser's echo cancellation, at the level chosen. With `set_room` the answer also goes
through a room's impulse response from the loudspeaker to the microphone (a ConvolverNode), and `add_noise` loops
the room's noise into the microphone. Everything downstream (vad-web, the barge-in gate, the socket) is the page's own.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import numpy as np
from playwright.async_api import Page, async_playwright

from tools.browser import BASE_ARGS, CHROMIUM

ECHO_MIC = """(() => {
  const devices = navigator.mediaDevices;
  const getUserMedia = devices.getUserMedia.bind(devices);
  let mic = null;
  let answer = null;
  let echo = null;
  const setting = { gain: 0, delayMs: 30, impulse: [1] };
  const link = () => {
    if (!mic || !answer || echo) return;
    const tap = answer.context.createMediaStreamDestination();
    answer.connect(tap);
    const source = mic.context.createMediaStreamSource(tap.stream);
    const delay = mic.context.createDelay(1.0);
    const room = mic.context.createConvolver();
    room.normalize = false;
    const gain = mic.context.createGain();
    source.connect(delay).connect(room).connect(gain).connect(mic.destination);
    echo = { delay, room, gain, impulse: null };
    apply();
  };
  const apply = () => {
    if (!echo) return;
    echo.delay.delayTime.value = setting.delayMs / 1000;
    echo.gain.gain.value = setting.gain;
    if (echo.impulse !== setting.impulse) {
      const buffer = mic.context.createBuffer(1, setting.impulse.length, mic.context.sampleRate);
      buffer.copyToChannel(Float32Array.from(setting.impulse), 0);
      echo.room.buffer = buffer;
      echo.impulse = setting.impulse;
    }
  };
  const NativeWorkletNode = window.AudioWorkletNode;
  window.AudioWorkletNode = class extends NativeWorkletNode {
    constructor(context, name, options) {
      super(context, name, options);
      if (name !== "sotto-pcm-player") return;
      // What the loudspeaker plays is the player's output after its volume (ducking lowers it): tap the node the
      // worklet feeds, not the worklet itself.
      const connect = this.connect.bind(this);
      this.connect = (destination, ...rest) => {
        const out = connect(destination, ...rest);
        if (destination instanceof GainNode && !answer) { answer = destination; link(); }
        return out;
      };
    }
  };
  devices.getUserMedia = async (constraints) => {
    const stream = await getUserMedia(constraints);
    if (!constraints || !constraints.audio) return stream;
    stream.getAudioTracks().forEach((track) => track.stop());
    const context = new AudioContext();
    await context.resume();
    mic = { context, destination: context.createMediaStreamDestination() };
    link();
    window.sottoTestMic = {
      say(pcm16, rate) {
        const buffer = context.createBuffer(1, pcm16.length, rate);
        buffer.copyToChannel(Float32Array.from(pcm16, (v) => v / 32768), 0);
        const source = context.createBufferSource();
        source.buffer = buffer;
        source.connect(mic.destination);
        source.start();
        return Date.now();
      },
      setEcho(gain, delayMs) { Object.assign(setting, { gain, delayMs }); apply(); return echo !== null; },
      setRoom(impulse) { setting.impulse = impulse; apply(); },
      addNoise(samples) {
        const buffer = context.createBuffer(1, samples.length, context.sampleRate);
        buffer.copyToChannel(Float32Array.from(samples), 0);
        const source = context.createBufferSource();
        Object.assign(source, { buffer, loop: true });
        source.connect(mic.destination);
        source.start();
      },
      rate: context.sampleRate,
    };
    return new MediaStream([...mic.destination.stream.getAudioTracks(), ...stream.getVideoTracks()]);
  };
})();"""

# Fake devices granted without a prompt; the fake microphone's tone is replaced by ECHO_MIC, the camera is
# Chromium's own test pattern.
ARGS = [*BASE_ARGS, "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream"]

_READY = """() => window.sottoTestMic !== undefined && window.sottoDebug.state === "listening"
  && window.sottoDebug.events.some(e => e.dir === "in" && e.type === "session.ready")"""

# Says the cut-in once the answer of the turn typed at t0 has played `seconds`, polling in the page (a round trip
# to the driver can take longer than that on a loaded machine): the page's clock as it starts, or null when the
# answer was over first.
_CUT_IN_WHEN_PLAYED = """async ([t0, seconds, pcm16, rate]) => {
  const d = window.sottoDebug;
  let base = null;
  for (;;) {
    const events = d.events.filter(e => e.t >= t0);
    const started = events.find(e => e.dir === "in" && e.type === "turn.started");
    const mine = started ? events.filter(e => e.turn_id === started.turn_id) : [];
    const audio = mine.find(e => e.type === "audio.start");
    if (mine.some(e => e.dir === "out" && e.type === "interrupt")) return null;
    if (d.state === "speaking" && audio) {
      base ??= d.playedSamples;
      if (d.playedSamples - base >= seconds * audio.sample_rate) return window.sottoTestMic.say(pcm16, rate);
    } else if (base !== null || (d.state === "listening" && mine.some(e => e.type === "turn.done"))) {
      return null;
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}"""

# The answer is over (interrupted, or done and played), any turn the page started since is done too, and the page's
# VAD hears no speech ("ending": its last utterance was sent, whether or not the server ended it first).
_SETTLED = """([t0]) => {
  const d = window.sottoDebug;
  const events = d.events.filter(e => e.t >= t0);
  const started = events.filter(e => e.dir === "in" && e.type === "turn.started").map(e => e.turn_id);
  const done = new Set(events.filter(e => e.dir === "in" && e.type === "turn.done").map(e => e.turn_id));
  const cut = events.some(e => e.dir === "out" && e.type === "interrupt" && e.turn_id === started[0]);
  return started.length > 0 && (cut || done.has(started[0])) && d.state === "listening"
    && (d.vad === "quiet" || d.vad === "ending") && started.every(id => done.has(id));
}"""


@dataclass
class Answer:
    """One typed turn's answer as the page played it, with the echo at `level_db` (None: no echo)."""

    turn_id: str
    sample_rate: int
    played_s: float
    interrupted: bool  # the page stopped it (a barge-in): a self-interruption unless the user cut in
    suppressed: int  # speech segments the page's barge-in gate held back meanwhile
    said_at_ms: float | None = None  # page clock: when the user's cut-in began
    stopped_at_ms: float | None = None  # page clock: when playback had stopped for the interrupt
    errors: tuple[str, ...] = ()  # the turn's error events, as "code: message" (why an answer may be missing)

    @property
    def cut_in_to_stop_ms(self) -> float | None:
        """None where the user did not cut in, or where the answer was not stopped after they did."""
        if self.said_at_ms is None or self.stopped_at_ms is None or self.stopped_at_ms < self.said_at_ms:
            return None
        return self.stopped_at_ms - self.said_at_ms

    @property
    def interrupted_itself(self) -> bool:
        return self.interrupted and (self.said_at_ms is None or self.stopped_at_ms < self.said_at_ms)


@contextlib.asynccontextmanager
async def echo_page(base_url: str) -> AsyncIterator[Page]:
    """The page started on the echo microphone, listening; the browser closes after."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            page = await browser.new_page()
            await page.add_init_script(ECHO_MIC)
            await page.goto(base_url)
            await page.get_by_role("button", name="Start").click()
            await page.wait_for_function(_READY, timeout=90_000)
            yield page
        finally:
            await browser.close()


async def set_echo(page: Page, gain_db: float | None, delay_ms: float) -> None:
    """The answer reaches the microphone `gain_db` below (or above) its own level, `delay_ms` late; None: not."""
    gain = 0.0 if gain_db is None else 10 ** (gain_db / 20)
    await page.evaluate("([gain, delay]) => window.sottoTestMic.setEcho(gain, delay)", [gain, delay_ms])


async def set_room(page: Page, impulse: np.ndarray, noise: np.ndarray) -> None:
    """The answer reaches the microphone through `impulse` (the loudspeaker's path, at the microphone's rate:
    `mic_rate`), and `noise` (float, at that rate) loops into the microphone from now on."""
    await page.evaluate("(impulse) => window.sottoTestMic.setRoom(impulse)", impulse.astype(np.float32).tolist())
    await page.evaluate("(noise) => window.sottoTestMic.addNoise(noise)", noise.astype(np.float32).tolist())


async def mic_rate(page: Page) -> int:
    """The sample rate of the page's microphone (its AudioContext's)."""
    return int(await page.evaluate("() => window.sottoTestMic.rate"))


async def say(page: Page, pcm16: np.ndarray, rate: int) -> float:
    """Starts an utterance on the microphone; returns the page's clock (ms) as it starts."""
    return await page.evaluate("([pcm16, rate]) => window.sottoTestMic.say(pcm16, rate)", [pcm16.tolist(), rate])


async def spoken_turn(page: Page, pcm16: np.ndarray, rate: int, timeout_s: float = 180) -> None:
    """The user says something and its answer plays out: the page learns the user's speech level from it."""
    t0 = await page.evaluate("() => Date.now()")
    await say(page, pcm16, rate)
    await page.wait_for_function(_SETTLED, arg=[t0], timeout=timeout_s * 1000)


async def typed_answer(page: Page, prompt: str, cut_in: tuple[np.ndarray, int] | None = None,
                       cut_in_after_s: float = 1.0, timeout_s: float = 180) -> Answer:
    """Types `prompt` and lets its answer play out, or (`cut_in`: PCM16 and its rate) says the cut-in once the page
    has played `cut_in_after_s` of it. Returns once the answer, and any turn the page started meanwhile, is over."""
    t0 = await page.evaluate("() => Date.now()")
    suppressed_before = await page.evaluate("() => window.sottoDebug.suppressedBargeIns")
    box = page.get_by_label("Type a message")
    await box.fill(prompt)
    await box.press("Enter")
    said_at = None
    if cut_in is not None:
        said_at = await page.evaluate(_CUT_IN_WHEN_PLAYED, [t0, cut_in_after_s, cut_in[0].tolist(), cut_in[1]])
    await page.wait_for_function(_SETTLED, arg=[t0], timeout=timeout_s * 1000)
    events = [e for e in await page.evaluate("() => window.sottoDebug.events") if e["t"] >= t0]
    turn_id = next(e["turn_id"] for e in events if e["dir"] == "in" and e["type"] == "turn.started")
    mine = [e for e in events if e.get("turn_id") == turn_id]
    cut = next((e for e in mine if e["dir"] == "out" and e["type"] == "interrupt"), None)
    start = next((e for e in mine if e["type"] == "audio.start"), None)
    rate = start["sample_rate"] if start else 0
    played = max([e["played_samples"] for e in mine if e["dir"] == "out" and "played_samples" in e], default=0)
    errors = tuple(f"{e.get('code')}: {e.get('message')}" for e in mine if e["dir"] == "in" and e["type"] == "error")
    return Answer(turn_id, rate, played / rate if rate else 0.0, cut is not None,
                  await page.evaluate("() => window.sottoDebug.suppressedBargeIns") - suppressed_before,
                  said_at, cut["t"] if cut else None, errors)
