"""Tests of lab/cli: every command, run through its parser."""
