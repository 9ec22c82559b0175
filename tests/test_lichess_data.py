"""The Lichess data path (spec training-and-adapters.md §5 batching/resume, §6): sources, filters,
validation split, CSR cache, parquet export, batches and their legal sets — checked against
python-chess and pyarrow over the shared Lichess games."""

from __future__ import annotations

import shutil
from pathlib import Path

import chess
import chess.pgn
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import pawn.data.lichess as lichess
from pawn.data.cache import TOKENS_FILE, cache_key
from pawn.data.layout import Layout
from pawn.data.lichess import LichessFilters, load_corpus, open_source
from pawn.data.lichess_batches import LEGAL_BYTES, GameBatches, ValidationBatches, epoch_seed, unpack_legal
from pawn.data.lichess_export import export_parquet
from pawn.errors import DataError, UsageError
from pawn.vocab import PAD_TOKEN, uci_to_token

DUMP = "lichess_db_2021-10-01_first1000_kdave-pgn-toys.pgn"  # monthly-dump dialect, Abandoned games
API = "lichess_api_export_2025-06_100games_rust-pgn-reader-legal.pgn"  # API dialect, FEN starts
UNSUPPORTED = {"Abandoned", "Rules infraction", "Unterminated"}


@pytest.fixture()
def two_files(shared_data: Path, tmp_path: Path) -> Path:
    """A folder with one file of each Lichess dialect (1,099 games)."""
    d = tmp_path / "pgn"
    d.mkdir()
    for name in (DUMP, API):
        shutil.copy(shared_data / "lichess" / name, d / name)
    return d


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("PAWN_DATA_CACHE", str(root))
    return root


def _elo(h: chess.pgn.Headers, key: str) -> int:
    try:
        return int(h.get(key, "0"))
    except ValueError:
        return 0


def oracle(folder: Path, elo_min: int, elo_max: int, min_ply: int) -> dict:
    """Independent count with python-chess: games kept, drops per reason, kept games' UCI moves."""
    out = {"read": 0, "elo": 0, "too_short": 0, "kept": [], "at_bound": 0}
    for f in sorted(folder.glob("*.pgn")):
        with open(f, encoding="utf-8") as fh:
            while (game := chess.pgn.read_game(fh)) is not None:
                out["read"] += 1
                h = game.headers
                if "FEN" in h or h.get("Variant", "Standard") not in ("Standard",):
                    continue
                if h.get("Termination") in UNSUPPORTED or h.get("Result", "*") == "*":
                    continue
                w, b = _elo(h, "WhiteElo"), _elo(h, "BlackElo")
                out["at_bound"] += bool({w, b} & {elo_min, elo_max})
                if not (elo_min <= w < elo_max and elo_min <= b < elo_max):
                    out["elo"] += 1
                    continue
                moves = [m.uci() for m in game.mainline_moves()][:512]
                if len(moves) < min_ply:
                    out["too_short"] += 1
                    continue
                out["kept"].append(moves)
    return out


