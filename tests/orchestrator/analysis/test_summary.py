import json

from orchestrator.analysis.summary import ServerStarts, server_starts


def test_server_starts_sum_each_shards_starts_and_their_seconds_and_skip_what_cannot_be_read(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    for name, shard in {"a": {"engine_starts": 2, "engine_start_s": 30.5},
                        "b": {"engine_starts": 0, "engine_start_s": 0.0},
                        "c": {"engine_starts": 1, "engine_start_s": 14.25},
                        "d": {"records": []}}.items():  # a specsweep-engine shard: no server
        (shards / f"{name}.json").write_text(json.dumps(shard))
    (shards / "e.json").write_text('{"engine_starts": 9')  # cut short: measured again, not counted
    assert server_starts(shards) == ServerStarts(3, 44.75)
    assert server_starts(tmp_path / "none") == ServerStarts(0, 0.0)  # no shard cache yet
