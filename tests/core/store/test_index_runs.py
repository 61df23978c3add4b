"""`IndexService.build_run` (the flusher's chunk of entries in one loop) writes
the same index files, byte for byte, as one `build_hashed` per entry, across
file rolls, entries with several keys and entries already indexed."""

import random

from core.store.index import IndexService, key_hash, message_key_hash


def _rows(n: int, seed: int) -> tuple[list[tuple], list[int]]:
    rnd = random.Random(seed)
    rows, hashes = [], []
    phys, ts = 0, 1_764_200_000_000
    for i in range(n):
        uniq = None if i % 7 == 3 else "7F000001%024X" % i
        keys = [f"k{rnd.randrange(20)}" for _ in range(rnd.choice((0, 0, 1, 2)))] if uniq else ["only"]
        size = rnd.randrange(100, 300)
        ts += rnd.choice((0, 1, 1500))
        rows.append(("T", uniq, keys, phys, size, ts))
        hashes += [key_hash(f"T#{k}") for k in keys] + ([key_hash(f"T#{uniq}")] if uniq else [])
        phys += size
    return rows, hashes


def _one_call_per_entry(svc: IndexService, rows: list[tuple], hashes: list[int]) -> None:
    at = 0
    for topic, uniq, keys, phys, size, ts in rows:
        k = len(keys) + (1 if uniq else 0)
        svc.build_hashed(hashes[at:at + k], phys, size, ts, False)
        at += k


def _files(directory) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_a_run_writes_what_one_call_per_entry_writes(tmp_path):
    rows, hashes = _rows(400, seed=3)
    one, run = tmp_path / "one", tmp_path / "run"
    for d in (one, run):
        d.mkdir()
    by_one = IndexService(str(one), 97, 150)  # small files: the run rolls several times
    by_run = IndexService(str(run), 97, 150)
    # the same file names: both are made at the entries' store times
    _one_call_per_entry(by_one, rows, hashes)
    assert by_run.build_run(rows[:250], hashes[:sum(len(r[2]) + (1 if r[1] else 0) for r in rows[:250])]) == (250, None)
    rest = hashes[sum(len(r[2]) + (1 if r[1] else 0) for r in rows[:250]):]
    assert by_run.build_run(rows[250:], rest) == (150, None)
    for svc in (by_one, by_run):
        svc.files[-1].finish_entry(rows[-1][3] + rows[-1][4], rows[-1][5])
    assert len(by_one.files) > 3
    assert _files(one) == _files(run)
    # every key finds its entry
    for topic, uniq, keys, phys, size, ts in rows[::37]:
        if uniq:
            assert phys in by_run.query(f"T#{uniq}", 10, 0, 2**62)
    # entries below the index's end are skipped (a replay): nothing changes
    before = _files(run)
    assert by_run.build_run(rows[100:120], hashes) == (20, None)
    assert _files(run) == before
    for svc in (by_one, by_run):
        svc.close()


def test_a_run_hashes_its_rows_keys_as_the_flusher_did(tmp_path):
    """Without hashes, a run hashes each row's keys, then its uniq key (what
    the store's flusher passes): the same files as with `key_hash` of each
    ``topic#key`` string, for keys of every kind of character."""
    rows, hashes = _rows(300, seed=5)
    odd = ["ü😀", "\udc80x", "", "x" * 300, "\u1080AB\ucb3e\x0c"]  # the last: Java hash Integer.MIN_VALUE
    rows = [(t, u, keys + [odd[i % len(odd)]] if i % 3 == 0 and keys else keys, p, s, ts)
            for i, (t, u, keys, p, s, ts) in enumerate(rows)]
    hashes = [key_hash(f"{t}#{k}") for t, u, keys, *_ in rows for k in [*keys, *([u] if u else [])]]
    given, hashed = tmp_path / "given", tmp_path / "hashed"
    for d in (given, hashed):
        d.mkdir()
    by_given = IndexService(str(given), 97, 150)
    by_hashing = IndexService(str(hashed), 97, 150)
    assert by_given.build_run(rows, hashes) == by_hashing.build_run(rows) == (300, None)
    for svc in (by_given, by_hashing):
        svc.files[-1].finish_entry(rows[-1][3] + rows[-1][4], rows[-1][5])
    assert _files(given) == _files(hashed)
    assert by_hashing.query("T#\u1080AB\ucb3e\x0c", 10, 0, 2**62)
    for svc in (by_given, by_hashing):
        svc.close()


def test_message_key_hash_is_key_hash_of_the_joined_string():
    for topic, key in [("TopicTest", "k1"), ("a", "ü😀"), ("T", "\udc80x"), ("t" * 127, "y" * 500),
                       ("T", "\u1080AB\ucb3e\x0c"), ("ü", "")]:
        assert message_key_hash(topic, key) == key_hash(f"{topic}#{key}")
    assert message_key_hash("T", "\u1080AB\ucb3e\x0c") == 0


def test_long_runs_write_what_one_call_per_entry_writes(tmp_path):
    """Runs longer than what a compiled run keeps waiting for its write pass
    (256 entries, written without the GIL), ending inside a file and across a
    roll, give the same bytes as one `build_hashed` per entry."""
    rows, hashes = _rows(1500, seed=11)
    one, run = tmp_path / "one", tmp_path / "run"
    for d in (one, run):
        d.mkdir()
    by_one = IndexService(str(one), 509, 1200)
    by_run = IndexService(str(run), 509, 1200)
    _one_call_per_entry(by_one, rows, hashes)
    cut = 700
    first = sum(len(r[2]) + (1 if r[1] else 0) for r in rows[:cut])
    assert by_run.build_run(rows[:cut]) == (cut, None)  # hashed by the run
    assert by_run.build_run(rows[cut:], hashes[first:]) == (len(rows) - cut, None)
    for svc in (by_one, by_run):
        svc.files[-1].finish_entry(rows[-1][3] + rows[-1][4], rows[-1][5])
    assert len(by_run.files) > 1
    assert _files(one) == _files(run)
    for svc in (by_one, by_run):
        svc.close()
