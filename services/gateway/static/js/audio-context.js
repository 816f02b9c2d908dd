// Creating AudioContexts at a chosen sample rate, where that is safe.
//
// Chromium resamples microphone input and output to any context rate (what the Web Audio spec has required since
// 2021). Firefox refuses to connect a microphone to a context of another rate, and Safari has been seen to ignore
// the requested rate for capture. So a rate is requested only from Chromium, recognised by the User-Agent Client
// Hints API that only Chromium implements; elsewhere the context runs at the device rate and the worklets resample
// (vad-web's capture worklet to 16 kHz, the player worklet from the reply's rate).

export function createAudioContext(preferredRate) {
  const Ctor = window.AudioContext || window.webkitAudioContext; // webkit prefix: Safari before 14.1
  if (preferredRate && navigator.userAgentData) {
    try {
      return new Ctor({ sampleRate: preferredRate, latencyHint: "interactive" });
    } catch {
      // an unsupported rate: fall through to the device rate
    }
  }
  return new Ctor({ latencyHint: "interactive" });
}
