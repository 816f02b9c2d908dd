// Wires the page together: Start button -> microphone, voice detector, speaker, camera -> session socket.
// The conversation rules live here: what is sent when the user speaks, barge-in, and the listening/thinking/speaking
// state. Media and wire details live in their own modules.

import { Camera } from "./camera.js";
import { startCamera as openCamera, wireCameraToggle } from "./camera-controls.js";
import { openMicrophone, SpeechCapture } from "./capture.js";
import { Connection, socketUrl } from "./connection.js";
import { counters, exposeDebug, logEvent } from "./debug.js";
import { Ducker } from "./ducking.js";
import { Player } from "./player.js";
import { Kind, SAMPLE_RATE_IN, floatToPcm16, pcm16ToFloat } from "./protocol.js";
import * as ui from "./ui.js";

const JPEG_INTERVAL_MS = 500; // at most ~2 camera frames per second while the user speaks
const PLAYBACK_REPORT_MS = 250;
const VOICE_KEY = "sotto.voice";
const NO_TURN_GRACE_MS = 1000; // beyond the server's request timeout, for turn.started to follow audio.end

const page = {
  started: false,
  micReady: false,
  awaitingReply: false, // an utterance or a typed turn was sent; no audio and no turn.done yet
  replyClock: null, // Date.now() when the last utterance ended or text was sent
  generatingTurn: null, // turn_id from turn.started, until turn.done
  speakingTurn: null, // turn_id whose audio is in the player
  droppedTurns: new Set(), // interrupted turns: their late audio is ignored
  resumedTurns: new Set(), // withdrawn by turn.resumed: the next turn answers their words
  heardAfterMs: new Map(), // turn_id -> client-side time to first audio
  doneTurns: new Set(), // turn.done received
  lastPlaybackReport: 0,
  lastReportedPlayed: null,
  lastUtteranceMs: null, // client-measured length of the last utterance sent
  utteranceAnswered: false, // a speech turn started since the user's utterance began
  noTurnTimer: null,
  requestTimeoutMs: 2000, // from session.ready limits
  restartForVoice: false,
  jpegTimer: null,
  jpegBusy: false,
  modelSees: true, // from session.ready: a model that cannot see is sent no camera frames
  state: "idle",
};

const player = new Player();
const ducker = new Ducker(player, logEvent);
const camera = new Camera(ui.elements.preview);
const capture = new SpeechCapture({
  onSpeechStart,
  onSpeechConfirmed,
  onMisfire,
  onBargeIn: () => (ducksOnSpeech() ? ducker.byPage(page.speakingTurn) : void interrupt()),
  onAudio: (frame, ts) => {
    if (connection.sendFrame(Kind.AUDIO_IN, ts, floatToPcm16(frame))) counters.audio += 1;
  },
  onSpeechEnd,
});
const connection = new Connection(
  socketUrl(),
  () => ({
    sample_rate: SAMPLE_RATE_IN,
    client_vad: page.micReady,
    turn_hold: page.micReady, // this page keeps streaming an utterance the server holds open (turn.hold)
    camera: camera.active,
    ...(localStorage.getItem(VOICE_KEY) ? { voice: localStorage.getItem(VOICE_KEY) } : {}),
  }),
);

// --- state ------------------------------------------------------------------------------------------------------

function updateState() {
  let state = "listening";
  if (!page.started) state = "idle";
  else if (page.speakingTurn !== null) state = "speaking";
  else if (page.awaitingReply) state = "thinking";
  capture.setGate(page.speakingTurn !== null); // echo of the answer must not interrupt it
  if (state !== page.state) {
    page.state = state;
    ui.showState(state);
    logEvent("page", { type: "state", state });
  }
}

function send(message) {
  if (connection.sendJson(message)) logEvent("out", message);
}

// --- the user speaks -------------------------------------------------------------------------------------------

// While an answer plays, speech stops it only once it passes the barge-in gate (onBargeIn): pausing at every
// speech-like frame would let the answer's own echo stutter it.
function onSpeechStart() {
  ui.showHearing(true);
}

function onMisfire() {
  ui.showHearing(false);
}

