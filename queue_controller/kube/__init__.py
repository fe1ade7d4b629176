"""The Kubernetes adapter: raw API objects in, core model out."""
