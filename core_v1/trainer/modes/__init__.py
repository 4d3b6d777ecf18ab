"""Built-in trainer modes; importing this package registers them."""

from core_v1.trainer.modes import sync  # noqa: F401
