"""The chaos ledger's format (ledger/format.py): chaos writes it, verify reads it. Its two forms:
Parquet chunks (ledger/columnar.py) and JSON lines (ledger/jsonl.py); what both hold
(ledger/entries.py); conversion between them (ledger/convert.py); and the consumer group's
ledger beside it, R/consumed/ (ledger/consumed.py: what a chaos run's consumers consumed,
committed and were assigned).

A leaf: it imports nothing of this project, so the chaos workload and the verification job
share the format without importing each other (docs/design.md, "The ledger's format").
"""
