"""Migration tool: rewrite V0-era launch scripts, YAML configs and Python code to V1.

Run `python -m codemods.migrate --help`; the rules live in `codemods.rules`, the V0 -> V1 facts in
`shims.rename_table`.
"""
