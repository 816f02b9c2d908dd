// Everything the page shows. Functions here only write to the DOM; they hold no session logic.

const $ = (id) => document.getElementById(id);

export const elements = {
  start: $("start"),
  stopSpeaking: $("stop-speaking"),
  cameraToggle: $("camera-toggle"),
  voice: $("voice"),
  voiceNote: $("voice-note"),
  preview: $("preview"),
  textForm: $("text-form"),
  textInput: $("text-input"),
  send: $("send"),
};

const STATE_LABELS = {
  idle: "Press Start to talk",
  starting: "Starting…",
  listening: "Listening",
  thinking: "Thinking…",
  speaking: "Speaking",
};

export function showState(state) {
  const el = $("state");
  el.textContent = STATE_LABELS[state] ?? state;
  el.className = `state state-${state}`;
  elements.stopSpeaking.disabled = state !== "speaking";
}

export function showHearing(hearing) {
  $("hearing").hidden = !hearing;
}

export function showConnection(text, detail = "") {
  const element = $("connection");
  element.textContent = text;
  element.title = detail;  // e.g. which GPU the model runs on, or why it runs on the CPU
}

export function showCameraStatus(text) {
  $("camera-status").textContent = text;
}

// Said once, as a note beside the preview, never as an alert: the conversation goes on with the words alone.
export function showCameraNote(cameraOn, modelSees) {
  if (cameraOn && !modelSees) showCameraStatus("The model in use cannot see: camera frames are not sent to it.");
}

// A toggle button keeps its name and says its state through aria-pressed (styled in CSS).
export function showCameraToggle(on) {
  elements.cameraToggle.setAttribute("aria-pressed", String(on));
}

export function showHealth(service, status) {
  const list = $("health");
  let item = list.querySelector(`[data-service="${CSS.escape(service)}"]`);
  if (!item) {
    item = document.createElement("li");
    item.dataset.service = service;
    list.append(item);
  }
  item.className = status;
  item.textContent = `${service}: ${status.toLowerCase().replace("_", " ")}`;
}

const MAX_ALERTS = 3;

export function showAlert(text, kind = "error") {
  const box = $("alerts");
  const p = document.createElement("p");
  p.className = kind;
  p.textContent = text;
  box.append(p);
  while (box.children.length > MAX_ALERTS) box.firstElementChild.remove();
}

export function clearAlerts() {
  $("alerts").replaceChildren();
}

export function enableInput(enabled) {
  elements.textInput.disabled = !enabled;
  elements.send.disabled = !enabled;
  elements.voice.disabled = !enabled || elements.voice.options.length < 2;
}

// Before session.ready, or when the speech service is down, the server lists no voices: keep "(default)".
export function showVoices(voices, selected) {
  const options = voices.length ? voices.map((name) => new Option(name, name, false, name === selected))
    : [new Option("(default)", "")];
  elements.voice.replaceChildren(...options);
}

// --- transcript -------------------------------------------------------------------------------------------------

function entry(role) {
  const li = document.createElement("li");
  li.className = role;
  const who = document.createElement("span");
  who.className = "who";
  who.textContent = role === "user" ? "You:" : "Sotto:";
  const text = document.createElement("span");
  text.className = "text";
  li.append(who, text);
  const list = $("transcript");
  list.append(li);
  list.scrollTop = list.scrollHeight;
  return li;
}

export function addUserTurn(text, turnId = null) {
  const li = entry("user");
  li.querySelector(".text").textContent = text;
  if (turnId !== null) li.dataset.turnId = turnId;
}

// A spoken turn's words, once recognised, in place of its "spoken (2.3 s)" label.
export function showUserWords(turnId, words) {
  const li = [...$("transcript").querySelectorAll("li.user")].find((item) => item.dataset.turnId === turnId);
  if (!li) {
    addUserTurn(words, turnId);
    return;
  }
  li.querySelector(".text").textContent = words;
  li.classList.add("recognised");
}

