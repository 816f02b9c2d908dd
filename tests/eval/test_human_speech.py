"""The human-speech fetcher's parsing: transcripts, labels and resampling decide what every quality figure means."""

from __future__ import annotations

import io
import wave

import numpy as np
import pytest

from services.common.audio import wav_bytes
from tools.eval import human_speech as hs

ASTERISK_TEXT = """; Core Asterisk Sounds in English

agent-pass: Please enter your password followed by the pound key.
beep: [this is a simple beep tone]
conf-enteringno: You are entering conference number
confbridge-leave-in: To leave the conference...
confbridge-leave-out: ...to leave the conference.
dictate/forhelp: press 0 for help
letters/at: at [@]
vm-tocallnum: press 1 to call this number
vm-onefor: Press 1 for
vm-whichbox: To leave a message, please enter a mailbox number.
conf-thereare: There are currently
priv-callpending: I have a caller waiting, who introduces themselves as:
vm-intro: Please leave your message after the tone.  When done hang up or press the pound key. (simple tone sound plays)
"""


def test_asterisk_transcripts_parse_by_name_and_skip_comments():
    got = hs.parse_asterisk_transcripts(ASTERISK_TEXT)
    assert len(got) == 13
    assert got["dictate/forhelp"] == "press 0 for help"
    assert got["confbridge-leave-in"] == "To leave the conference..."


@pytest.mark.parametrize(("name", "expected"), [
    ("agent-pass", hs.COMPLETE),
    ("conf-enteringno", hs.INCOMPLETE),      # waits for the conference's digits
    ("confbridge-leave-in", hs.INCOMPLETE),  # trails off
    ("confbridge-leave-out", hs.COMPLETE),   # starts mid-sentence but ends one
    ("dictate/forhelp", hs.COMPLETE),        # "for" inside, not at the end
    ("vm-tocallnum", hs.COMPLETE),           # "this number" is a finished phrase
    ("vm-onefor", hs.INCOMPLETE),
    ("vm-whichbox", hs.COMPLETE),
    ("conf-thereare", hs.INCOMPLETE),        # no sentence ends on "currently"
    ("priv-callpending", hs.INCOMPLETE),     # a colon announces what follows
    ("vm-intro", hs.COMPLETE),               # the annotation after the sentence is not spoken
])
def test_labels_follow_how_the_prompt_ends(name, expected):
    assert hs.label(hs.parse_asterisk_transcripts(ASTERISK_TEXT)[name]) == expected


def test_spoken_words_drop_annotations_and_spell_symbols():
    assert hs.spoken_words("[this is a simple beep tone]") == ""
    assert hs.spoken_words("at [@]") == "at"
    assert hs.spoken_words("(7 seconds of silence)") == ""
    assert hs.spoken_words("<beep ascending>") == ""
    assert hs.spoken_words("press the pound key. (simple tone sound plays)") == "press the pound key."
    assert hs.spoken_words("press * to pause, press # to exit") == "press star to pause, press pound to exit"


def test_sphinx_transcriptions_parse_with_and_without_sentence_marks():
    text = ("<s> he was not an ill disposed young man </s> (sense_and_sensibility_01_austen_64kb-0880)\n"
            "<s> ten of clubs  </s> (001)\n"
            "one one one (man.ah.111a)\n")
    assert hs.parse_sphinx_transcription(text) == {
        "sense_and_sensibility_01_austen_64kb-0880": "he was not an ill disposed young man",
        "001": "ten of clubs",
        "man.ah.111a": "one one one",
    }


def test_8khz_prompts_come_back_at_16khz_with_their_tone_kept():
    t = np.arange(8000) / 8000
    tone = (np.sin(2 * np.pi * 440 * t) * 10000).astype("<i2")
    out = hs.to_16k(wav_bytes(tone.tobytes(), 8000), "tone.wav")
    assert out.dtype == np.int16 and len(out) == 16000
    spectrum = np.abs(np.fft.rfft(out.astype(np.float64)))
    assert abs(np.argmax(spectrum) - 440) <= 1  # 1 s at 16 kHz: bin = Hz
    assert 9000 < np.abs(out[2000:14000]).max() <= 10500


def test_a_non_16_bit_wav_is_refused_by_name():
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(1)
        w.setframerate(8000)
        w.writeframes(bytes(800))
    with pytest.raises(ValueError, match="tone.wav: 8-bit audio; only 16-bit PCM WAV"):
        hs.to_16k(buf.getvalue(), "tone.wav")