def test_elo_filter_and_val_split_match_python_chess(two_files: Path):
    expect = oracle(two_files, 1500, 1800, 10)
    assert expect["at_bound"] >= 10  # games with an Elo exactly on a bound test the half-open band
    corpus = load_corpus(two_files, LichessFilters(1500, 1800, 10), val_games=100)
    n = len(expect["kept"])
    stats = corpus.caches[0].stats
    assert stats.read == expect["read"] == 1099
    assert stats.kept == n
    assert stats.dropped["elo"] == expect["elo"] and stats.dropped["too_short"] == expect["too_short"]
    n_val = min(100, n // 5)
    assert corpus.val_from == "tail" and (len(corpus.train), len(corpus.val)) == (n - n_val, n_val)
    # train is the head, val the tail, in file order: compare every game's moves
    for games, first in ((corpus.train, 0), (corpus.val, n - n_val)):
        for i in range(len(games)):
            got = games.tokens_flat[games.offsets[i]:games.offsets[i + 1]].tolist()
            assert got == [uci_to_token(u) for u in expect["kept"][first + i]], f"game {first + i}"
    assert corpus.train.offsets[-1] == corpus.val.offsets[0]  # disjoint, adjacent


def test_zero_survivors_names_every_reason(two_files: Path):
    with pytest.raises(DataError) as e:
        load_corpus(two_files, LichessFilters(elo_min=3500))
    msg = str(e.value)
    assert "\n" not in msg and "read 1,099 games" in msg
    assert "Elo outside the band" in msg and "unsupported termination" in msg and "FEN" in msg


def test_second_run_parses_nothing_and_flipped_byte_rebuilds(two_files: Path, monkeypatch, _cache: Path):
    calls = []
    real = lichess.parse_pgn
    monkeypatch.setattr(lichess, "parse_pgn", lambda *a, **k: calls.append(a) or real(*a, **k))
    f = LichessFilters(1200, 2200)
    first = load_corpus(two_files, f)
    assert len(calls) == 2 and first.caches[0].state == "built"
    key = cache_key(str(two_files.resolve()), "pgn", "train", 1200, 2200, 10)
    assert first.caches[0].path == _cache / key
    second = load_corpus(two_files, f)
    assert len(calls) == 2 and second.caches[0].state == "hit"
    np.testing.assert_array_equal(first.train.offsets, second.train.offsets)
    tokens = np.array(first.train.tokens_flat)

    path = _cache / key / TOKENS_FILE
    raw = bytearray(path.read_bytes())
    raw[1001] ^= 0x01
    path.write_bytes(bytes(raw))
    warnings: list[str] = []
    third = load_corpus(two_files, f, warn=warnings.append)
    assert third.caches[0].state == "rebuilt" and len(calls) == 4
    assert len(warnings) == 1 and "SHA-256 of tokens_flat.bin" in warnings[0]
    np.testing.assert_array_equal(np.array(third.train.tokens_flat), tokens)

    (_cache / key / ".complete").unlink()  # a partial cache
    fourth = load_corpus(two_files, f, warn=warnings.append)
    assert fourth.caches[0].state == "rebuilt" and "partial" in warnings[1]
    assert not list(_cache.glob("*.tmp-*")) and not list(_cache.glob("*.stale-*"))


def test_parquet_export_reads_back_as_the_pgn_path(two_files: Path, tmp_path: Path):
    out = tmp_path / "games.parquet"
    stats = export_parquet(two_files, out, LichessFilters(min_ply=2))
    table = pq.read_table(out)
    assert table.num_rows == stats.kept
    assert table.schema.field("tokens").type == pa.list_(pa.int16())
    rows = {r["site"]: r for r in table.to_pylist()}
    api = rows["https://lichess.org/K5Kl4Vh4"]  # first game of the API file: no clocks, lost on time
    assert [uci_to_token(u) for u in api["uci"]] == api["tokens"] and len(api["san"]) == api["game_length"] == 62
    assert (api["white_elo"], api["black_elo"], api["outcome_token"]) == (1254, 1295, 1978)
    assert api["clock"] == [0] * 62 and api["date"].isoformat() == "2025-06-19T17:41:22+00:00"
    assert api["san"][:2] == ["e4", "e5"] and api["white_player"] is None
    dump = rows["https://lichess.org/NRafdioG"]  # first game of the dump file: %clk on every move
    assert dump["clock"][:6] == [60, 60, 60, 59, 60, 58] and dump["opening"] == "Sicilian Defense: Modern Variations"
    f = LichessFilters(1500, 2000, 10)
    from_pgn, from_parquet = load_corpus(two_files, f), load_corpus(out, f)
    for a, b in ((from_pgn.train, from_parquet.train), (from_pgn.val, from_parquet.val)):
        np.testing.assert_array_equal(a.offsets - a.offsets[0], b.offsets - b.offsets[0])
        np.testing.assert_array_equal(a.outcome, b.outcome)
        np.testing.assert_array_equal(a.tokens_flat[a.offsets[0]:a.offsets[-1]], b.tokens_flat[b.offsets[0]:b.offsets[-1]])


def test_parquet_missing_column_is_one_line_error(tmp_path: Path):
    p = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"tokens": pa.array([[12, 34]], pa.list_(pa.int16())), "game_length": [2]}), p)
    with pytest.raises(DataError, match=r"bad\.parquet: missing required column 'outcome_token'"):
        load_corpus(p, LichessFilters(min_ply=1))
    pq.write_table(pa.table({"tokens": pa.array([[12, 34]], pa.list_(pa.int16())), "game_length": [2],
                             "outcome_token": pa.array([1969], pa.uint16())}), p)
    with pytest.raises(DataError, match="missing required column 'white_elo'"):
        load_corpus(p, LichessFilters(elo_min=1000, min_ply=1))


class FakeHub:
    """A ShardFetcher serving local parquet files; records that shards are held one at a time."""

    def __init__(self, files: dict[str, Path], tmp: Path):
        self.files, self.tmp, self.held, self.max_held, self.fetched = files, tmp, set(), 0, []

    def list_files(self, repo_id):
        return ["README.md", *self.files]

    def fetch(self, repo_id, filename):
        local = self.tmp / filename.replace("/", "_")
        shutil.copy(self.files[filename], local)
        self.held.add(local)
        self.fetched.append(filename)
        self.max_held = max(self.max_held, len(self.held))
        return local

    def release(self, path):
        self.held.discard(path)
        path.unlink()


