"""The registry's memory: what the build and the write side remember between runs."""
