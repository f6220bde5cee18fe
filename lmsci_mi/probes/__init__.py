"""Probes: collection, linear probes with control tasks, and DP-feature probes on a synthetic CFG."""
