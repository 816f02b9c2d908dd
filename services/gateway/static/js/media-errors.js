// getUserMedia failures turned into messages that tell the user what to do.

export function describeMediaError(err, device) {
  switch (err && err.name) {
    case "NotAllowedError":
    case "SecurityError":
      return `Access to the ${device} was denied. Allow it in the site settings (the icon at the left of the address bar), then press Start again.`;
    case "NotFoundError":
    case "OverconstrainedError":
      return `No ${device} was found. Connect one, then press Start again.`;
    case "NotReadableError":
    case "AbortError":
      return `The ${device} is in use by another application or could not be opened.`;
    default:
      return `The ${device} could not be opened (${(err && err.message) || err}).`;
  }
}

// An error whose message is written for the user (shown as is).
export class UserFacingError extends Error {}
