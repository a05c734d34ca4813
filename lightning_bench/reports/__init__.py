"""Reports over written records: `lightning_bench results` (a table across runs)."""
