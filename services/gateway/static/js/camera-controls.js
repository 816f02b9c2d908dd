// The camera's controls: opening it (with what the page says when it cannot) and its on/off toggle.

import * as ui from "./ui.js";

// Opens the camera; `modelSees()`: the model takes images (else the page notes that frames are not sent).
export async function startCamera(camera, modelSees) {
  try {
    await camera.start();
    ui.showCameraStatus("");
    ui.showCameraNote(camera.active, modelSees());
    ui.showCameraToggle(true);
  } catch (err) {
    ui.showCameraStatus(`${err.message} Continuing without the camera.`);
    ui.showCameraToggle(false);
  }
}

// The toggle: off stops the camera; on opens it now, or with Start when the page has not started yet.
export function wireCameraToggle(camera, started, open) {
  ui.elements.cameraToggle.addEventListener("click", async () => {
    if (camera.active) {
      camera.stop();
      ui.showCameraToggle(false);
    } else if (started()) {
      await open();
    } else {
      ui.showCameraToggle(true); // the camera opens with Start
    }
  });
}
