"""What the supervisor names as the cause of a replica's death: the last error its log reports."""

from __future__ import annotations

from ray.exceptions import ActorUnavailableError

from core_v1.rollout.supervisor import death_cause, last_error_line

_TRACEBACK = """\
Loading weights: 100%|##########| 27/27
/site-packages/transformers/x.py:12: FutureWarning: `foo` is deprecated
Traceback (most recent call last):
  File "engine.py", line 80, in step
    logits = self.model(ids)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB
"""


def _unavailable() -> ActorUnavailableError:
    return ActorUnavailableError("The actor is temporarily unavailable: RpcError", b"\0" * 16)


def test_the_last_error_of_the_log_is_the_cause(tmp_path):
    log = tmp_path / "worker-1.err"
    log.write_text(_TRACEBACK)
    assert last_error_line(str(log)) == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert death_cause(str(log), _unavailable()).startswith("torch.OutOfMemoryError: CUDA out of memory")


def test_a_log_moved_by_ray_is_found_in_old(tmp_path):
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "worker-2.err").write_text("Fatal Python error: Segmentation fault\n")
    assert last_error_line(str(tmp_path / "worker-2.err")) == "Fatal Python error: Segmentation fault"


def test_a_log_without_an_error_means_killed_from_outside(tmp_path):
    log = tmp_path / "worker-3.err"
    log.write_text("Loading weights: 100%\n/x.py:1: UserWarning: an error-free warning\n")
    assert last_error_line(str(log)) is None
    assert "killed from outside (a signal such as SIGKILL, or the OOM killer)" in death_cause(str(log), _unavailable())
    assert "no log of it was found" in death_cause(None, _unavailable())
