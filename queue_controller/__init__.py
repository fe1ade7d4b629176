"""queue-controller: gang admission for Kubernetes GPU clusters."""

__version__ = "0.1.0"
