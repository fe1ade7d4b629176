"""GPU health: reading it (NVML on the node, DCGM metrics) and deciding what counts as unhealthy.

Nothing here talks to Kubernetes; the node agent and the controller publish
what these modules find through :mod:`queue_controller.kube.nodehealth`.
"""