// A reply not yet heard is dropped (this sends before the utterance's first audio frame); once any of it was heard
// (playing, or played out while its turn runs) the server decides (ducking.js), and the page only ducks.
function ducksOnSpeech() {
  const turnId = page.speakingTurn ?? page.generatingTurn;
  return ducker.enabled && turnId !== null && (player.received[turnId] ?? 0) > 0;
}

function onSpeechConfirmed() {
  if (!ducksOnSpeech()) void interrupt();
  page.utteranceAnswered = false;
  page.replyClock = null;
  void sendJpeg();
  clearInterval(page.jpegTimer);
  page.jpegTimer = setInterval(sendJpeg, JPEG_INTERVAL_MS);
}

function onSpeechEnd(audioMs) {
  ui.showHearing(false);
  clearInterval(page.jpegTimer);
  page.lastUtteranceMs = audioMs;
  send({ type: "audio.end" });
  if (ducker.turnId !== null) return; // over an answer: a turn only if the server cuts the answer for it
  // The server's VAD is authoritative and may have ended the utterance (and started its turn) before this one did.
  if (page.utteranceAnswered) return;
  page.awaitingReply = true;
  page.replyClock = Date.now();
  updateState();
  // If the server's VAD found no utterance in that audio, no turn starts and nothing says so.
  clearTimeout(page.noTurnTimer);
  page.noTurnTimer = setTimeout(() => {
    if (!page.awaitingReply || page.generatingTurn !== null) return;
    page.awaitingReply = false;
    updateState();
    ui.showAlert("Sotto did not catch that; please say it again.", "busy");
  }, page.requestTimeoutMs + NO_TURN_GRACE_MS);
}

async function sendJpeg() {
  if (!camera.active || page.jpegBusy || !page.modelSees) return;
  page.jpegBusy = true;
  try {
    const capturedAt = Date.now();
    const blob = await camera.snapshot();
    if (blob && connection.sendFrame(Kind.JPEG, capturedAt, new Uint8Array(await blob.arrayBuffer()))) {
      counters.jpeg += 1;
    }
  } finally {
    page.jpegBusy = false;
  }
}

// Stops the answer being played (or still being generated) and tells the server how much was heard.
async function interrupt() {
  const turnId = page.speakingTurn ?? page.generatingTurn;
  if (turnId === null || page.droppedTurns.has(turnId)) return; // the gate's barge-in, then the confirmed speech

  const wasPlaying = page.speakingTurn === turnId;
  page.droppedTurns.add(turnId);
  ducker.clear();
  page.speakingTurn = null;
  updateState();
  let played = player.playedOf(turnId);
  if (wasPlaying) played = (await player.stop()).played;
  send({ type: "interrupt", turn_id: turnId, played_samples: played });
  // The server may have closed the turn already (all audio sent): say here that the rest went unheard.
  if (page.doneTurns.has(turnId)) ui.markStoppedEarly(turnId);
}

// --- the server answers ----------------------------------------------------------------------------------------

