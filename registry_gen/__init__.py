"""Static npm registry generator: a folder of archives becomes a tree any static host can serve."""

__version__ = "0.1.0"
