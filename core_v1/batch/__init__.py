"""The training batch between the transfer store and the engines.

`meta.BatchMeta` is what the trainer holds (keys and per-row scalars); `layout` turns store rows
into the padded training layout of docs/CONTRACTS.md and writes per-token outputs back. It sits
above `core_v1.transfer_store` and below the workers and the trainer, which both use it.
"""