const handlers = {
  "session.ready": (m) => {
    for (const perTurn of [page.droppedTurns, page.resumedTurns, page.doneTurns, page.heardAfterMs]) perTurn.clear();
    ui.startSession();
    const voices = m.voices ?? [];
    if (voices.length && !voices.includes(localStorage.getItem(VOICE_KEY))) localStorage.removeItem(VOICE_KEY);
    ui.showVoices(voices, localStorage.getItem(VOICE_KEY) || m.voice);
    ui.enableInput(true);
    page.requestTimeoutMs = m.limits?.request_timeout_ms ?? page.requestTimeoutMs;
    capture.configure(m.turn);
    if (document.activeElement === document.body || document.activeElement === ui.elements.start) {
      ui.elements.textInput.focus(); // Start is disabled now; keep keyboard users somewhere useful
    }
    for (const [service, status] of Object.entries(m.health ?? {})) ui.showHealth(service, status);
    const model = m.model ?? {};
    const backend = model.backend ? ` on ${model.backend}` : "";
    ui.showConnection(`Connected — model ${model.name ?? "?"}${backend}${model.fallback ? " (fallback)" : ""}`,
                      model.backend_reason ?? "");
    if (model.note) ui.showAlert(model.note, "busy");
    page.modelSees = model.image_input !== false;
    ducker.configure(m.turn);
    ui.showCameraNote(camera.active, page.modelSees);
    if (m.sample_rate_in && m.sample_rate_in !== SAMPLE_RATE_IN) {
      ui.showAlert(`The server expects ${m.sample_rate_in} Hz audio; this page sends ${SAMPLE_RATE_IN} Hz.`);
    }
  },
  // The server heard an unfinished utterance ("so I was thinking, um…"): keep listening, send the continuation.
  "turn.hold": () => {
    capture.hold();
    clearTimeout(page.noTurnTimer);
    page.awaitingReply = false;
    updateState();
  },
  "speech.ended": () => capture.finish(),
  // The server heard speech over an answer still playing (its synthesis was over): stop it, say what was heard.
  "turn.cut": (m) => page.speakingTurn === m.turn_id && void interrupt(),
  "turn.duck": (m) => page.speakingTurn === m.turn_id && ducker.byServer(m.turn_id),
  "turn.unduck": (m) => ducker.release(m.turn_id) ?? capture.finish(), // not a turn: no speech.ended comes
  // The user went on before any of this turn's answer was heard: it is withdrawn, and the next turn has it all.
  "turn.resumed": (m) => {
    for (const turns of [page.droppedTurns, page.resumedTurns]) turns.add(m.turn_id);
    if (page.generatingTurn === m.turn_id) page.generatingTurn = null;
    ui.removeTurn(m.turn_id);
  },
  "turn.started": (m) => {
    page.generatingTurn = m.turn_id;
    if (m.source === "speech") page.utteranceAnswered = true;
    if (m.source === "speech") ui.addUserTurn(ui.spokenLabel(m.audio_ms ?? page.lastUtteranceMs ?? 0), m.turn_id);
  },
  transcript: (m) => {
    if (typeof m.text === "string" && m.text.trim()) ui.showUserWords(m.turn_id, m.text);
    if (m.error) ui.showAlert(m.error, "busy");
  },
  "text.delta": (m) => {
    if (!page.droppedTurns.has(m.turn_id)) ui.appendAssistantText(m.turn_id, m.text);
  },
  "audio.start": (m) => {
    if (page.droppedTurns.has(m.turn_id)) return;
    player.startTurn(m.turn_id, m.sample_rate); // at full volume
    ducker.clear();
    page.speakingTurn = m.turn_id;
    page.awaitingReply = false;
    updateState();
  },
  "audio.done": (m) => {
    if (m.turn_id === page.speakingTurn) player.endTurn();
  },
  "turn.done": (m) => {
    if (m.interrupted && page.speakingTurn === m.turn_id) void interrupt(); // the server cut it: stop the buffer
    page.doneTurns.add(m.turn_id);
    if (page.resumedTurns.has(m.turn_id)) return ui.removeTurn(m.turn_id); // withdrawn: nothing of it is kept
    ui.finishAssistantTurn(m.turn_id, { text: m.text, heardText: m.heard_text, interrupted: m.interrupted });
    // The page stopped it as its synthesis finished: the two crossed, so turn.done does not say interrupted.
    if (!m.interrupted && page.droppedTurns.has(m.turn_id)) ui.markStoppedEarly(m.turn_id);
    ui.showTurnTimings(m.turn_id, m.timings, page.heardAfterMs.get(m.turn_id) ?? null);
    if (page.generatingTurn === m.turn_id) page.generatingTurn = null;
    page.awaitingReply = false;
    updateState();
    maybeRestartForVoice();
  },
  busy: (m) => {
    ui.showAlert(`Busy: ${m.message}`, "busy");
    page.awaitingReply = false;
    updateState();
  },
  error: (m) => {
    ui.showAlert(`Error (${m.code}): ${m.message}`);
    // A protocol error means this page and the server disagree: retrying the same session.start cannot help.
    if (m.code === "protocol") {
      connection.stop();
      ui.showConnection("The server refused this page's session. Reload the page; if it persists, update Sotto.");
    }
    page.awaitingReply = false;
    updateState();
  },
  health: (m) => ui.showHealth(m.service, m.status),
};

connection.addEventListener("message", (ev) => {
  const message = ev.detail;
  logEvent("in", message);
  handlers[message.type]?.(message);
});

connection.addEventListener("frame", (ev) => {
  const frame = ev.detail;
  if (frame.kind === Kind.AUDIO_OUT && page.speakingTurn !== null) player.push(pcm16ToFloat(frame.payload));
});