def test_hub_source_reads_shards_one_at_a_time_and_uses_its_validation_split(shared_data: Path, tmp_path: Path):
    lich = shared_data / "lichess"
    shards = {}
    for i, (split, name) in enumerate([("train", DUMP), ("train", "lichess_db_2013-01_first100_reexported_chess.js-benchmark.pgn"),
                                       ("validation", API)]):
        out = tmp_path / f"{i}.parquet"
        export_parquet(lich / name, out, LichessFilters(min_ply=1))
        shards[f"data/{split}-{i:05d}-of-00003.parquet"] = out
    (tmp_path / "dl").mkdir()
    hub = FakeHub(shards, tmp_path / "dl")
    corpus = load_corpus("someone/lichess-mini", LichessFilters(min_ply=10), val_games=50, fetcher=hub)
    assert hub.max_held == 1 and not hub.held
    assert corpus.val_from == "validation split" and len(corpus.val) == 50
    expect_train = sum(int((pq.read_table(shards[k]).column("game_length").to_numpy() >= 10).sum())
                       for k in shards if "train" in k)
    assert len(corpus.train) == expect_train
    val_lengths = pq.read_table(shards["data/validation-00002-of-00003.parquet"]).column("game_length").to_numpy()
    np.testing.assert_array_equal(corpus.val.lengths, val_lengths[val_lengths >= 10][:50])
    assert corpus.caches[0].key.startswith("someone--lichess-mini_train_eany-any_p10_")
    n_fetch = len(hub.fetched)
    again = load_corpus("someone/lichess-mini", LichessFilters(min_ply=10), val_games=50, fetcher=hub)
    assert len(hub.fetched) == n_fetch and again.caches[1].state == "hit"


