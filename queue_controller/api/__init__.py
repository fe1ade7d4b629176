"""Typed models of the queue-controller.io custom resources."""
