// Ducking: speech over an answer lowers it (the player's gain) instead of stopping it; the server decides whether
// the speech cuts the answer (turn.cut, or an interrupted turn.done) or was a backchannel or a cough (turn.unduck),
// by the rule in services/gateway/conversation/backchannel.py.
//
// The page's own duck (its VAD heard speech over the answer) is undone if the server says nothing of that speech
// within UNHEARD_MS (the server's VAD did not take it for speech); once the server has ducked, a lost verdict must
// not leave the answer low past UNDECIDED_MS.

const UNHEARD_MS = 2000;
const UNDECIDED_MS = 10000;

export class Ducker {
  constructor(player, log) {
    this.player = player;
    this.log = log;
    this.enabled = false; // from session.ready: the server ducks and decides
    this.db = -15;
    this.turnId = null; // the answer lowered now
    this.timer = null;
  }

  configure(turn) {
    this.enabled = turn?.backchannel === true;
    this.db = turn?.duck_db ?? this.db;
  }

  byPage(turnId) {
    this._duck(turnId, UNHEARD_MS);
  }

  byServer(turnId) {
    this._duck(turnId, UNDECIDED_MS);
  }

  // Full volume again for `turnId`'s answer (it never paused).
  release(turnId) {
    if (this.turnId !== turnId) return;
    this.clear();
    this.player.unduck();
    this.log("page", { type: "unduck", turn_id: turnId });
  }

  // Forget the duck without touching the player (the answer stopped, or a new one starts at full volume).
  clear() {
    this.turnId = null;
    clearTimeout(this.timer);
  }

  _duck(turnId, boundMs) {
    if (turnId === null) return;
    if (this.turnId !== turnId) this.player.duck(this.db);
    this.turnId = turnId;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.release(turnId), boundMs);
    this.log("page", { type: "duck", turn_id: turnId });
  }
}
