import json
from pathlib import Path

import pandas as pd
import pytest

from workloads.tasks.loading import DataError, Source, load_records, subset

FIXTURES = Path(__file__).parent / "fixtures"
SOURCE = Source("openai/gsm8k", "test", ("question", "answer"), config="main")


def test_jsonl_json_parquet_and_dirs_give_the_same_records(tmp_path):
    jsonl = load_records("gsm8k", SOURCE, FIXTURES / "gsm8k.jsonl")
    as_json = tmp_path / "g.json"
    as_json.write_text(json.dumps(jsonl))
    parquet = tmp_path / "p" / "g.parquet"
    parquet.parent.mkdir()
    pd.DataFrame(jsonl).to_parquet(parquet)
    assert load_records("gsm8k", SOURCE, as_json) == jsonl
    assert load_records("gsm8k", SOURCE, parquet) == jsonl
    assert load_records("gsm8k", SOURCE, parquet.parent) == jsonl
    assert len(jsonl) == 3 and jsonl[0]["answer"].endswith("#### 10")


def test_offline_hub_without_data_names_dataset_and_flag():
    with pytest.raises(DataError) as err:
        load_records("gsm8k", SOURCE)
    message = str(err.value)
    assert "openai/gsm8k" in message and "--data" in message and "\n" not in message


@pytest.mark.parametrize("write, fragment", [
    (lambda p: p.write_text('{"question": "q"}\n'), r"lacks field\(s\) answer"),
    (lambda p: p.write_text('{"question": \n'), "cannot read"),
])
def test_bad_local_files_are_refused_clearly(tmp_path, write, fragment):
    path = tmp_path / "bad.jsonl"
    write(path)
    with pytest.raises(DataError, match=fragment):
        load_records("gsm8k", SOURCE, path)


def test_missing_path_and_wrong_kind(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_records("gsm8k", SOURCE, tmp_path / "nope.jsonl")
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(DataError, match="no .json, .jsonl or .parquet"):
        load_records("gsm8k", SOURCE, tmp_path)


def test_subsets_are_deterministic_and_nested():
    assert subset(5, None, 0) == [0, 1, 2, 3, 4] == subset(5, 9, 3)
    a = subset(100, 20, seed=1)
    assert a == subset(100, 20, seed=1) and len(set(a)) == 20
    assert subset(100, 10, seed=1) == a[:10]
    assert subset(100, 20, seed=2) != a
