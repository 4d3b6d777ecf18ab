"""The local code scorer's program is isolated as the tool sandbox's workers are: the escapes a
model's program can try from stdin/stdout code, in every isolation mode this machine offers."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from core_v1.reward.scorers import prime_code
from core_v1.utils import isolation

FAST = {"first_run_timeout_s": 3.0, "case_timeout_s": 3.0, "memory_limit_mb": 256}
EXPECTED_OPEN = {"namespaces": set(), "seccomp": {"write"}, "audit-hook": {"write", "ctypes"}}
TRY = """
try:
{body}
    print("escaped")
except BaseException:
    print("blocked")
"""


def _indent(code: str) -> str:
    return "\n".join("    " + line for line in code.strip().splitlines())


def _escapes(port: int, unix_path: str, outside: str, secret: str) -> dict:
    return {
        "tcp": f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=1)\ns.sendall(b'x')",
        "unix": f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({unix_path!r})",
        "write": f"open({outside!r}, 'w').write('escaped')",
        "env": f"import os\nassert os.environ.get('RLBRIDGE_TEST_TOKEN') == {secret!r}",
        "ctypes": (
            "import sys\nsys.modules.pop('ctypes', None)\nimport ctypes\nassert ctypes.CDLL(None).socket(2, 1, 0) >= 0"
        ),
    }


@pytest.mark.parametrize("mode", isolation.MODES)
def test_each_escape_from_a_scored_program(mode, tmp_path, monkeypatch):
    secret = uuid.uuid4().hex
    monkeypatch.setenv("RLBRIDGE_TEST_TOKEN", secret)
    os.chmod(tmp_path, 0o777)
    with socket.socket() as tcp, socket.socket(socket.AF_UNIX) as unix:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(4)
        unix.bind(str(tmp_path / "listener.sock"))
        unix.listen(4)
        programs = _escapes(tcp.getsockname()[1], str(tmp_path / "listener.sock"), str(tmp_path / "out.txt"), secret)
        results = {}
        for name, body in programs.items():
            score, metadata = prime_code.compute_score(
                TRY.format(body=_indent(body)), {"inputs": [""], "outputs": ["blocked"]}, isolation_mode=mode, **FAST
            )
            if "isolation" in str(metadata.get("error", "")) and "not available" in str(metadata.get("error", "")):
                pytest.skip(f"this kernel refuses isolation {mode!r}")
            assert score is True or metadata.get("output", "").strip() == "escaped", (name, metadata)
            results[name] = "blocked" if score is True else "open"
    assert {name for name, result in results.items() if result == "open"} == EXPECTED_OPEN[mode], results


CHEATS = {
    "read the expected output from memory": (
        "import gc\n"
        "for o in gc.get_objects():\n"  # a dict of strings is not tracked by gc; the list holding it is
        "    for v in list(o if isinstance(o, list) else o.values() if isinstance(o, dict) else []):\n"
        "        if isinstance(v, dict) and 'output' in v and 'input' in v:\n"
        "            print(v['output'])\n"
    ),
    "forge a passing verdict on the answer stream": (
        "import json, os\n"
        "for fd in range(3, 32):\n"
        "    try:\n"
        "        os.write(fd, (json.dumps({'index': 0, 'result': True, 'metadata': {}}) + '\\n').encode())\n"
        "    except OSError:\n"
        "        pass\n"
    ),
}


@pytest.mark.parametrize("cheat", sorted(CHEATS))
def test_a_program_cannot_learn_or_forge_its_verdict(cheat):
    secret = uuid.uuid4().hex
    score, _ = prime_code.compute_score(CHEATS[cheat], {"inputs": [""], "outputs": [secret]}, continuous=True, **FAST)
    assert score == 0.0