connection.addEventListener("status", (ev) => {
  const { state, retryInMs } = ev.detail;
  if (state === "connecting") ui.showConnection("Connecting…");
  if (state === "reconnecting") {
    ui.showConnection(`Connection lost — reconnecting in ${(retryInMs / 1000).toFixed(1)} s…`);
    ui.enableInput(false);
  }
  if (state === "closed") {
    // the session (and its turns) died with the socket
    void player.stop();
    Object.assign(page, { speakingTurn: null, generatingTurn: null, awaitingReply: false });
    updateState();
  }
});

player.addEventListener("progress", (ev) => {
  const { turnId, played } = ev.detail;
  if (played > 0 && !page.heardAfterMs.has(turnId) && page.replyClock !== null) {
    page.heardAfterMs.set(turnId, Date.now() - page.replyClock);
  }
  if (played !== page.lastReportedPlayed && Date.now() - page.lastPlaybackReport >= PLAYBACK_REPORT_MS) {
    page.lastPlaybackReport = Date.now();
    page.lastReportedPlayed = played;
    send({ type: "playback", turn_id: turnId, played_samples: played });
  }
});

player.addEventListener("drained", (ev) => {
  const { turnId, played } = ev.detail;
  send({ type: "playback", turn_id: turnId, played_samples: played });
  if (page.speakingTurn === turnId) page.speakingTurn = null;
  updateState();
  maybeRestartForVoice();
});

// --- controls ---------------------------------------------------------------------------------------------------

async function start() {
  const { start: button } = ui.elements;
  button.disabled = true;
  ui.clearAlerts();
  ui.showState("starting");
  if (!page.micReady) {
    let stream = null;
    try {
      stream = await openMicrophone();
      if (!player.context) await player.init(); // after getUserMedia, still inside the Start click
      await capture.start(stream);
      page.micReady = true;
    } catch (err) {
      for (const track of stream?.getTracks() ?? []) track.stop(); // no recording light without a listener
      ui.showAlert(`${err.message} You can still type your messages.`);
    }
  }
  try {
    if (!player.context) await player.init();
  } catch (err) {
    ui.showAlert(`Answers cannot be played: ${err.message}`);
  }
  if (ui.elements.cameraToggle.getAttribute("aria-pressed") === "true") await startCamera();
  if (!page.started) connection.start();
  else if (page.micReady) connection.restart(); // a new session, whose session.start says the microphone is on
  page.started = true;
  page.state = null;
  updateState();
  button.textContent = page.micReady ? "Microphone on" : "Retry microphone";
  button.disabled = page.micReady;
}

const startCamera = () => openCamera(camera, () => page.modelSees);

function maybeRestartForVoice() {
  if (page.restartForVoice && page.speakingTurn === null && !page.awaitingReply) {
    page.restartForVoice = false;
    connection.restart();
  }
}

ui.elements.start.addEventListener("click", start);

wireCameraToggle(camera, () => page.started, startCamera);

ui.elements.voice.addEventListener("change", () => {
  localStorage.setItem(VOICE_KEY, ui.elements.voice.value);
  ui.elements.voiceNote.hidden = false;
  page.restartForVoice = true; // session.start carries the voice: a new session, once this answer is over
  maybeRestartForVoice();
});

ui.elements.textForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = ui.elements.textInput.value.trim();
  if (!text) return;
  ui.elements.textInput.value = "";
  await interrupt(); // a new question replaces an answer still playing
  ui.addUserTurn(text);
  send({ type: "text", text });
  page.awaitingReply = true;
  page.replyClock = Date.now();
  updateState();
});

ui.elements.stopSpeaking.addEventListener("click", () => void interrupt());
document.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape" && page.speakingTurn !== null) void interrupt();
});

window.addEventListener("unhandledrejection", (ev) => ui.showAlert(`Unexpected error: ${ev.reason?.message ?? ev.reason}`));

// The voice detector loads while the user reads the page; a failure is reported when they press Start.
capture.preload().catch(() => {});

exposeDebug({
  playedSamples: () => player.totalPlayed,
  playback: () => player.playback,
  gain: () => player.gain,
  state: () => page.state,
  vad: () => capture.state,
  suppressedBargeIns: () => capture.suppressed,
  receivedSamples: () => ({ ...player.received }),
});
ui.showState("idle");
