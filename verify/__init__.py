"""The verification job (docs/design.md "Verification job"): a PySpark job that checks a chaos run's
ledger against the committed log and every replica's segment files
(``verify.job.run_verification``)."""
