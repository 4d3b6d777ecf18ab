"""Key helpers: group / trajectory keys build, parse back, and reject malformed input clearly."""

import uuid

import pytest

from core_v1.transfer_store import InvalidKeyError, RowKey, group_key, parse_key, trajectory_key


def test_group_and_trajectory_keys_parse_back():
    uid = uuid.uuid4().hex
    assert group_key(uid) == uid
    assert parse_key(group_key(uid)) == RowKey(uid, None, None)
    assert parse_key(group_key(uid)).is_group

    key = trajectory_key(uid, 3, 1)
    assert key == f"{uid}_3_1"
    parsed = parse_key(key)
    assert parsed == RowKey(uid, 3, 1) and not parsed.is_group
    assert str(parsed) == key
    assert trajectory_key(uid, 2) == f"{uid}_2_0"  # index defaults to the first output


@pytest.mark.parametrize("uid", ["", str(uuid.UUID(int=7)), "abc_def", "xyz", 12])
def test_bad_uids_are_rejected_with_the_fix(uid):
    with pytest.raises(InvalidKeyError, match="uuid4"):
        group_key(uid)
    with pytest.raises(InvalidKeyError, match="uuid4"):
        trajectory_key(uid, 0, 0)


@pytest.mark.parametrize("session_id,index", [(-1, 0), (0, -2), (True, 0), (1.0, 0), ("1", 0)])
def test_bad_session_or_index_is_rejected(session_id, index):
    with pytest.raises(InvalidKeyError, match="non-negative int"):
        trajectory_key("abc123", session_id, index)


@pytest.mark.parametrize("key", ["abc_1", "abc_1_2_3", "abc_01_0", "abc__0", "ab-c_0_0", "abc_0_x", "", "g_0_0"])
def test_malformed_keys_do_not_parse(key):
    with pytest.raises(InvalidKeyError, match="malformed transfer-store key"):
        parse_key(key)


def test_non_string_key_is_rejected():
    with pytest.raises(InvalidKeyError, match="must be a str"):
        parse_key(("abc", 0, 0))
