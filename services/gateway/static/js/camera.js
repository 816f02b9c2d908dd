// The optional camera: a live preview and JPEG snapshots no larger than 640 px on the long side.

import { describeMediaError, UserFacingError } from "./media-errors.js";

const MAX_SIDE = 640;
const JPEG_QUALITY = 0.8;

export class Camera {
  constructor(videoElement) {
    this.video = videoElement;
    this.stream = null;
    this.canvas = document.createElement("canvas");
  }

  get active() {
    return this.stream !== null;
  }

  async start() {
    if (this.stream) return;
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      throw new UserFacingError("The camera needs a secure page (http://127.0.0.1 or HTTPS).");
    }
    try {
      this.stream = await navigator.mediaDevices.getUserMedia({
        video: { width: { ideal: 640 }, height: { ideal: 480 }, facingMode: "user" },
      });
    } catch (err) {
      throw new UserFacingError(describeMediaError(err, "camera"));
    }
    this.video.srcObject = this.stream;
    await this.video.play().catch(() => {}); // muted + playsinline: allowed without a gesture
  }

  // Stopping the tracks (not just hiding the preview) turns the camera light off.
  stop() {
    if (!this.stream) return;
    for (const track of this.stream.getTracks()) track.stop();
    this.stream = null;
    this.video.srcObject = null;
  }

  // Resolves to a JPEG Blob of the current frame, or null when no frame is available yet.
  snapshot() {
    const { videoWidth: w, videoHeight: h } = this.video;
    if (!this.stream || !w || !h) return Promise.resolve(null);
    const scale = Math.min(1, MAX_SIDE / Math.max(w, h));
    this.canvas.width = Math.round(w * scale);
    this.canvas.height = Math.round(h * scale);
    this.canvas.getContext("2d").drawImage(this.video, 0, 0, this.canvas.width, this.canvas.height);
    return new Promise((resolve) => this.canvas.toBlob(resolve, "image/jpeg", JPEG_QUALITY));
  }
}
