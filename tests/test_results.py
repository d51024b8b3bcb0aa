"""The tuners' results files: plain JSON lines or gzip-compressed (the records in docs/perf), read and
appended to the same way (no GPU needed)."""
import gzip
import json

from gemmgen.harness.core.results import append_result, load_results


def test_a_compressed_results_file_reads_and_appends_like_a_plain_one(tmp_path):
    rows = [{"name": "a", "status": "ok"}, {"name": "b", "status": "local-memory"}]
    plain, packed = tmp_path / "r.jsonl", tmp_path / "r.jsonl.gz"
    for path in (plain, packed):
        for row in rows:
            append_result(path, row)
    assert load_results(plain) == load_results(packed) == rows
    # each append is a gzip member of its own: the file stays one stream for gzip, zcat and the loader
    assert [json.loads(x) for x in gzip.decompress(packed.read_bytes()).splitlines()] == rows


def test_a_compressed_file_cut_by_an_interruption_keeps_the_rows_before_the_cut(tmp_path):
    rows = [{"name": f"v{i}", "status": "ok", "time_us": float(i)} for i in range(200)]
    packed = tmp_path / "r.jsonl.gz"
    packed.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode()))
    packed.write_bytes(packed.read_bytes()[:-40])   # the stream's end lost
    kept = load_results(packed)
    assert 0 < len(kept) <= len(rows) and kept == rows[:len(kept)]
    assert load_results(tmp_path / "absent.jsonl.gz") == []
