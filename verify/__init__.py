"""The verification job of SPEC 8: a PySpark job that checks a chaos run's ledger against the
committed log and every replica's segment files (``verify.job.run_verification``)."""