def test_batches_are_pure_functions_of_seed_and_step_and_resume_mid_epoch(two_files: Path):
    corpus = load_corpus(two_files, LichessFilters(min_ply=10))
    make = lambda seed=3: GameBatches(corpus.train, Layout(False), 128, 16, seed, steps_per_epoch=20)  # noqa: E731
    a, b = make(), make()
    assert a.steps_per_epoch == 20
    full = [x for _, x in zip(range(50), a.iter_from(0))]  # crosses two epoch boundaries
    resumed = [x for _, x in zip(range(23), b.iter_from(27))]
    for x, y in zip(full[27:], resumed):
        assert (x.step, x.epoch) == (y.step, y.epoch)
        for name in ("input_ids", "targets", "loss_mask", "attn_mask", "legal", "game_index"):
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name))
    assert full[20].epoch == 1 and full[19].epoch == 0
    # per-epoch permutation: v1's seed formula, distinct games within an epoch, differs by epoch/seed
    np.testing.assert_array_equal(a.permutation(1), np.random.default_rng(epoch_seed(3, 1)).permutation(len(corpus.train)))
    epoch0 = np.concatenate([x.game_index for x in full[:20]])
    assert len(set(epoch0.tolist())) == 320
    assert not np.array_equal(a.permutation(0), a.permutation(1))
    assert not np.array_equal(make(4).indices(0), a.indices(0))
    with pytest.raises(UsageError):
        GameBatches(corpus.train, Layout(False), 128, 16, steps_per_epoch=len(corpus.train) // 16 + 1)
    # validation: fixed order, every game once, the last batch padded with unsupervised rows
    val = GameBatches(corpus.val, Layout(False), 128, 16, shuffle=False, drop_last=False)
    batches = list(val.iter_from(0))
    idx = np.concatenate([x.game_index for x in batches])
    assert idx[idx >= 0].tolist() == list(range(len(corpus.val)))
    assert not batches[-1].loss_mask[batches[-1].game_index < 0].any()


def test_validation_holds_token_batches_only_and_gives_bit_identical_metrics(two_files: Path):
    """Issue 27: validation builds each batch's legal sets when it evaluates that batch; the set
    keeps only the token arrays, so its mask bytes do not grow with the number of val games."""
    import jax

    from pawn.config import ModelConfig
    from pawn.model import PAWNModel
    from pawn.train.adapter_step import BATCH_KEYS, batch_dict, make_validator

    corpus = load_corpus(two_files, LichessFilters(min_ply=10))
    B, T = 16, 64
    # what validation held before: every batch with its dense bit-packed legal sets
    dense = [batch_dict(b, (*BATCH_KEYS, "legal"))
             for b in GameBatches(corpus.val, Layout(False), T, B, shuffle=False, drop_last=False).iter_from(0, prefetch=0)]
    lazy = ValidationBatches(corpus.val, Layout(False), T, B, BATCH_KEYS)
    assert len(lazy) == len(dense) >= 3
    got = list(lazy)
    for a, b in zip(got, dense):
        assert a.keys() == b.keys()
        for k in b:
            np.testing.assert_array_equal(a[k], b[k])
    assert got[-1]["legal"].any() and not got[-1]["loss_mask"].all()  # a padded last batch
    model = PAWNModel(ModelConfig(d_model=32, n_layers=2, n_heads=1, d_ff=64), jax.random.key(3))
    validate = make_validator(legal_mask=True, illegal_penalty=0.0, dtype="float32")
    before, now = validate(model, dense), validate(model, lazy)
    assert now == before and before["positions"] > 0 and 0 < before["top1"] < 1  # to the last bit, every field
    # held: int32 input_ids/targets + bool masks = 10 bytes per position, no legal sets
    dense_bytes = sum(a.nbytes for b in dense for a in b.values())
    assert lazy.held_bytes == len(lazy) * B * T * 10 and lazy.held_bytes * 25 < dense_bytes
    assert lazy.legal_bytes_per_batch == B * T * LEGAL_BYTES
    # a third of the games: token bytes shrink with the set, the mask bytes (one batch) do not
    small = ValidationBatches(corpus.val.slice(0, len(corpus.val) // 3), Layout(False), T, B, BATCH_KEYS)
    assert len(small) < len(lazy) and small.held_bytes == len(small) * B * T * 10
    assert small.legal_bytes_per_batch == lazy.legal_bytes_per_batch
    assert ValidationBatches(corpus.val, Layout(False), T, B, BATCH_KEYS, legal=False).legal_bytes_per_batch == 0


@pytest.mark.parametrize("prepend_outcome", [False, True])
def test_legal_sets_equal_python_chess(two_files: Path, prepend_outcome: bool):
    corpus = load_corpus(two_files, LichessFilters(min_ply=10))
    layout = Layout(prepend_outcome)
    # seq_len 48: long games are cut (L = width fills the sequence), short ones end inside it
    batches = GameBatches(corpus.train, layout, 48, 8, 11)
    batch = batches.batch_at(7)
    legal = unpack_legal(batch.legal)
    assert batch.legal.shape == (8, 48, 248) and batch.legal.dtype == np.uint8
    width = layout.max_ply(48)
    seen_full = seen_short = False
    for row, g in enumerate(batch.game_index):
        moves = corpus.train.tokens_flat[corpus.train.offsets[g]:corpus.train.offsets[g + 1]][:width].tolist()
        n = len(moves)
        seen_full |= n == width
        seen_short |= n < width
        board = chess.Board()
        for ply in range(n + 1):
            pos = ply - 1 + layout.offset  # the position whose target is the move at this ply
            if ply > 0:
                board.push(chess.Move.from_uci(next(u for u in (m.uci() for m in board.legal_moves)
                                                    if uci_to_token(u) == moves[ply - 1])))
            if pos < 0:
                continue
            expect = {PAD_TOKEN} if ply == n else {uci_to_token(m.uci()) for m in board.legal_moves}
            assert set(np.nonzero(legal[row, pos])[0].tolist()) == expect, (row, ply)
            assert batch.loss_mask[row, pos] and batch.targets[row, pos] in expect
        assert not legal[row, layout.offset + n:].any() and not batch.loss_mask[row, layout.offset + n:].any()
    assert seen_full and seen_short


def test_bad_filters_and_sources(tmp_path: Path):
    with pytest.raises(UsageError, match="elo_min"):
        LichessFilters(2000, 1500)
    with pytest.raises(DataError, match="not a Hub dataset id"):
        open_source(tmp_path / "nope" / "x")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no .pgn or .parquet files"):
        open_source(tmp_path / "empty")


def test_cli_data_info_and_export(two_files: Path, tmp_path: Path):
    from typer.testing import CliRunner

    from pawn.cli import app

    runner = CliRunner()
    out = tmp_path / "x.parquet"
    r = runner.invoke(app, ["data", "export", str(two_files), "--out", str(out), "--max-games", "300"])
    assert r.exit_code == 0, r.output
    assert pq.read_table(out).num_rows == 300
    r = runner.invoke(app, ["data", "info", str(out), "--elo-min", "1500", "--elo-max", "2000"])
    assert r.exit_code == 0, r.output
    assert "300 /" in r.output and "built" in r.output
    r = runner.invoke(app, ["data", "export", str(two_files), "--out", str(tmp_path / "y.parquet"), "--elo-min", "9000"])
    assert r.exit_code == 1 and "read 1,099 games" in r.output and not (tmp_path / "y.parquet").exists()


def test_edited_source_file_invalidates_the_cache(two_files: Path):
    f = LichessFilters(min_ply=10)
    first = load_corpus(two_files, f)
    pgn = two_files / API
    text = pgn.read_text(encoding="utf-8")
    cut = text.index("[Event ", 10)  # drop the first game
    pgn.write_text(text[cut:], encoding="utf-8")
    warnings: list[str] = []
    second = load_corpus(two_files, f, warn=warnings.append)
    assert second.caches[0].state == "rebuilt" and "source files changed" in warnings[0]
    assert second.caches[0].stats.read == first.caches[0].stats.read - 1


def test_hub_fetcher_uses_huggingface_hub_and_deletes_each_shard(monkeypatch, tmp_path: Path):
    import huggingface_hub

    from pawn.data.lichess import HubFetcher

    calls = []

    class Api:
        def list_repo_files(self, repo_id, repo_type=None):
            calls.append(("list", repo_id, repo_type))
            return ["data/train-00000-of-00001.parquet"]

    def download(repo_id, filename, repo_type=None, local_dir=None):
        calls.append(("get", repo_id, filename, repo_type))
        p = Path(local_dir) / filename
        p.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"tokens": pa.array([[12, 34]], pa.list_(pa.int16())), "game_length": [2],
                                 "outcome_token": pa.array([1974], pa.uint16())}), p)
        return str(p)

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    fetcher = HubFetcher()
    src = open_source("owner/data", fetcher=fetcher)
    assert src.kind == "hub" and src.splits == {"train": ("data/train-00000-of-00001.parquet",)}
    local = fetcher.fetch("owner/data", "data/train-00000-of-00001.parquet")
    assert local.is_file()
    fetcher.release(local)
    assert not local.exists()
    assert calls[0] == ("list", "owner/data", "dataset") and calls[1][3] == "dataset"


