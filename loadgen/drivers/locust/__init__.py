"""Locust: a master and its workers, on this machine or on others."""
