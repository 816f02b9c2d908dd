"""What a user would see after the scripted conversation, whichever server answered: shared by the fake-gateway
and the real-stack browser tests."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageStat

from tests.browser.page_driver import ConversationRun


def assert_transcript_shows_the_conversation(run: ConversationRun, last_answer_aloud: bool = True,
                                            spoken_words: tuple[str, str] | None = None) -> None:
    """Two spoken turns, the typed one and an answer to each; the latency read-out; back to listening.

    `last_answer_aloud=False`: the typed turn's answer may have had nothing speakable (the real stack's tiny model
    writes random characters), so its read-out has no time to first audio. `spoken_words`: a word each spoken
    turn's entry must show (the real stack recognises them); None: the "spoken (2.3 s)" labels of a gateway that
    sends no `transcript`."""
    transcript = run.transcript
    assert len(transcript) == 6, transcript
    if spoken_words is None:
        assert transcript[0].startswith("You:🎤 spoken (") and transcript[2].startswith("You:🎤 spoken (")
    else:
        for entry, word in zip((transcript[0], transcript[2]), spoken_words):
            assert entry.startswith("You:") and "spoken (" not in entry and word in entry.lower(), transcript
    assert transcript[4] == "You:Hello from the keyboard"
    assert all(transcript[i].startswith("Sotto:") for i in (1, 3, 5))
    if last_answer_aloud:
        assert "time to first audio" in transcript[5]
        assert run.latency_text.startswith("Last turn: time to first audio")
    else:
        assert run.latency_text.startswith("Last turn: "), run.latency_text
    assert run.state_after == "listening"


def assert_first_answer_marked_cut(run: ConversationRun) -> None:
    # "(interrupted)" when turn.done says so; "(stopped before the end)" when turn.done came before the barge-in
    assert any(mark in run.transcript[1] for mark in ("(interrupted)", "(stopped before the end)")), run.transcript


def assert_not_blank(screenshot: Path) -> None:
    image = Image.open(screenshot).convert("RGB")
    assert max(ImageStat.Stat(image).var) > 100, "the screenshot is (nearly) uniform"
