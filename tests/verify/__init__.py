"""Tests of the SPEC 8 verification job: every check against a planted anomaly."""
