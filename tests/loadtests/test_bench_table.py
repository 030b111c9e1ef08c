"""The table-view benchmark runs end to end at tiny size so it cannot rot."""

from __future__ import annotations

from loadtests.bench_table import merge, parse_args, view


def test_merge_measures_every_policy_and_last_writer_wins_supersedes():
    lines = merge(records=2000, keys=100, skew_ms=50, runs=1)
    runs = {line["policy"]: line for line in lines if not line.get("summary")}
    assert set(runs) == {"none", "home-region", "last-writer-wins"}
    assert all(line["rows"] == 100 and line["rec_per_s"] > 0 for line in runs.values())  # each key has a home
    lww = runs["last-writer-wins"]
    assert lww["superseded"] > 0 and lww["applied"] + lww["superseded"] == 2000
    assert runs["home-region"]["foreign"] > 0 and runs["none"]["applied"] == 2000


def test_view_reads_a_topic_and_its_remote_copy_to_the_same_digest_twice():
    lines = view(records=3000, keys=200, skew_ms=50, runs=2)
    assert [line["rows"] for line in lines if not line.get("summary")] == [200, 200]
    assert lines[-1]["summary"] and lines[-1]["digests_agree"] and lines[-1]["median_rec_per_s"] > 0


def test_arguments():
    args = parse_args(["--only", "merge", "--records", "10"])
    assert (args.only, args.records, args.keys, args.runs) == (["merge"], 10, 10_000, 3)
