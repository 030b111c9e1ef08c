"""The doc-test harness itself (tests/docs/blocks.py): it must be able to fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import DocError, Session, parse_blocks, sample_mismatch, wait_script


def _page(tmp_path: Path, text: str) -> list:
    page = tmp_path / "page.md"
    page.write_text(text)
    return parse_blocks(page, tmp_path)


def test_blocks_carry_their_language_and_the_directives_just_before_them(tmp_path: Path) -> None:
    blocks = _page(tmp_path, "intro\n\n<!-- doc-test: retry: 5; check: a-claim -->\n\n```sh\nmq status\n```\n\n"
                             "```text\nok\n```\n\nprose\n<!-- doc-test: skip: needs a browser; really -->\n"
                             "```sh\njupyter lab\n```\n\n- a list\n\n  ```python\n  print(1)\n  ```\n")
    assert [(b.lang, b.text, b.line) for b in blocks] == [
        ("sh", "mq status\n", 5), ("text", "ok\n", 9), ("sh", "jupyter lab\n", 15), ("python", "print(1)\n", 21)]
    assert blocks[0].directives == {"retry": ["5"], "check": ["a-claim"]}
    assert blocks[1].directives == {}
    assert blocks[2].skip_reason == "needs a browser; really"


def test_a_directive_applies_only_to_the_next_block(tmp_path: Path) -> None:
    blocks = _page(tmp_path, "<!-- doc-test: wait -->\nsome prose in between\n```sh\nls\n```\n")
    assert blocks[0].directives == {}


@pytest.mark.parametrize("text, error", [
    ("<!-- doc-test: skip -->\n```sh\nls\n```\n", "needs a reason"),
    ("<!-- doc-test: skip:   -->\n```sh\nls\n```\n", "needs a reason"),
    ("<!-- doc-test: retyr: 5 -->\n```sh\nls\n```\n", "unknown doc-test directive 'retyr'"),
    ("```sh\nls\n", "never closed"),
])
def test_mistakes_in_a_page_are_named(tmp_path: Path, text: str, error: str) -> None:
    with pytest.raises(DocError, match=error):
        _page(tmp_path, text)


def test_samples_mask_numbers_but_not_words_or_columns() -> None:
    sample = "mq is up: broker-1 pid 13064, data in .mq\n  native   127.0.0.1:9092\n"
    assert sample_mismatch(sample, "mq is up: broker-1 pid 7, data in .mq\n native 127.0.0.1:29100\nnext:\n") is None
    assert "no line like" in sample_mismatch(sample, "mq is up: broker-1 pid 7, data in .mq2\n native 127.0.0.1:1\n")
    table = " broker   pid   alive   endpoint\n ───────────\n broker-1 13064 yes 127.0.0.1:9092\n"
    now = " broker pid alive fenced endpoint\n broker-1 9 yes no 127.0.0.1:1\n"
    assert sample_mismatch(table, now) is not None, "a new column makes the sample stale"


def test_samples_keep_order_allow_elision_and_prefixes() -> None:
    out = "a 1\nb 2\nc 3 and a long tail\n"
    assert sample_mismatch("a 1\n...\nc 3 ...\n", out) is None
    assert sample_mismatch("c 3 ...\na 1\n", out) is not None, "order matters"
    assert sample_mismatch("c 3\n", out) is not None, "without ... a line must match whole"


def test_exact_and_token_samples() -> None:
    assert sample_mismatch("p 20000\n", "p 20000\n", "exact") is None
    assert sample_mismatch("p 20000\n", "p 20001\n", "exact") is not None
    ls_in_columns = "0000.index  0000.log\n0033.log    leader-epoch-checkpoint\n"
    one_a_line = "0000.index\n0000.log\n0034.log\nleader-epoch-checkpoint\n"
    assert sample_mismatch(ls_in_columns, one_a_line, "tokens") is None
    assert "leader-epoch-checkpoint" in sample_mismatch(ls_in_columns, "0000.index\n0000.log\n", "tokens")


def test_a_session_keeps_state_and_records_every_failed_command(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    session = Session(tmp_path, {"PATH": "/usr/bin:/bin"}, tmp_path / "work")
    try:
        assert session.run("cd dir; X=42\n").ok
        result = session.run("pwd; echo $X\n")
        assert result.ok and result.output.split() == [str(tmp_path / "dir"), "42"]
        result = session.run("false\necho still here\n")
        assert result.rc == 0 and not result.ok and "false" in result.failed[0]
        assert session.run("(sleep 0.2; exit 3) &\necho started\n").ok
        waited = session.run(wait_script())
        assert not waited.ok and "a background job failed: exit 3" in waited.output
        assert session.run("sleep 0.3 && false &\n").ok
        assert session.run(wait_script()).ok is False
        with pytest.raises(TimeoutError):
            session.run("sleep 5\n", timeout_s=0.5)
    finally:
        session.close()
