"""The local Kubernetes control plane with fake GPU nodes: for tests, demos and benchmarks.

The binaries are built from pinned Go modules by ``deploy/local-cluster/build.sh``;
this package starts them on loopback, creates nodes from a node-pool file, and
stops them again.
"""

from queue_controller.localcluster.cluster import ClusterError, LocalCluster
from queue_controller.localcluster.state import Layout, Status

__all__ = ["ClusterError", "Layout", "LocalCluster", "Status"]
