"""Tests for k_transform; `tests.corpus` holds the shared program corpus."""