def test_large_pgn_files_are_parsed_in_chunks_with_the_same_games(two_files: Path, monkeypatch, tmp_path: Path):
    whole = load_corpus(two_files, LichessFilters(min_ply=1), cache_dir=tmp_path / "a")
    pieces = []
    real = lichess.parse_pgn
    monkeypatch.setattr(lichess, "parse_pgn", lambda *a, **k: pieces.append(a) or real(*a, **k))
    monkeypatch.setattr(lichess, "PGN_CHUNK_BYTES", 50_000)
    chunked = load_corpus(two_files, LichessFilters(min_ply=1), cache_dir=tmp_path / "b")
    assert len(pieces) > 20 and all(isinstance(a[0], bytes) for a in pieces)
    assert chunked.caches[0].stats == whole.caches[0].stats
    np.testing.assert_array_equal(np.array(chunked.train.tokens_flat), np.array(whole.train.tokens_flat))
    np.testing.assert_array_equal(chunked.train.offsets, whole.train.offsets)


def test_unwritable_cache_is_one_line_naming_the_folder(two_files: Path, tmp_path: Path, monkeypatch):
    """A PAWN_DATA_CACHE that cannot be created (a file stands there) or a full disk while the
    cache is finished: one ``error:`` line naming the cache folder and PAWN_DATA_CACHE, exit 1,
    no traceback (it was a FileExistsError / OSError traceback), no finished cache; the scanned
    partial build is kept to be continued (``tests/test_data_nothing_lost.py``: on a real full disk)."""
    import errno

    from typer.testing import CliRunner

    from pawn.cli import app
    from pawn.data.cache import CacheWriter

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PAWN_DATA_CACHE", str(blocker / "cache"))
    r = CliRunner().invoke(app, ["data", "info", str(two_files)])
    assert r.exit_code == 1, r.output
    assert f"error: game cache {blocker / 'cache'}: cannot write it" in r.output and "PAWN_DATA_CACHE" in r.output
    assert "Traceback" not in r.output

    root = tmp_path / "full"
    monkeypatch.setenv("PAWN_DATA_CACHE", str(root))

    def full_disk(self, meta):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(CacheWriter, "finish", full_disk)
    r = CliRunner().invoke(app, ["data", "info", str(two_files)])
    assert r.exit_code == 1 and f"error: game cache {root}: cannot write it (No space left on device; " in r.output
    (partial,) = list(root.iterdir())  # no finished cache; the scanned partial build, kept
    assert partial.name.endswith(".partial") and f"the partial build {partial} is kept" in r.output
