"""KubeRay's kinds (``ray.io/v1``): a RayCluster on its own, and a RayJob with the cluster
it makes and its submitter.  What both read of a cluster's spec is in clusterspec.py."""

from queue_controller.kube.kinds.ray.cluster import RayClusterKind
from queue_controller.kube.kinds.ray.job import RAY_JOB_LABEL, RayJobKind

__all__ = ["RAY_JOB_LABEL", "RayClusterKind", "RayJobKind"]
