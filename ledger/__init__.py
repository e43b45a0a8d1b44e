"""The chaos ledger's format (ledger/format.py): chaos writes it, verify reads it.

A leaf: it imports nothing of this project, so the chaos workload and the verification job
share the format without importing each other (docs/design.md, "The ledger's format").
"""
