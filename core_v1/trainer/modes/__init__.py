"""Built-in trainer modes; importing this package registers them."""

from core_v1.trainer.modes import colocate_async, separate_async, sync  # noqa: F401
