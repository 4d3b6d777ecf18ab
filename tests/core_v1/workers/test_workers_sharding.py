"""How rows are dealt to data-parallel ranks (`core_v1.workers.sharding`)."""

from core_v1.workers.sharding import shard_rows, token_imbalance


def _mini_batches(shard, rows_per_rank):
    return [set(shard.rows[i : i + rows_per_rank]) for i in range(0, len(shard.rows), rows_per_rank)]


def test_each_rank_holds_its_part_of_every_mini_batch():
    lengths = [5, 1, 9, 3, 7, 2, 8, 4]
    shards = shard_rows(lengths, world=2, mini_batch_rows=4)
    # Rank r's k-th piece of 2 rows and the other rank's k-th piece make up mini-batch k.
    for k, members in enumerate([{0, 1, 2, 3}, {4, 5, 6, 7}]):
        assert _mini_batches(shards[0], 2)[k] | _mini_batches(shards[1], 2)[k] == members
    assert not any(pad for shard in shards for pad in shard.padding)


def test_balanced_dealing_evens_tokens_and_keeps_row_counts():
    lengths = [100, 90, 1, 1, 1, 2, 2, 3]
    balanced = shard_rows(lengths, world=2, balance=True)
    contiguous = shard_rows(lengths, world=2, balance=False)
    assert [len(s.rows) for s in balanced] == [4, 4]
    assert token_imbalance(lengths, balanced) < token_imbalance(lengths, contiguous)
    assert contiguous[0].rows == (0, 1, 2, 3)


def test_uneven_rows_are_padded_so_every_rank_runs_the_same_steps():
    shards = shard_rows([3] * 5, world=2, mini_batch_rows=4)
    assert [len(s.rows) for s in shards] == [3, 3]
    assert sorted(row for s in shards for row in s.real_rows) == [0, 1, 2, 3, 4]
    assert sum(pad for s in shards for pad in s.padding) == 1


def test_one_rank_takes_the_batch_in_order():
    (shard,) = shard_rows([4, 2, 6], world=1, mini_batch_rows=2)
    assert shard.rows == (0, 1, 2) and not any(shard.padding)
