"""Capability probe (being built)."""
