"""Data shipped with the package: the bundled example cluster."""
