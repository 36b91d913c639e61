"""Benchmarks behind `manage.py bench`: each prints figures; none is a test."""