export function spokenLabel(audioMs) {
  return `🎤 spoken (${(audioMs / 1000).toFixed(1)} s)`;
}

const assistantEntries = new Map(); // turn_id -> <li>, for the current session (turn ids are unique per session)

export function startSession() {
  assistantEntries.clear();
}

function assistantEntry(turnId) {
  let li = assistantEntries.get(turnId);
  if (!li) {
    li = entry("assistant");
    li.dataset.turnId = turnId;
    assistantEntries.set(turnId, li);
  }
  return li;
}

// While an answer streams in, aria-busy keeps screen readers from announcing every fragment; they read it when done.
export function appendAssistantText(turnId, text) {
  const li = assistantEntry(turnId);
  li.setAttribute("aria-busy", "true");
  li.querySelector(".text").textContent += text;
}

// Final text of a turn: what was heard, then (struck through) what was cut off by an interruption.
export function finishAssistantTurn(turnId, { text, heardText, interrupted }) {
  const li = assistantEntry(turnId);
  li.removeAttribute("aria-busy");
  const span = li.querySelector(".text");
  li.querySelector(".mark")?.remove();
  li.querySelector(".unheard")?.remove();
  if (!interrupted) {
    span.textContent = text ?? span.textContent;
    return;
  }
  const full = text ?? span.textContent;
  const heard = heardText ?? "";
  span.textContent = heard;
  const rest = full.startsWith(heard) ? full.slice(heard.length) : "";
  if (rest.trim()) {
    const unheard = document.createElement("span");
    unheard.className = "unheard";
    unheard.textContent = rest;
    unheard.setAttribute("aria-label", `not heard: ${rest}`);
    span.after(unheard);
  }
  const mark = document.createElement("span");
  mark.className = "mark";
  mark.textContent = "(interrupted)";
  li.append(mark);
}

// A turn withdrawn because the user went on speaking: its words reappear in the turn that answers them all.
export function removeTurn(turnId) {
  for (const li of $("transcript").querySelectorAll("li")) {
    if (li.dataset.turnId === turnId) li.remove();
  }
  assistantEntries.delete(turnId);
}

export function markStoppedEarly(turnId) {
  const li = assistantEntry(turnId);
  if (li.querySelector(".mark")) return;
  const mark = document.createElement("span");
  mark.className = "mark";
  mark.textContent = "(stopped before the end)";
  li.querySelector(".text").after(mark);
}

// --- latency ----------------------------------------------------------------------------------------------------

const STAGES = [
  ["endpoint_ms", "endpoint"],
  ["asr_ms", "words"],
  ["llm_queue_ms", "queue"],
  ["first_token_ms", "first token"],
  ["tts_first_chunk_ms", "first sentence → audio"],
  ["first_audio_ms", "first audio sent"],
  ["total_ms", "total"],
];

export function formatTimings(timings = {}, heardAfterMs = null) {
  const ms = (v) => `${Math.round(v)} ms`;
  const parts = [];
  if (timings.ttfa_ms !== undefined) parts.push(`time to first audio ${ms(timings.ttfa_ms)}`);
  const stages = STAGES.filter(([key]) => timings[key] !== undefined).map(([key, label]) => `${label} ${ms(timings[key])}`);
  if (stages.length) parts.push(stages.join(" · "));
  if (heardAfterMs !== null) parts.push(`heard here after ${ms(heardAfterMs)}`);
  return parts.join(" — ");
}

export function showTurnTimings(turnId, timings, heardAfterMs) {
  const line = formatTimings(timings, heardAfterMs);
  $("latency").textContent = line ? `Last turn: ${line}` : "";
  const li = assistantEntry(turnId);
  let small = li.querySelector(".timings");
  if (!small) {
    small = document.createElement("small");
    small.className = "timings";
    li.append(small);
  }
  small.textContent = line;
}
